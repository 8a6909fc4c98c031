"""Measured runtimes fed back by autotuners: checked, scored, appended to disk.

    FeedbackRecorder.record(req)   validate, score with the model, write, update quality
    FeedbackLog.write(entry)       one JSON line per request, one file per UTC day
    measure(scores, runtimes)      Kendall tau-b and top-1 slowdown (``tpugraphs.metrics``)
    OnlineQuality                  running means per (model, version) since start

The file format is documented in ``docs/feedback.md``. A request is acknowledged only
once its line is written (and, with ``fsync``, on disk); any ``OSError`` on the way is
``FeedbackUnavailable`` (503), so the client may resend it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.to_thread
import numpy as np
import numpy.typing as npt

from costmodel.runner import ArtifactRunner
from service.core.ranker import Ranker, Scored
from service.errors import FeedbackUnavailable, InvalidRequest, RankingNotFound
from tpugraphs.metrics import kendall_tau, topk_slowdown

FORMAT = 1
INT64_MAX = (1 << 63) - 1
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


class FeedbackEvents(Protocol):
    """What the recorder reports (``service.metrics.Metrics`` implements it)."""

    def feedback_stored(
        self, model: str, version: str, measurements: int, quality: Quality
    ) -> None: ...


@dataclass(frozen=True)
class FeedbackRequest:
    model: str
    model_version: str | None
    graph_id: str
    configs: Any | None
    config_indices: Sequence[int] | None
    runtimes_ns: Sequence[int]
    request_id: str | None = None


@dataclass(frozen=True)
class Quality:
    """Kendall tau-b and top-1 slowdown; None where undefined."""

    kendall_tau: float | None = None
    top1_slowdown: float | None = None


@dataclass(frozen=True)
class FeedbackResult:
    stored: int
    model: str
    model_version: str
    graph_id: str
    quality: Quality


@dataclass(frozen=True)
class FeedbackEntry:
    """One request's line, before it is stamped with a time and encoded."""

    request_id: str | None
    model: str
    model_version: str
    graph_id: str
    config_indices: Sequence[int] | None
    configs: np.ndarray[Any, Any]  # as sent: float32 or a compact integer dtype
    runtimes_ns: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float32]
    quality: Quality = field(default_factory=Quality)

    def line(self, when: datetime) -> bytes:
        record = {
            "format": FORMAT,
            "time": when.isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "request_id": self.request_id,
            "model": self.model,
            "model_version": self.model_version,
            "graph_id": self.graph_id,
            "config_indices": self.config_indices,
            "configs": _compact(self.configs),
            "runtimes_ns": self.runtimes_ns.tolist(),
            "scores": self.scores.tolist(),
            "kendall_tau": self.quality.kendall_tau,
            "top1_slowdown": self.quality.top1_slowdown,
        }
        text = json.dumps(record, separators=(",", ":"), allow_nan=False)
        return (text + "\n").encode()


# Floats below this magnitude that are integral are exactly their int64 value.
EXACT_INT = 2**53


def _compact(configs: np.ndarray[Any, Any]) -> list[Any]:
    """Nested lists; integers where that loses nothing (config features are small
    integers). Large or non-finite floats stay floats: ``astype(int64)`` would wrap
    them (1e20 became -9223372036854775808)."""
    if configs.dtype.kind in "iub":
        return list(configs.tolist())
    if configs.size and _lossless_ints(configs):
        return list(configs.astype(np.int64).tolist())
    return list(configs.tolist())


def _lossless_ints(values: np.ndarray[Any, Any]) -> bool:
    """True when every (float) value is finite, integral and below 2**53."""
    finite = np.isfinite(values).all()
    return bool(
        finite
        and np.abs(values).max(initial=0) < EXACT_INT
        and np.array_equal(values, np.round(values))
    )


def measure(scores: npt.ArrayLike, runtimes: npt.ArrayLike) -> Quality:
    """Both metrics as ``tpugraphs.metrics`` defines them, with K = 1 for the slowdown.

    None for both with fewer than two distinct runtimes: there is nothing to rank.
    """
    if np.unique(np.asarray(runtimes)).size < 2:
        return Quality()
    tau = kendall_tau(scores, runtimes)
    return Quality(None if np.isnan(tau) else tau, topk_slowdown(scores, runtimes, 1))


class OnlineQuality:
    """Running means of each metric per (model, version), over requests where defined."""

    def __init__(self) -> None:
        self._sums: dict[tuple[str, str, str], tuple[float, int]] = {}

    def add(self, model: str, version: str, quality: Quality) -> Quality:
        """Count one request's values; returns the running means after it."""
        means: dict[str, float | None] = {}
        for name, value in vars(quality).items():
            key = (model, version, name)
            total, n = self._sums.get(key, (0.0, 0))
            if value is not None:
                total, n = total + value, n + 1
                self._sums[key] = (total, n)
            means[name] = total / n if n else None
        return Quality(**means)


class FeedbackLog:
    """Append-only JSON Lines under ``directory``: ``feedback-YYYY-MM-DD.jsonl`` (UTC).

    Each line is one ``write`` of the whole line on an ``O_APPEND`` descriptor under a
    lock, so lines never interleave, even across processes on a local filesystem. With
    ``fsync`` each line, and the directory entry of a new day's file, is flushed to disk
    before ``write`` returns. Blocking: call it from a worker thread.
    """

    def __init__(
        self, directory: Path, fsync: bool = True, clock: Clock = utc_now
    ) -> None:
        self.directory = directory
        self.fsync = fsync
        self.clock = clock
        self._lock = threading.Lock()

    def path(self, when: datetime) -> Path:
        return self.directory / f"feedback-{when.astimezone(UTC):%Y-%m-%d}.jsonl"

    def write(self, entry: FeedbackEntry) -> Path:
        """Stamp, encode and append one entry; ``FeedbackUnavailable`` if it fails."""
        with self._lock:
            when = self.clock().astimezone(UTC)
            path = self.path(when)
            try:
                self._append(path, entry.line(when))
            except OSError as exc:
                raise FeedbackUnavailable(
                    f"feedback not stored: cannot write {path}: {exc.strerror or exc}"
                ) from None
            return path

    def _append(self, path: Path, line: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        created = not path.exists()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        fd = os.open(path, flags, 0o644)
        try:
            written = os.write(fd, line)
            if written != len(line):
                with contextlib.suppress(OSError):  # end the torn line; readers skip it
                    os.write(fd, b"\n")
                raise OSError(
                    errno.EIO, f"short write ({written} of {len(line)} bytes)"
                )
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if created and self.fsync:
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


class FeedbackRecorder:
    """Checks a feedback request, scores its configs, writes it, then counts it."""

    def __init__(
        self, ranker: Ranker, log: FeedbackLog, events: FeedbackEvents
    ) -> None:
        self.ranker = ranker
        self.log = log
        self.events = events
        self.online = OnlineQuality()
        self._writer = anyio.CapacityLimiter(1)  # queue on the loop, not in threads

    async def record(self, req: FeedbackRequest) -> FeedbackResult:
        runner = self.ranker.registry.get(req.model, req.model_version)
        if (req.configs is None) == (req.config_indices is None):
            raise InvalidRequest(
                "give exactly one of configs or config_indices", "configs"
            )
        runtimes = self._runtimes(req.runtimes_ns)
        if req.configs is not None:
            configs, scores = await self.ranker.score(
                runner, req.graph_id, req.configs, "configs"
            )
        else:
            configs, scores = self._pick(runner, req.graph_id, req.config_indices or [])
        if len(configs) != len(runtimes):
            raise InvalidRequest(
                f"{len(configs)} configs but {len(runtimes)} runtimes", "runtimes_ns"
            )
        entry = FeedbackEntry(
            req.request_id, runner.name, runner.version, req.graph_id,
            req.config_indices, configs, runtimes, scores,
        )  # fmt: skip
        with anyio.CancelScope(shield=True):  # once written, always counted
            quality = await anyio.to_thread.run_sync(
                self._store, entry, limiter=self._writer
            )
            running = self.online.add(runner.name, runner.version, quality)
            self.events.feedback_stored(
                runner.name, runner.version, len(runtimes), running
            )
        return FeedbackResult(
            len(runtimes), runner.name, runner.version, req.graph_id, quality
        )

    def _store(self, entry: FeedbackEntry) -> Quality:
        quality = measure(entry.scores, entry.runtimes_ns)
        self.log.write(replace(entry, quality=quality))
        return quality

    def _runtimes(self, values: Sequence[int]) -> npt.NDArray[np.int64]:
        if not values:
            raise InvalidRequest("no runtimes given", "runtimes_ns")
        if len(values) > self.ranker.limits.max_configs:
            raise InvalidRequest(
                f"more than {self.ranker.limits.max_configs} runtimes", "runtimes_ns"
            )
        for i, value in enumerate(values):
            if not 0 < value <= INT64_MAX:
                raise InvalidRequest(
                    f"runtimes must be in [1, 2^63-1] ns, got {value}",
                    f"runtimes_ns[{i}]",
                )
        return np.asarray(values, np.int64)

    def _pick(self, runner: ArtifactRunner, gid: str, indices: Sequence[int]) -> Scored:
        if not indices:
            raise InvalidRequest("no config indices given", "config_indices")
        if len(indices) > self.ranker.limits.max_configs:
            raise InvalidRequest(
                f"more than {self.ranker.limits.max_configs} indices", "config_indices"
            )
        recalled = self.ranker.recall(runner, gid)
        if recalled is None:
            raise RankingNotFound(
                f"no rank request for graph {gid} with {runner.name} v{runner.version} "
                "is remembered by this process (they are kept per process, "
                "best-effort); send the configs instead",
                "config_indices",
            )
        configs, scores = recalled
        for i, index in enumerate(indices):
            if not 0 <= index < len(scores):
                raise InvalidRequest(
                    f"index {index} is out of range: the last rank request had "
                    f"{len(scores)} configs",
                    f"config_indices[{i}]",
                )
        picked = np.asarray(indices, np.int64)
        return configs[picked], scores[picked]
