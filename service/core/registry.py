"""The model registry: which artifact version serves each configured model.

Each model keeps up to ``keep_versions`` loaded versions; the newest one loaded serves
requests that do not pin a version. ``reload`` loads the newest version on disk in a
worker thread, warms it, and swaps it in with one assignment on the event loop, so a
request that already holds a runner finishes on it. If loading fails, the old
version keeps serving and the error is raised as ``ReloadFailed``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import anyio.to_thread
import numpy as np

from xla_costmodel.manifest import ArtifactError, list_versions
from xla_costmodel.runner import ArtifactRunner, SessionOptions
from xla_costmodel.service.core.errors import (
    ModelNotFound,
    NotReady,
    ReloadFailed,
    VersionNotLoaded,
)
from xla_costmodel.tpugraphs.arrays import make_graph
from xla_costmodel.tpugraphs.spec import NODE_FEAT_DIM

log = logging.getLogger(__name__)
LOAD_FAILED = "failed to load (the service log has the cause)"


class RegistryEvents(Protocol):
    """What the registry reports (``xla_costmodel.service.metrics.models.RegistryMetrics`` implements it)."""

    def model_versions(self, name: str, loaded: Sequence[ArtifactRunner]) -> None: ...
    def model_reload(self, name: str, result: str) -> None: ...


@dataclass
class ModelSlot:
    name: str
    versions: dict[str, ArtifactRunner] = field(default_factory=dict)  # oldest first
    current: ArtifactRunner | None = None
    error: str | None = None  # the operator's: paths, onnxruntime's words
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def status(self) -> str | None:
        """What anonymous clients may read of ``error`` (/readyz, 503 bodies): that
        it failed, not the artifact's path or onnxruntime's text, which the log
        and the admin's reload answer have."""
        return None if self.error is None else LOAD_FAILED


@dataclass(frozen=True)
class ReloadResult:
    name: str
    previous_version: str | None
    version: str
    changed: bool
    loaded_versions: list[str]


def load_and_warm(path: Path, options: SessionOptions) -> ArtifactRunner:
    """Open both sessions and run them once on a tiny graph (blocking)."""
    runner = ArtifactRunner(path, options)
    spec = runner.spec
    graph = make_graph(
        np.zeros((2, NODE_FEAT_DIM), np.float32),
        np.array([63, 2], np.uint8),  # parameter -> add
        np.array([[1, 0]], np.int64),
        np.array([1], np.int64) if spec.per_node else None,
    )
    # Per node, -1 everywhere: "the compiler chooses" each node's layout.
    shape = (1, *spec.config_shape(graph.num_configurable))
    configs = np.full(shape, -1 if spec.per_node else 0, np.float32)
    try:
        scores = runner.score(runner.encode(graph), configs)
    except Exception as exc:  # onnxruntime raises untyped errors
        raise ArtifactError(f"{path}: warm-up run failed: {exc}") from None
    if scores.shape != (1,) or not np.isfinite(scores).all():
        raise ArtifactError(
            f"{path}: warm-up scores are {scores!r}, expected one finite value"
        )
    return runner


class ModelRegistry:
    def __init__(
        self,
        model_dir: Path,
        names: Sequence[str],
        options: SessionOptions,
        keep_versions: int,
        events: RegistryEvents,
    ) -> None:
        self.model_dir = model_dir
        self.options = options
        self.keep_versions = keep_versions
        self.events = events
        self._slots = {name: ModelSlot(name) for name in names}

    @property
    def ready(self) -> bool:
        """True when every configured model serves a loaded, warmed version."""
        return all(slot.current is not None for slot in self._slots.values())

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is a configured model (loaded or not)."""
        return name in self._slots

    def slots(self) -> list[ModelSlot]:
        return list(self._slots.values())

    def loaded(self) -> list[ArtifactRunner]:
        """Every loaded version of every model."""
        return [r for slot in self._slots.values() for r in slot.versions.values()]

    def get(self, name: str, version: str | None = None) -> ArtifactRunner:
        """The runner to use for one request; hold on to it for the whole request."""
        slot = self._slots.get(name)
        if slot is None:
            known = ", ".join(self._slots)
            raise ModelNotFound(f"unknown model {name!r} (serving: {known})", "model")
        if slot.current is None:
            raise NotReady(f"model {name!r} is not loaded: {slot.status or 'loading'}")
        if version is None:
            return slot.current
        runner = slot.versions.get(version)
        if runner is None:
            loaded = ", ".join(slot.versions)
            raise VersionNotLoaded(
                f"{name} version {version} is not loaded (loaded: {loaded})",
                "model_version",
            )
        return runner

    async def load_all(self) -> None:
        """Load every configured model; failures are logged and leave it not ready."""
        for name in self._slots:
            try:
                await self.reload(name)
            except ReloadFailed as exc:
                log.error("model %s failed to load: %s", name, exc.message)

    async def reload(self, name: str) -> ReloadResult:
        """Load, warm and swap in the newest version of ``name`` on disk."""
        slot = self._slots.get(name)
        if slot is None:
            raise ModelNotFound(f"unknown model {name!r}", "model")
        async with slot.lock:
            previous = slot.current.version if slot.current else None
            try:
                runner = await self._load_newest(slot)
            except (
                Exception
            ) as exc:  # any failure to load leaves the old version serving
                if not isinstance(exc, ArtifactError):
                    log.exception("unexpected error loading %s", name)
                slot.error = str(exc) or type(exc).__name__
                self.events.model_reload(name, "failed")
                raise ReloadFailed(slot.error) from None
            slot.error = None
            changed = runner is not slot.current
            if changed:
                self._swap(slot, runner)
            self.events.model_reload(name, "loaded" if changed else "unchanged")
            log.info("model %s serves version %s", name, runner.version)
            return ReloadResult(
                name, previous, runner.version, changed, list(slot.versions)
            )

    async def _load_newest(self, slot: ModelSlot) -> ArtifactRunner:
        versions = list_versions(self.model_dir, slot.name)
        if not versions:
            raise ArtifactError(f"{self.model_dir / slot.name}: no versions found")
        newest = versions[-1]
        if slot.current is not None and slot.current.version == newest:
            return slot.current
        path = self.model_dir / slot.name / newest
        runner = await anyio.to_thread.run_sync(load_and_warm, path, self.options)
        if runner.version != newest:
            raise ArtifactError(f"{path}: manifest says version {runner.version}")
        return runner

    def _swap(self, slot: ModelSlot, runner: ArtifactRunner) -> None:
        slot.versions.pop(runner.version, None)
        slot.versions[runner.version] = runner
        while len(slot.versions) > self.keep_versions:
            slot.versions.pop(next(iter(slot.versions)))
        slot.current = (
            runner  # the swap: requests already holding the old runner keep it
        )
        self.events.model_versions(slot.name, list(slot.versions.values()))
