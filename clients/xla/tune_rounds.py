"""The rounds of one ``tune`` run: pick, compile, measure, feed back; then choose.

``Bench`` holds the lowered program and its default controls: it compiles configs
through the collector's ``probe`` (each runs once after compiling, its output
compared with the default's), keeps the program's crash journal, measures
executables beside the controls with ``measure.py``'s protocol, and times a
candidate against the default in interleaved pairs. ``Rounds`` plays the rounds of
``policy.plan`` with a picker (``pickers.py``) and makes the final choice
(``Rounds.decide``, by ``decide.py``: Mann-Whitney and a minimum gain). jax is
imported by the calls that need it (``probe`` imports it), never at import.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from xla_costmodel.clients.errors import CostModelError
from xla_costmodel.clients.xla import decide, policy
from xla_costmodel.clients.xla.measure import (
    TimingProtocol,
    disagreement,
    measure,
    time_once,
)
from xla_costmodel.clients.xla.pickers import Picker
from xla_costmodel.tpugraphs import xla_cpu

Options = dict[str, xla_cpu.OptionValue]
Strategy = Literal["model", "random"]
Log = Callable[[str], None]
Rows = npt.NDArray[np.float32]
# A tuning run measures a handful of executables several times: keep each measurement
# short; rounds stop after 10 s once 3 are done.
TUNE_PROTOCOL = TimingProtocol(runs=3, min_rounds=3, max_rounds=5, budget_s=10.0)


@dataclass(frozen=True)
class TuneConfig:
    """Everything ``tune`` takes besides the program, the client and ``progress``."""

    budget: int = 8
    model: str = "xla_cpu"
    strategy: Strategy = "model"
    seed: int = 0
    rounds: int | None = None  # default min(3, budget)
    candidates: int = 256
    target: str | None = None  # default machine.target()
    controls: int = 2  # separately compiled copies of the default
    confirm: int = 2  # best configs measured again before choosing
    min_gain: float = decide.MIN_GAIN  # a kept config is at least this much faster
    alpha: float = decide.ALPHA  # and faster at this significance (Mann-Whitney)
    repeats: int = decide.REPEATS  # interleaved pairs per finalist
    protocol: TimingProtocol = TUNE_PROTOCOL
    deadline: float | None = 30.0  # seconds per service call
    # A config whose output differs more from the default's (max |diff| / max |ref|
    # per output) is treated as failed: it changed the numerics, not just the speed.
    max_rel_diff: float = 1e-3
    # Where each program's crash journal lives (default ``default_crash_dir()``).
    crash_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.strategy not in ("model", "random"):
            raise ValueError(f"strategy must be model or random, not {self.strategy!r}")
        if not 1 <= self.budget < self.candidates:
            raise ValueError(
                f"budget must be in [1, candidates - 1 = {self.candidates - 1}], "
                f"got {self.budget}"
            )
        if not 2 <= self.controls <= 4:
            raise ValueError("controls must be 2..4: their disagreement is the noise")
        if self.confirm < 1:
            raise ValueError("confirm must be >= 1")
        if self.repeats < 2:
            raise ValueError("repeats must be >= 2: a test needs a sample")

    def plan(self) -> list[policy.Round]:
        """The rounds (``policy.plan``): the portfolio first, then the ranking."""
        return policy.plan(self.budget, self.rounds)


def default_crash_dir() -> Path:
    """``$XDG_CACHE_HOME/costmodel/tune`` (``~/.cache/costmodel/tune``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "costmodel" / "tune"


def config_key(row: npt.ArrayLike) -> int:
    """A config row's bits as one integer: its name in a crash journal, the same
    whatever sample it was drawn in."""
    bits = np.asarray(row, np.float32).astype(np.int64)
    return int(bits @ (1 << np.arange(bits.size, dtype=np.int64)))


@dataclass
class Measured:
    """One measured config of the run."""

    row: int
    round: int
    ns: int
    vs_default: float
    executable: Any  # dropped once it cannot be among the best any more
    final_ns: int | None = None  # median of its times in the final pairs
    verdict: decide.Verdict | None = None  # the final comparison with the default


class Bench:
    """The lowered program, its default controls and every measurement's noise.

    Compiling goes through ``probe``: each executable runs once after
    compiling and its output is compared with the default's (``max_rel_diff``). The
    controls are the default compiled under spellings of it that jax's compile cache
    keeps apart (``probe.CONTROL_OPTIONS``), ``{}`` the first.

    Some option sets crash XLA (compiling, or the first run), which kills the process.
    Each config's compile and first run is bracketed in the program's crash journal
    (``crash_path``, kept across runs): ``crashed`` holds the configs
    (``config_key``) that began there in an earlier run and never ended, which this
    run leaves out.
    """

    def __init__(
        self,
        lowered: Any,
        args: tuple[Any, ...],
        cfg: TuneConfig,
        workdir: Path,
        crash_path: Path,
    ) -> None:
        from xla_costmodel.clients.xla import probe  # imports jax

        self.lowered, self.args, self.cfg = lowered, args, cfg
        self.rng = np.random.default_rng([cfg.seed, 2])
        self.journal = probe.Journal(workdir / ".tune.journal")
        crash_path.parent.mkdir(parents=True, exist_ok=True)
        self.crashes = probe.Journal(crash_path)
        self.crashed = self.crashes.crashed()
        self.crashes.mark("attempt")
        spellings = [{}, *probe.CONTROL_OPTIONS[: cfg.controls - 1]]
        copies = self._probe(spellings)
        if copies[0]["executable"] is None:
            raise RuntimeError(f"the default does not compile: {copies[0]['error']}")
        self.controls = [c["executable"] for c in copies if c["executable"] is not None]
        self.noises: list[float] = []

    def compile(self, keys: list[int], options: list[Options]) -> list[dict[str, Any]]:
        """Compile and run each once: dicts with ``executable`` (None if it failed,
        or if its output is not the default's within ``cfg.max_rel_diff``) and
        ``error``."""
        return [self._one(k, o) for k, o in zip(keys, options, strict=True)]

    def _one(self, key: int, options: Options) -> dict[str, Any]:
        self.crashes.mark("c", key)
        try:
            entry = self._probe([{}, options])[1]  # {} is cached: the reference
        except Exception as exc:  # the first run raised (XLA's own error types)
            entry = {"executable": None, "error": f"{type(exc).__name__}: {exc}"[:300]}
        self.crashes.mark("C", key)
        diff = entry.get("max_rel_diff")
        if entry["executable"] is not None and not (
            diff is not None and diff <= self.cfg.max_rel_diff
        ):
            entry["executable"] = None
            entry["error"] = (
                f"output differs from the default's (max rel diff {diff:.3g})"
            )
        return entry

    def measure(self, executables: Sequence[Any]) -> tuple[list[int], int]:
        """Median runtimes (ns) of ``executables`` and of the default (its controls)."""
        runners = [_runner(e, self.args) for e in [*executables, *self.controls]]
        medians = measure(runners, self.cfg.protocol, self.rng).median_ns
        controls = medians[len(executables) :]
        self.noises.append(disagreement(controls))
        return [int(v) for v in medians[: len(executables)]], int(np.median(controls))

    def pairs(self, executable: Any, repeats: int) -> tuple[list[int], list[int]]:
        """``repeats`` interleaved pairs: the default (the controls in turn) and the
        candidate in a random order, each run once untimed then ``runs`` times,
        keeping the minimum. Returns (default ns, candidate ns), pair by pair."""
        runs = self.cfg.protocol.runs
        candidate = _runner(executable, self.args)
        controls = [_runner(c, self.args) for c in self.controls]
        default_ns, candidate_ns = [], []
        for i in range(repeats):
            pair = [controls[i % len(controls)], candidate]
            times = [0, 0]
            for k in self.rng.permutation(2):
                pair[k]()
                times[k] = min(time_once(pair[k]) for _ in range(runs))
            default_ns.append(times[0])
            candidate_ns.append(times[1])
        return default_ns, candidate_ns

    def _probe(self, options: list[Options]) -> list[dict[str, Any]]:
        from xla_costmodel.clients.xla import probe

        return probe.compile_and_probe(
            self.lowered, options, self.args, self.journal, None
        )


def _runner(executable: Any, args: tuple[Any, ...]) -> Callable[[], object]:
    import jax

    return lambda: jax.block_until_ready(executable(*args))  # type: ignore[no-untyped-call]


class Rounds:
    """One tuning run: its rounds, then the choice."""

    def __init__(self, bench: Bench, rows: Rows, log: Log) -> None:
        self.bench, self.rows, self.log = bench, rows, log
        # Row 0, the default, is measured as the controls; crashed rows are left out.
        self.tried = {0} | {
            i for i, row in enumerate(rows) if config_key(row) in bench.crashed
        }
        self.measured: list[Measured] = []
        self.failed: list[dict[str, Any]] = []
        self.rounds: list[dict[str, Any]] = []
        self.notes: list[str] = []
        if len(self.tried) > 1:
            self.notes.append(
                f"left out {len(self.tried) - 1} config(s) that crashed an earlier "
                f"run ({bench.crashes.path})"
            )

    def play(self, picker: Picker, plan: list[policy.Round]) -> str:
        """Every round of ``plan``. A service lost before anything was measured:
        returns why the default stays; lost later: a note, the rounds end."""
        for r, step in enumerate(plan, 1):
            remaining = [i for i in range(len(self.rows)) if i not in self.tried]
            if not remaining:
                self.notes.append(f"every candidate was tried by round {r - 1}")
                break
            size = min(step.size, len(remaining))
            try:
                picks = picker.pick(
                    remaining, policy.Round(size, min(step.explore, size))
                )
            except CostModelError as exc:
                lost = f"the service did not rank ({exc})"
                if not self.measured:
                    return f"{lost}: kept the default"
                self.notes.append(f"{lost}: rounds stopped after {r - 1}")
                break
            self.tried.update(picks)
            self.log(f"round {r}/{len(plan)}: compiling and measuring {len(picks)}")
            new, default_ns = self._measure(r, picks)
            try:
                stored = picker.feedback(
                    [0, *(m.row for m in new)], [default_ns, *(m.ns for m in new)]
                )
            except CostModelError as exc:
                stored = None
                self.notes.append(f"round {r}: feedback not stored ({exc})")
            self.rounds.append(
                {
                    "round": r,
                    "configs": len(picks),
                    "measured": len(new),
                    "adapted": picker.adapted,
                    "shaping": picker.shaping,
                    "explored": min(step.explore, len(picks)),
                    "feedback_stored": stored,
                    "default_ms": default_ns / 1e6,
                    "noise": self.bench.noises[-1],
                }
            )
        return ""

    def _measure(self, r: int, picks: list[int]) -> tuple[list[Measured], int]:
        options = [xla_cpu.to_options(self.rows[i]) for i in picks]
        compiled = self.bench.compile(
            [config_key(self.rows[i]) for i in picks], options
        )
        ok = [
            (i, c["executable"])
            for i, c in zip(picks, compiled, strict=True)
            if c["executable"] is not None
        ]
        self.failed += [
            {"compiler_options": o, "error": c["error"]}
            for o, c in zip(options, compiled, strict=True)
            if c["executable"] is None
        ]
        ns, default_ns = self.bench.measure([e for _, e in ok])
        new = [
            Measured(i, r, t, t / default_ns, e)
            for (i, e), t in zip(ok, ns, strict=True)
        ]
        self.measured += new
        self._keep_best()
        return new, default_ns

    def _keep_best(self) -> None:
        """Only the best few can still be chosen: free the other executables."""
        ranked = sorted(self.measured, key=lambda m: m.vs_default)
        for m in ranked[self.bench.cfg.confirm :]:
            m.executable = None

    def decide(self) -> tuple[Measured | None, int, float]:
        """Time the best few against the default in interleaved pairs and keep the
        fastest that ``decide.decide`` accepts: the chosen config (None: the
        default), the default's runtime (median of its paired times) and the
        controls' worst disagreement over the run (the noise, for the report)."""
        cfg = self.bench.cfg
        best = [
            m for m in self.measured if m.executable is not None and m.vs_default < 1
        ]
        best = sorted(best, key=lambda m: m.vs_default)[: cfg.confirm]
        self.log(
            f"final: {len(best)} config(s) against the default, {cfg.repeats} pairs each"
        )
        noise = max([0.0, *self.bench.noises])
        if not best:
            _, default_ns = self.bench.measure([])
            return None, default_ns, noise
        timed = [self.bench.pairs(m.executable, cfg.repeats) for m in best]
        k, verdicts = decide.decide(
            [d for d, _ in timed], [c for _, c in timed], cfg.alpha, cfg.min_gain
        )
        for m, (_, c), v in zip(best, timed, verdicts, strict=True):
            m.final_ns = int(np.median(c))
            m.verdict = v
        default_ns = int(np.median(timed[0 if k is None else k][0]))
        return (None if k is None else best[k]), default_ns, noise
