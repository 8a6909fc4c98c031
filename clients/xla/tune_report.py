"""What a ``tune`` run knows and reports: its state beyond the rounds (``RunState``:
the program as the service knows it, the fleet's decision, the picker) and the
``TuneReport`` built from it and the rounds (``build_report``)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from xla_costmodel.clients.payloads import PreparedGraph
from xla_costmodel.clients.wire import BestKnown, Refuted
from xla_costmodel.clients.xla import reuse
from xla_costmodel.clients.xla.pickers import Picker
from xla_costmodel.clients.xla.tune_config import Options, Rows, TuneConfig
from xla_costmodel.clients.xla.tune_rounds import Candidate, Rounds
from xla_costmodel.tpugraphs import xla_cpu
from xla_costmodel.tpugraphs.paired import summarize


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


@dataclass
class TuneReport:
    """What ``tune`` measured and chose; ``to_json()`` is a JSON-ready dict.

    ``speedup``: the median over the fresh process's pairs of default / chosen
    (``tpugraphs.paired.summarize`` of the pairs the decision sends; 1.0 when the
    default stays); ``default_ms`` and ``best_ms`` their medians. ``confirmed``:
    that fresh process's measurement (``confirm.Confirmation.to_json``; also when
    the finalist did not hold), ``config`` the chosen row, ``load`` what the run
    saw. ``measured``: one ``{"compiler_options", "ms", "vs_default",
    "round"}`` per config measured in the rounds (``vs_default``: its runtime / the
    default's in the same measurement), plus ``final_ms`` for those measured again to
    choose; ``failed``: ``{"compiler_options", "error"}`` per config that did not
    compile. ``rounds``: per round, configs picked and measured, ``adapted`` (the
    service's answer: measurements of this graph that shaped its ranking; None when
    not asked), ``feedback_stored``, the default's ms and the controls' noise.
    """

    default_ms: float
    best_ms: float
    speedup: float
    compiler_options: Options
    measured: list[dict[str, Any]]
    failed: list[dict[str, Any]]
    strategy: str
    budget: int
    candidates: int
    seed: int
    noise: float  # the controls' worst disagreement over the run (informational)
    rounds: list[dict[str, Any]]
    target: str
    model: str
    model_version: str | None
    service_answered: bool  # the service ranked at least once
    reason: str  # why these options (or why the default)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # The fleet's decision: ``reused`` when a fresh one held (only it was compiled;
    # nothing when it is the default), ``verified`` the check of a decision found
    # (None: none found, or the default), ``compiler`` what this run measured with.
    reused: bool = False
    compiler: str = "unknown"
    verified: dict[str, Any] | None = None
    graph_id: str | None = None
    decision_stored: bool | None = None  # None: not sent (random, no service)
    pairs: int = 0  # interleaved pairs the decisions spent (decide.Sequential)
    config: list[float] | None = None  # the chosen row (None: the default)
    confirmed: dict[str, Any] | None = None
    load: Load | None = None
    refuted: dict[str, Any] | None = None  # the fleet's decision this run refuted

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunState:
    """One run's state beyond the rounds: the program as the service knows it, the
    fleet's decision for it and what checking that decision showed."""

    cfg: TuneConfig
    target: str
    compiler: str
    graph: PreparedGraph | None = None  # featurized for the service (model only)
    program: reuse.Program | None = None
    known: BestKnown | None = None  # the fleet's decision, if any
    known_row: int | None = None  # its row among the candidates
    verified: dict[str, Any] | None = None  # the decision's check, pair by pair
    reused: bool = False
    why: str = ""  # why the default stays without rounds (no service, ...)
    picker: Picker | None = None
    decision_stored: bool | None = None  # None: not sent
    refuted: Refuted | None = None  # the fleet's decision, shown wrong here
    ignored: str = ""  # why the fleet's decision was not even tried

    @property
    def model_version(self) -> str | None:
        return None if self.picker is None else self.picker.model_version

    @property
    def answered(self) -> bool:
        return self.picker is not None and self.picker.answered


def build_report(
    state: RunState,
    run: Rounds,
    chosen: Candidate | None,
    ns: tuple[int, int],
    load: Load,
    started: float,
) -> TuneReport:
    """The run's report: ``ns`` the default's and the chosen options' runtimes,
    ``load`` what the run saw, ``started`` its start (``time.monotonic``)."""
    default_ns, best_ns = ns
    cfg, rows = state.cfg, run.rows
    pairs = () if chosen is None else chosen.pairs
    return TuneReport(
        default_ms=default_ns / 1e6,
        best_ms=best_ns / 1e6,
        speedup=summarize(pairs).speedup if pairs else 1.0,
        compiler_options={} if chosen is None else xla_cpu.to_options(rows[chosen.row]),
        measured=[_entry(m, rows) for m in run.measured],
        failed=run.failed,
        strategy=cfg.strategy,
        budget=cfg.budget,
        candidates=cfg.candidates,
        seed=cfg.seed,
        noise=load.noise,
        rounds=[r.to_json() for r in run.rounds],
        target=state.target,
        model=cfg.model,
        model_version=state.model_version,
        service_answered=state.answered,
        reason=state.why or _reason(chosen, run.measured, cfg),
        notes=run.notes,
        seconds=time.monotonic() - started,
        reused=state.reused,
        compiler=state.compiler,
        verified=state.verified,
        graph_id=None if state.program is None else state.program.graph_id,
        decision_stored=state.decision_stored,
        pairs=run.pairs,
        config=None if chosen is None else [float(v) for v in rows[chosen.row]],
        confirmed=None if run.confirmation is None else run.confirmation.to_json(),
        load=load,
        refuted=None if state.refuted is None else state.refuted.to_json(),
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


def _entry(m: Candidate, rows: Rows) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "compiler_options": xla_cpu.to_options(rows[m.row]),
        "ms": m.ns / 1e6,
        "vs_default": m.vs_default,
        "round": m.round,
    }
    if m.final_ns is not None:
        entry["final_ms"] = m.final_ns / 1e6
    if m.verdict is not None:
        entry["final_speedup"] = m.verdict.speedup
        entry["p_value"] = m.verdict.p_value
    return entry
