"""The bench of one ``tune`` run: the lowered program, its default controls, and
every measurement against them.

``Bench`` compiles configs through the collector's ``probe`` (each compiled with
``compile_options.compile_with``, then run once, its output compared with the
default's), keeps the program's crash
journal, measures executables beside the controls with ``measure.py``'s protocol,
and times a candidate against the default in interleaved pairs, as many as the
sequential test asks for (``Bench.verify``, ``decide.Sequential``). jax is imported
by the calls that need it (``probe`` imports it), never at import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xla_costmodel.clients.xla import decide
from xla_costmodel.clients.xla.measure import disagreement, measure, time_once
from xla_costmodel.clients.xla.tune_config import Rows, TuneConfig, config_key
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions

if TYPE_CHECKING:
    from xla_costmodel.clients.xla.probe import Compiled


class Bench:
    """The lowered program, its default controls and every measurement's noise.

    Compiling goes through ``probe``: each executable runs once after
    compiling and its output is compared with the default's (``max_rel_diff``). The
    controls are the default compiled under spellings of it that jax's compile cache
    keeps apart (``probe.controls``), ``{}`` the first.

    Some option sets crash XLA (compiling, or the first run), which kills the process.
    Each config's compile and first run is bracketed in the program's crash journal
    (``crash_path``, kept across runs): ``crashed_rows`` names the configs that
    began there in an earlier run and never ended, which this run leaves out.
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

        self._lowered, self._args, self._cfg = lowered, args, cfg
        self._rng = np.random.default_rng([cfg.seed, 2])
        self._journal = probe.Journal(workdir / ".tune.journal")
        crash_path.parent.mkdir(parents=True, exist_ok=True)
        self._crashes = probe.Journal(crash_path)
        self._crashed = self._crashes.crashed()
        self._crashes.mark("attempt")
        spellings = [{}, *probe.controls(cfg.controls - 1)]
        copies = self._probe(spellings)
        if copies[0].executable is None:
            raise RuntimeError(f"the default does not compile: {copies[0].error}")
        self._controls = [c.executable for c in copies if c.executable is not None]
        self._noises: list[float] = []

    @property
    def crash_journal(self) -> Path:
        """The program's crash journal, kept across runs."""
        return self._crashes.path

    def crashed_rows(self, rows: Rows) -> set[int]:
        """Indices of ``rows`` whose config crashed an earlier run."""
        return {i for i, row in enumerate(rows) if config_key(row) in self._crashed}

    @property
    def default_executable(self) -> Any:
        """The default, compiled (the first control)."""
        return self._controls[0]

    @property
    def noise(self) -> float:
        """The controls' worst disagreement over every measurement so far (0.0
        before the first)."""
        return max([0.0, *self._noises])

    @property
    def last_noise(self) -> float:
        """The controls' disagreement in the latest measurement."""
        return self._noises[-1]

    def compile(
        self, keys: list[int], options: list[CompilerOptions]
    ) -> list[Compiled]:
        """Compile and run each once: ``executable`` None if it failed, or if its
        output is not the default's within ``cfg.max_rel_diff`` (``outputs.compare``:
        NaN/inf where the default has a number fails too; ``error`` says why)."""
        return [self._one(k, o) for k, o in zip(keys, options, strict=True)]

    def _one(self, key: int, options: CompilerOptions) -> Compiled:
        from xla_costmodel.clients.xla.probe import Compiled

        self._crashes.mark("c", key)
        try:
            # The default is cached: the reference.
            entry = self._probe([CompilerOptions(), options])[1]
        except Exception as exc:  # the first run raised (XLA's own error types)
            entry = Compiled(None, f"{type(exc).__name__}: {exc}"[:300])
        self._crashes.mark("C", key)
        check = entry.outputs
        if entry.executable is not None and (check is None or not check.ok):
            why = "not checked" if check is None else check.reason
            entry = replace(
                entry,
                executable=None,
                error=f"output differs from the default's ({why})",
            )
        return entry

    def measure(self, executables: Sequence[Any]) -> tuple[list[int], int]:
        """Median runtimes (ns) of ``executables`` and of the default (its controls)."""
        runners = [_runner(e, self._args) for e in [*executables, *self._controls]]
        medians = measure(runners, self._cfg.protocol, self._rng).median_ns
        controls = medians[len(executables) :]
        self._noises.append(disagreement(controls))
        return [int(v) for v in medians[: len(executables)]], int(np.median(controls))

    def pairs(self, executable: Any, repeats: int) -> tuple[list[int], list[int]]:
        """``repeats`` interleaved pairs (``pair``). Returns (default ns, candidate
        ns), pair by pair."""
        candidate = _runner(executable, self._args)
        controls = [_runner(c, self._args) for c in self._controls]
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
        for k in self._rng.permutation(2):
            pair[k]()
            times[k] = min(time_once(pair[k]) for _ in range(self._cfg.protocol.runs))
        return times[0], times[1]

    def verify(
        self, executable: Any, *, reuse: bool = False
    ) -> tuple[decide.Verdict, list[int], list[int]]:
        """``executable`` against the default (the controls in turn), one pair at a
        time until ``decide.Sequential`` decides: the verdict and the paired
        default and candidate ns. ``reuse``: a stored decision on trial
        (``Sequential(hold=True)`` with ``REUSE_MIN_GAIN``): kept unless shown slower."""
        cfg = self._cfg
        test = decide.Sequential(
            cfg.alpha,
            decide.REUSE_MIN_GAIN if reuse else cfg.min_gain,
            cfg.repeats,
            cfg.max_pairs,
            hold=reuse,
        )
        candidate = _runner(executable, self._args)
        controls = [_runner(c, self._args) for c in self._controls]
        default_ns: list[int] = []
        candidate_ns: list[int] = []
        while not test.done:
            d, c = self.pair(controls[len(default_ns) % len(controls)], candidate)
            default_ns.append(d)
            candidate_ns.append(c)
            test.add(d, c)
        return test.final(), default_ns, candidate_ns

    def _probe(
        self, options: Sequence[CompilerOptions | Mapping[str, Any]]
    ) -> list[Compiled]:
        from xla_costmodel.clients.xla import probe

        return probe.compile_and_probe(
            self._lowered,
            options,
            self._args,
            self._journal,
            None,
            rtol=self._cfg.max_rel_diff,
        )


def _runner(executable: Any, args: tuple[Any, ...]) -> Callable[[], object]:
    import jax

    return lambda: jax.block_until_ready(executable(*args))  # type: ignore[no-untyped-call]
