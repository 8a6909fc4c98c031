"""The rounds of one ``tune`` run: pick, compile, measure, feed back; then choose.

``Rounds`` plays the rounds of ``policy.plan`` with a picker (``pickers.py``) on a
``Bench`` (``tune_bench.py``: compiling, measuring, verifying against the default)
and makes the final choice (``Rounds.decide``: each of ``policy.finalists``
verified, the fastest kept). The choice is then confirmed in a fresh process
(``Rounds.confirm``, ``confirm.py``), and so is a fleet's decision on trial
(``Rounds.verify``): compiled and output-checked here, timed there.

``Rounds`` is the run's ledger: what was tried, measured and failed, its notes and
the pairs spent. Every step returns what it found as a frozen value (``Played``,
``Trial``, a ``Candidate``); a candidate measured again is a new ``Candidate`` in
the ledger, never the old one changed.
"""

from __future__ import annotations

import os
import signal
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from xla_costmodel.clients.errors import CostModelError
from xla_costmodel.clients.xla import decide, policy, spec_rows
from xla_costmodel.clients.xla.confirm import Confirmation, Confirmer, holds
from xla_costmodel.clients.xla.pickers import Picked, Picker, Shaping
from xla_costmodel.clients.xla.tune_bench import Bench
from xla_costmodel.clients.xla.tune_config import (
    Log,
    Options,
    Rows,
    TuneConfig,
    config_key,
)
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One measured config of the run (its executable is the ledger's)."""

    row: int
    round: int
    ns: int
    vs_default: float
    final_ns: int | None = None  # median of its times in the final pairs
    final_default_ns: int | None = None  # and of the default's in the same pairs
    verdict: decide.Verdict | None = None  # the final comparison with the default
    # Its timing in a fresh process (confirm.py): the pairs a decision sends.
    confirmation: Confirmation | None = None

    @property
    def pairs(self) -> tuple[tuple[int, int], ...]:
        return () if self.confirmation is None else self.confirmation.pairs


@dataclass(frozen=True)
class Failed:
    """A config that did not compile, or whose outputs were refused
    (``TuneReport.failed``: ``to_json`` as ``asdict``)."""

    compiler_options: Options
    error: str | None


@dataclass(frozen=True, kw_only=True)
class RoundSummary:
    """One round as the report shows it (``TuneReport.rounds``: ``to_json``, keys in
    this order): configs picked and measured, the service's answer (``adapted``,
    ``shaping``; None when not asked), configs explored, measurements the service
    stored, the default's ms and the controls' noise in that round."""

    round: int
    configs: int
    measured: int
    adapted: int | None
    shaping: Shaping | None
    explored: int
    feedback_stored: int | None
    default_ms: float
    noise: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class Played:
    """The rounds played (``Rounds.play``): each round's summary, the model version
    that answered, whether the service ranked at least once, and ``why`` the
    default stays when the service was lost before anything was measured."""

    rounds: tuple[RoundSummary, ...] = ()
    model_version: str | None = None
    answered: bool = False
    why: str = ""

    def then(self, picked: Picked, summary: RoundSummary) -> Played:
        """These rounds and one more, picked as ``picked`` says."""
        return replace(
            self,
            rounds=(*self.rounds, summary),
            model_version=picked.model_version or self.model_version,
            answered=self.answered or picked.answered,
        )


@dataclass(frozen=True)
class Trial:
    """A fleet's decision on trial (``Rounds.verify``): measured (``candidate``), or
    not; ``refused_outputs``: it ran and its outputs differ from the default's."""

    candidate: Candidate | None = None
    refused_outputs: bool = False


class Rounds:
    """One tuning run's ledger: its rounds, then the choice."""

    def __init__(
        self, bench: Bench, rows: Rows, cfg: TuneConfig, log: Log, confirmer: Confirmer
    ) -> None:
        self.bench, self.rows, self.cfg, self.log = bench, rows, cfg, log
        self.spec = spec_rows.spec_named(cfg.spec)
        self.confirmer = confirmer
        # Row 0, the default, is measured as the controls; crashed rows are left out.
        self.tried = {0} | bench.crashed_rows(rows)
        self.measured: list[Candidate] = []
        self.failed: list[Failed] = []
        self.notes: list[str] = []
        self.pairs = 0  # interleaved pairs the final decision spent
        self.confirmation: Confirmation | None = None  # the latest fresh timing
        # Executables by row, while they can still be chosen (_keep_best).
        self._executables: dict[int, Any] = {}
        if len(self.tried) > 1:
            self.notes.append(
                f"left out {len(self.tried) - 1} config(s) that crashed an earlier "
                f"run ({bench.crash_journal})"
            )

    def executable(self, m: Candidate) -> Any:
        """``m`` compiled (a chosen candidate's is kept)."""
        return self._executables[m.row]

    def options(self, row: int) -> CompilerOptions:
        """The compiler options of candidate ``row``."""
        return spec_rows.options(self.rows[row], self.spec)

    def play(self, picker: Picker, plan: list[policy.Round]) -> Played:
        """Every round of ``plan``. A service lost before anything was measured:
        ``why`` the default stays; lost later: a note, the rounds end."""
        played = Played()
        for r, step in enumerate(plan, 1):
            remaining = [i for i in range(len(self.rows)) if i not in self.tried]
            if not remaining:
                self.notes.append(f"every candidate was tried by round {r - 1}")
                break
            size = min(step.size, len(remaining))
            explore = min(step.explore, size)
            try:
                picked = picker.pick(remaining, policy.Round(size, explore))
            except CostModelError as exc:
                lost = f"the service did not rank ({exc})"
                if not self.measured:
                    return replace(played, why=f"{lost}: kept the default")
                self.notes.append(f"{lost}: rounds stopped after {r - 1}")
                break
            summary = self._round(r, len(plan), picked, picker, explore)
            played = played.then(picked, summary)
        return played

    def _round(
        self, r: int, of: int, picked: Picked, picker: Picker, explore: int
    ) -> RoundSummary:
        """Round ``r`` of ``of``: measure the picks, feed back what was measured."""
        picks = list(picked.rows)
        self.tried.update(picks)
        self.log(f"round {r}/{of}: compiling and measuring {len(picks)}")
        new, default_ns = self._measure(r, picks)
        try:
            stored = picker.feedback(
                [0, *(m.row for m in new)], [default_ns, *(m.ns for m in new)]
            )
        except CostModelError as exc:
            stored = None
            self.notes.append(f"round {r}: feedback not stored ({exc})")
        return RoundSummary(
            round=r,
            configs=len(picks),
            measured=len(new),
            adapted=picked.adapted,
            shaping=picked.shaping,
            explored=min(explore, len(picks)),
            feedback_stored=stored,
            default_ms=default_ns / 1e6,
            noise=self.bench.last_noise,
        )

    def verify(self, row: int) -> Trial:
        """Compile ``row`` alone here (its outputs checked against the default's),
        then time it against the default in a fresh process (``confirm.py``): a
        stored decision, checked before any search. No candidate if it did not
        compile, its outputs differ, or it was not timed. Counts as one config of
        the budget."""
        options = self.options(row)
        entry = self.bench.compile([config_key(self.rows[row])], [options])[0]
        self.tried.add(row)
        if entry.executable is None:
            self.failed.append(Failed(options.flat(), entry.error))
            # It ran and its outputs were refused (not a compile error).
            return Trial(
                refused_outputs=entry.outputs is not None and not entry.outputs.ok
            )
        self.log("timing the fleet's decision against the default in a fresh process")
        c = self.confirmer.run(options, self.cfg.confirm_rounds, self.cfg.protocol.runs)
        self.confirmation = c
        if c.summary is None:
            self.notes.append(f"the fleet's decision was not timed ({c.error})")
            return Trial()
        self.pairs += len(c.pairs)
        dn = int(np.median([d for d, _ in c.pairs]))
        cn = int(np.median([t for _, t in c.pairs]))
        self._executables[row] = entry.executable
        m = Candidate(
            row=row,
            round=0,
            ns=cn,
            vs_default=cn / dn,
            final_ns=cn,
            final_default_ns=dn,
            confirmation=c,
        )
        return Trial(m)

    def confirm(self, m: Candidate) -> Candidate | None:
        """Time ``m`` against the default in a fresh process (``confirm.py``): ``m``
        with those pairs if it holds there (faster on every CPU, no real loss on
        one); else None and a note. ``confirmation`` keeps the fresh timing."""
        self.log("confirming the finalist against the default in a fresh process")
        options = self.options(m.row)
        c = self.confirmer.run(options, self.cfg.confirm_rounds, self.cfg.protocol.runs)
        self.confirmation = c
        if c.summary is None:
            self.notes.append(f"the finalist was not confirmed ({c.error})")
            return None
        self.pairs += len(c.pairs)
        if holds(c, self.cfg.min_gain):
            return self._update(
                replace(
                    m,
                    confirmation=c,
                    final_default_ns=int(np.median([d for d, _ in c.pairs])),
                    final_ns=int(np.median([t for _, t in c.pairs])),
                )
            )
        one = c.one_cpu_summary
        self.notes.append(
            f"the finalist did not hold in a fresh process ({c.summary.speedup:.3f}"
            + ("" if one is None else f"; on one CPU {one.speedup:.3f}")
            + f", p = {c.summary.p_value:.3g}; the default's two copies "
            f"{c.controls:.1%} apart): kept the default"
        )
        return None

    def adopt(self, m: Candidate) -> None:
        """Count ``m``, measured before the rounds (a stored decision that was
        checked first), as one of the run's measured configs."""
        self.tried.add(m.row)
        self.measured.append(m)
        self._keep_best()

    def _update(self, m: Candidate) -> Candidate:
        """``m`` in the ledger in place of its row's earlier measurement."""
        self.measured = [m if old.row == m.row else old for old in self.measured]
        return m

    def _measure(self, r: int, picks: list[int]) -> tuple[list[Candidate], int]:
        options = [self.options(i) for i in picks]
        if self.cfg.hooks.crash_at == "candidate" and picks:
            self._crash(config_key(self.rows[picks[0]]))
        compiled = self.bench.compile(
            [config_key(self.rows[i]) for i in picks], options
        )
        ok = [
            (i, c.executable)
            for i, c in zip(picks, compiled, strict=True)
            if c.executable is not None
        ]
        self.failed += [
            Failed(o.flat(), c.error)
            for o, c in zip(options, compiled, strict=True)
            if c.executable is None
        ]
        ns, default_ns = self.bench.measure([e for _, e in ok])
        self._executables.update(ok)
        new = [
            Candidate(row=i, round=r, ns=t, vs_default=t / default_ns)
            for (i, _), t in zip(ok, ns, strict=True)
        ]
        self.measured += new
        self._keep_best()
        return new, default_ns

    def _crash(self, key: int) -> None:
        """Test hook: die as XLA does compiling ``key``, unless an earlier run did
        (the crash journal remembers: the restarted run goes on without it)."""
        from xla_costmodel.clients.xla.probe import Journal

        journal = Journal(self.bench.crash_journal)
        if not journal.crashed():
            journal.mark("c", key)  # begun, never ended: as a segfault leaves it
            os.kill(os.getpid(), signal.SIGSEGV)

    def _keep_best(self) -> None:
        """Only the best few can still be chosen: free the other executables."""
        ranked = sorted(self.measured, key=lambda m: m.vs_default)
        for m in ranked[self.cfg.finalists :]:
            self._executables.pop(m.row, None)

    def decide(self) -> tuple[Candidate | None, int, float]:
        """Verify ``policy.finalists`` against the default (``Bench.verify``: as many
        interleaved pairs as the test needs) and keep the fastest kept one: the
        chosen config (None: the default), the default's runtime (median of its
        paired times) and the controls' worst disagreement over the run (the noise,
        for the report). ``pairs`` counts the pairs spent."""
        cfg = self.cfg
        alive = {m.row: m for m in self.measured if m.row in self._executables}
        rows = policy.finalists(
            {r: m.vs_default for r, m in alive.items()}, cfg.finalists
        )
        self.log(
            f"final: {len(rows)} config(s) against the default, "
            f"{cfg.repeats} to {cfg.max_pairs} pairs each"
        )
        noise = self.bench.noise
        if not rows:
            _, default_ns = self.bench.measure([])
            return None, default_ns, noise
        best, defaults, verdicts = [], [], []
        for r in rows:
            verdict, d, c = self.bench.verify(self._executables[r])
            m = replace(alive[r], verdict=verdict, final_ns=int(np.median(c)))
            best.append(self._update(m))
            self.pairs += len(d)
            defaults.append(d)
            verdicts.append(verdict)
        k = decide.best(verdicts)
        default_ns = int(np.median(defaults[0 if k is None else k]))
        return (None if k is None else best[k]), default_ns, noise
