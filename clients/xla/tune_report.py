"""What a ``tune`` run reports: the ``TuneReport`` (typed entries: ``Measured``,
``Failed``, ``RoundSummary``, ``Verified``, ``Load``), built from the frozen results
of its steps (``build_report``). ``TuneReport.to_json`` is ``costmodel tune
--json``'s object: its keys and values are a contract (docs/reference.md)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, fields
from typing import Any

from xla_costmodel.clients.wire import Refuted
from xla_costmodel.clients.xla import spec_rows
from xla_costmodel.clients.xla.confirm import Confirmation
from xla_costmodel.clients.xla.tune_config import Options, Rows, Scope, TuneConfig
from xla_costmodel.clients.xla.tune_fleet import Outcome, Prepared, Told, Verified
from xla_costmodel.clients.xla.tune_rounds import (
    Candidate,
    Failed,
    Rounds,
    RoundSummary,
)
from xla_costmodel.tpugraphs.paired import summarize

__all__ = [
    "Failed",
    "Load",
    "Measured",
    "RoundSummary",
    "TuneReport",
    "Verified",
    "build_report",
]


@dataclass(frozen=True, kw_only=True)
class Load:
    """The load a run saw (its figures depend on it: confirm.py): the load averages
    (1, 5, 15 min) at its start and end, the in-process controls' worst
    disagreement (``noise``), and in the fresh process that confirmed the
    finalist, its two controls' disagreement and its 1-min load at start and end
    (None: nothing was confirmed)."""

    start: tuple[float, float, float]
    end: tuple[float, float, float]
    noise: float
    confirm_controls: float | None = None
    confirm_load: tuple[float, float] | None = None


@dataclass(frozen=True, kw_only=True)
class Measured:
    """One config measured in the rounds: its options (as ``CompilerOptions.flat``
    spells them), its runtime (``ms``), that over the default's in the same
    measurement (``vs_default``) and its round (0: the fleet's decision, checked
    first); for a finalist, its median in the final pairs (``final_ms``) and their
    verdict. ``to_json`` leaves out what is None."""

    compiler_options: Options
    ms: float
    vs_default: float
    round: int
    final_ms: float | None = None
    final_speedup: float | None = None
    p_value: float | None = None

    @classmethod
    def of(cls, m: Candidate, rows: Rows, spec: spec_rows.Tunable) -> Measured:
        return cls(
            compiler_options=spec_rows.options(rows[m.row], spec).flat(),
            ms=m.ns / 1e6,
            vs_default=m.vs_default,
            round=m.round,
            final_ms=None if m.final_ns is None else m.final_ns / 1e6,
            final_speedup=None if m.verdict is None else m.verdict.speedup,
            p_value=None if m.verdict is None else m.verdict.p_value,
        )

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True, kw_only=True)
class TuneReport:
    """What ``tune`` measured and chose; ``to_json()`` is a JSON-ready dict.

    ``speedup``: the median over the fresh process's pairs of default / chosen
    (``tpugraphs.paired.summarize`` of the pairs the decision sends; 1.0 when the
    default stays); ``default_ms`` and ``best_ms`` their medians;
    ``compiler_options`` the chosen row's as ``CompilerOptions.flat`` spells them
    (``{}``: the default). ``confirmed``: that fresh process's measurement (also
    when the finalist did not hold), ``config`` the chosen row (of the run's spec,
    ``TuneConfig.spec``), ``load`` what the run saw. ``measured``: each config
    measured (``Measured``); ``failed``: each that did not compile (``Failed``).
    ``rounds``: per round, configs picked and measured, ``adapted`` (the service's
    answer: measurements of this graph that shaped its ranking; None when not
    asked), ``feedback_stored``, the default's ms and the controls' noise
    (``RoundSummary``).
    """

    default_ms: float
    best_ms: float
    speedup: float
    compiler_options: Options
    measured: tuple[Measured, ...]
    failed: tuple[Failed, ...]
    strategy: str
    budget: int
    candidates: int
    seed: int
    noise: float  # the controls' worst disagreement over the run (informational)
    rounds: tuple[RoundSummary, ...]
    target: str
    model: str
    model_version: str | None
    service_answered: bool  # the service ranked at least once
    reason: str  # why these options (or why the default)
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    # The fleet's decision: ``reused`` when a fresh one held (only it was compiled;
    # nothing when it is the default), ``verified`` the check of a decision found
    # (None: none found, or the default), ``compiler`` what this run measured with.
    reused: bool = False
    compiler: str = "unknown"
    verified: Verified | None = None
    graph_id: str | None = None
    decision_stored: bool | None = None  # None: not sent (random, no service)
    pairs: int = 0  # interleaved pairs the decisions spent (decide.Sequential)
    config: tuple[float, ...] | None = None  # the chosen row (None: the default)
    confirmed: Confirmation | None = None
    load: Load | None = None
    refuted: Refuted | None = None  # the fleet's decision this run refuted

    def to_json(self) -> dict[str, Any]:
        """Every field, in order; entries as dicts, sequences as lists."""
        body = {f.name: getattr(self, f.name) for f in fields(self)}
        body.update(
            compiler_options=dict(self.compiler_options),
            measured=[m.to_json() for m in self.measured],
            failed=[asdict(f) for f in self.failed],
            rounds=[r.to_json() for r in self.rounds],
            notes=list(self.notes),
            verified=None if self.verified is None else asdict(self.verified),
            config=None if self.config is None else list(self.config),
            confirmed=None if self.confirmed is None else self.confirmed.to_json(),
            load=None if self.load is None else asdict(self.load),
            refuted=None if self.refuted is None else self.refuted.to_json(),
        )
        return body


def build_report(
    scope: Scope,
    prepared: Prepared,
    run: Rounds,
    outcome: Outcome,
    told: Told,
    load: Load,
    started: float,
) -> TuneReport:
    """The run's report from its steps' results: ``load`` what the run saw,
    ``started`` its start (``time.monotonic``)."""
    cfg, rows, chosen, spec = scope.cfg, run.rows, outcome.chosen, run.spec
    checked, played = outcome.checked, outcome.played
    pairs = () if chosen is None else chosen.pairs
    why = prepared.why or checked.why or played.why  # at most one says anything
    return TuneReport(
        default_ms=outcome.default_ns / 1e6,
        best_ms=outcome.best_ns / 1e6,
        speedup=summarize(pairs).speedup if pairs else 1.0,
        compiler_options={} if chosen is None else run.options(chosen.row).flat(),
        measured=tuple(Measured.of(m, rows, spec) for m in run.measured),
        failed=tuple(run.failed),
        strategy=cfg.strategy,
        budget=cfg.budget,
        candidates=cfg.candidates,
        seed=cfg.seed,
        noise=load.noise,
        rounds=played.rounds,
        target=scope.target,
        model=cfg.model,
        model_version=played.model_version,
        service_answered=played.answered,
        reason=why or _reason(chosen, run.measured, cfg),
        notes=(*run.notes, *([told.note] if told.note else [])),
        seconds=time.monotonic() - started,
        reused=checked.reused,
        compiler=scope.compiler,
        verified=checked.verified,
        graph_id=None if prepared.program is None else prepared.program.graph_id,
        decision_stored=told.stored,
        pairs=run.pairs,
        config=None if chosen is None else tuple(float(v) for v in rows[chosen.row]),
        confirmed=run.confirmation,
        load=load,
        refuted=checked.refuted,
    )


def _reason(
    chosen: Candidate | None, measured: list[Candidate], cfg: TuneConfig
) -> str:
    rule = (
        f"a sequential signed-rank test at {cfg.alpha} in {cfg.repeats} to "
        f"{cfg.max_pairs} pairs, and over {cfg.min_gain:.0%} faster"
    )
    if chosen is not None and chosen.pairs:
        s = summarize(chosen.pairs)
        return (
            f"{s.speedup:.3f}x faster than the default in {s.pairs} rounds of a "
            f"fresh process (p = {s.p_value:.3g}; a finalist of {rule}, kept when "
            f"it holds there: faster on every CPU, <= 5% slower on one)"
        )
    if not measured:
        return "no config compiled: kept the default"
    return (
        f"no config was faster than the default ({rule}; then in a fresh "
        "process): kept the default"
    )
