"""The rounds of one ``tune`` run: pick, compile, measure, feed back; then choose.

``Bench`` holds the lowered program and its default controls: it compiles configs
through the collector's ``probe`` (each runs once after compiling, its output
compared with the default's), keeps the program's crash journal, measures
executables beside the controls with ``measure.py``'s protocol, and times a
candidate against the default in interleaved pairs, as many as the sequential test
asks for (``Bench.verify``, ``decide.Sequential``). ``Rounds`` plays the rounds of
``policy.plan`` with a picker (``pickers.py``) and makes the final choice
(``Rounds.decide``: each of ``policy.finalists`` verified, the fastest kept). jax is
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
    confirm: int | None = None  # configs verified at the end (policy.confirm(budget))
    min_gain: float = decide.MIN_GAIN  # a kept config is at least this much faster
    alpha: float = decide.ALPHA  # and faster at this significance (signed ranks)
    repeats: int = decide.MIN_PAIRS  # interleaved pairs per finalist at the first look
    max_pairs: int = decide.MAX_PAIRS  # and at most (decide.Sequential)
    protocol: TimingProtocol = TUNE_PROTOCOL
    deadline: float | None = 30.0  # seconds per service call
    # A config whose output differs more from the default's (max |diff| / max |ref|
    # per output) is treated as failed: it changed the numerics, not just the speed.
    max_rel_diff: float = 1e-3
    # Where each program's crash journal lives (default ``default_crash_dir()``).
    crash_dir: Path | None = None
    # Ask the service what the fleet decided for this program first (``reuse.py``);
    # reuse a decision only when this many distinct writers made it.
    reuse: bool = True
    min_writers: int = 1

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
        if self.confirm is not None and self.confirm < 1:
            raise ValueError("confirm must be >= 1")
        if self.repeats < 2:
            raise ValueError("repeats must be >= 2: a test needs a sample")
        if self.max_pairs < self.repeats:
            raise ValueError("max_pairs must be >= repeats")
        if self.min_writers < 1:
            raise ValueError("min_writers must be >= 1")

    @property
    def finalists(self) -> int:
        """How many configs the final decision verifies."""
        return policy.confirm(self.budget) if self.confirm is None else self.confirm

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
    final_default_ns: int | None = None  # and of the default's in the same pairs
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
        """``repeats`` interleaved pairs (``pair``). Returns (default ns, candidate
        ns), pair by pair."""
        candidate = _runner(executable, self.args)
        controls = [_runner(c, self.args) for c in self.controls]
        timed = [
            self.pair(controls[i % len(controls)], candidate) for i in range(repeats)
        ]
        return [d for d, _ in timed], [c for _, c in timed]

    def pair(
        self, default: Callable[[], object], candidate: Callable[[], object]
    ) -> tuple[int, int]:
        """One interleaved pair: the default and the candidate in a random order,
        each run once untimed then ``runs`` times, keeping the minimum (ns)."""
        pair, times = [default, candidate], [0, 0]
        for k in self.rng.permutation(2):
            pair[k]()
            times[k] = min(time_once(pair[k]) for _ in range(self.cfg.protocol.runs))
        return times[0], times[1]

    def verify(
        self, executable: Any, *, reuse: bool = False
    ) -> tuple[decide.Verdict, list[int], list[int]]:
        """``executable`` against the default (the controls in turn), one pair at a
        time until ``decide.Sequential`` decides: the verdict and the paired
        default and candidate ns. ``reuse``: a stored decision on trial
        (``Sequential(hold=True)`` with ``REUSE_MIN_GAIN``): kept unless shown slower."""
        cfg = self.cfg
        test = decide.Sequential(
            cfg.alpha,
            decide.REUSE_MIN_GAIN if reuse else cfg.min_gain,
            cfg.repeats,
            cfg.max_pairs,
            hold=reuse,
        )
        candidate = _runner(executable, self.args)
        controls = [_runner(c, self.args) for c in self.controls]
        default_ns: list[int] = []
        candidate_ns: list[int] = []
        while not test.done:
            d, c = self.pair(controls[len(default_ns) % len(controls)], candidate)
            default_ns.append(d)
            candidate_ns.append(c)
            test.add(d, c)
        return test.final(), default_ns, candidate_ns

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
        self.pairs = 0  # interleaved pairs the final decision spent
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

    def verify(self, row: int, options: Options) -> Measured | None:
        """Compile ``row`` alone and compare it with the default in interleaved
        pairs (a stored decision, checked before any search); None if it did not
        compile. Counts as one config of the budget."""
        entry = self.bench.compile([config_key(self.rows[row])], [options])[0]
        self.tried.add(row)
        if entry["executable"] is None:
            self.failed.append({"compiler_options": options, "error": entry["error"]})
            return None
        # Sequential, with the stored decision on trial (Bench.verify's reuse).
        verdict, d, c = self.bench.verify(entry["executable"], reuse=True)
        self.pairs += len(d)
        dn, cn = int(np.median(d)), int(np.median(c))
        return Measured(
            row,
            0,
            cn,
            cn / dn,
            entry["executable"],
            final_ns=cn,
            final_default_ns=dn,
            verdict=verdict,
        )

    def adopt(self, m: Measured) -> None:
        """Count ``m``, measured before the rounds (a stored decision that was
        checked first), as one of the run's measured configs."""
        self.tried.add(m.row)
        self.measured.append(m)
        self._keep_best()

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
        for m in ranked[self.bench.cfg.finalists :]:
            m.executable = None

    def decide(self) -> tuple[Measured | None, int, float]:
        """Verify ``policy.finalists`` against the default (``Bench.verify``: as many
        interleaved pairs as the test needs) and keep the fastest kept one: the
        chosen config (None: the default), the default's runtime (median of its
        paired times) and the controls' worst disagreement over the run (the noise,
        for the report). ``pairs`` counts the pairs spent."""
        cfg = self.bench.cfg
        alive = {m.row: m for m in self.measured if m.executable is not None}
        rows = policy.finalists(
            {r: m.vs_default for r, m in alive.items()}, cfg.finalists
        )
        best = [alive[r] for r in rows]
        self.log(
            f"final: {len(best)} config(s) against the default, "
            f"{cfg.repeats} to {cfg.max_pairs} pairs each"
        )
        noise = max([0.0, *self.bench.noises])
        if not best:
            _, default_ns = self.bench.measure([])
            return None, default_ns, noise
        defaults, verdicts = [], []
        for m in best:
            verdict, d, c = self.bench.verify(m.executable)
            m.verdict, m.final_ns = verdict, int(np.median(c))
            self.pairs += len(d)
            defaults.append(d)
            verdicts.append(verdict)
        k = decide.best(verdicts)
        default_ns = int(np.median(defaults[0 if k is None else k]))
        return (None if k is None else best[k]), default_ns, noise
