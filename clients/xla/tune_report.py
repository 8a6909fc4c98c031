"""What a ``tune`` run knows and reports: its state beyond the rounds (``RunState``:
the program as the service knows it, the fleet's decision, the picker) and the
``TuneReport`` built from it and the rounds (``build_report``)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from xla_costmodel.clients.payloads import PreparedGraph
from xla_costmodel.clients.wire import BestKnown
from xla_costmodel.clients.xla import reuse
from xla_costmodel.clients.xla.pickers import Picker
from xla_costmodel.clients.xla.tune_config import Options, Rows, TuneConfig
from xla_costmodel.clients.xla.tune_rounds import Candidate, Rounds
from xla_costmodel.tpugraphs import xla_cpu


@dataclass
class TuneReport:
    """What ``tune`` measured and chose; ``to_json()`` is a JSON-ready dict.

    ``speedup`` = ``default_ms / best_ms`` of the chosen options (1.0 when the
    default stays). ``measured``: one ``{"compiler_options", "ms", "vs_default",
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
    noise: float,
    started: float,
) -> TuneReport:
    """The run's report: ``ns`` the default's and the chosen options' runtimes,
    ``started`` the run's start (``time.monotonic``)."""
    default_ns, best_ns = ns
    cfg, rows = state.cfg, run.rows
    return TuneReport(
        default_ms=default_ns / 1e6,
        best_ms=best_ns / 1e6,
        speedup=default_ns / best_ns,
        compiler_options={} if chosen is None else xla_cpu.to_options(rows[chosen.row]),
        measured=[_entry(m, rows) for m in run.measured],
        failed=run.failed,
        strategy=cfg.strategy,
        budget=cfg.budget,
        candidates=cfg.candidates,
        seed=cfg.seed,
        noise=noise,
        rounds=[r.to_json() for r in run.rounds],
        target=state.target,
        model=cfg.model,
        model_version=state.model_version,
        service_answered=state.answered,
        reason=state.why or _reason(chosen, default_ns, best_ns, run.measured, cfg),
        notes=run.notes,
        seconds=time.monotonic() - started,
        reused=state.reused,
        compiler=state.compiler,
        verified=state.verified,
        graph_id=None if state.program is None else state.program.graph_id,
        decision_stored=state.decision_stored,
        pairs=run.pairs,
    )


def _reason(
    chosen: Candidate | None,
    default_ns: int,
    best_ns: int,
    measured: list[Candidate],
    cfg: TuneConfig,
) -> str:
    rule = (
        f"a sequential signed-rank test at {cfg.alpha} in {cfg.repeats} to "
        f"{cfg.max_pairs} pairs, and over {cfg.min_gain:.0%} faster"
    )
    if chosen is not None:
        v = chosen.verdict
        p = v.p_value if v else float("nan")
        n = v.pairs if v else 0
        return (
            f"{default_ns / best_ns:.3f}x faster than the default in "
            f"{n} interleaved pairs (p = {p:.3g}; kept when {rule})"
        )
    if not measured:
        return "no config compiled: kept the default"
    return f"no config was faster than the default ({rule}): kept the default"


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
