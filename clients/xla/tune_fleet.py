"""What a ``tune`` run asks the fleet before it searches, and tells it after.

    prepare(client, scope, text, lowered, named) -> Prepared   featurize, GET /v1/best
    with_row(rows, config) -> (rows, index)                    the fleet's row among them
    check_known(known, row, compiler, run) -> Checked          verify the fleet's decision
    tell(client, scope, prepared, rows, outcome) -> Told       POST /v1/decisions

Each step returns a frozen value; none writes into another's. A fleet's decision is
compiled and output-checked in the tuning process and timed against the default in
a fresh one (``Rounds.verify``, ``confirm.py``): one that holds (not shown slower)
ends a run with one compile; one shown slower, or whose outputs differ, is refuted
in the run's own decision (``wire.Refuted``), which the service counts against that
exact row. The decision sends measurements, never claims: the kept row with the
fresh process's pairs (``reuse.decision``). A decision whose row is not a valid row
of the run's spec, or sets an option this jaxlib rejects (stale here:
``reuse.served``), is no decision: never compiled, a note says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.errors import CostModelError
from xla_costmodel.clients.hlo import Hlo
from xla_costmodel.clients.payloads import PreparedGraph, prepare_graph
from xla_costmodel.clients.wire import BestKnown, Refuted
from xla_costmodel.clients.xla import reuse
from xla_costmodel.clients.xla.confirm import not_slower
from xla_costmodel.clients.xla.tune_config import Rows, Scope
from xla_costmodel.clients.xla.tune_rounds import Candidate, Played, Rounds


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """The program as the service knows it (``prepare``): its featurized graph and
    name, and the fleet's decision for it (None: none, or not asked) with its row in
    the run's spec (``row``, upgraded from an older spec's). ``why`` the default
    stays when the HLO cannot be used; ``ignored`` why the fleet's decision was not
    even tried."""

    graph: PreparedGraph | None = None
    program: reuse.Program | None = None
    known: BestKnown | None = None
    row: tuple[float, ...] | None = None
    why: str = ""
    ignored: str = ""


@dataclass(frozen=True, kw_only=True)
class Verified:
    """The check of the fleet's decision, from the fresh process's pairs
    (``TuneReport.verified``: ``asdict``, keys in this order)."""

    kept: bool
    speedup: float
    speedup_low: float
    p_value: float
    pairs: int
    stale: bool


@dataclass(frozen=True, kw_only=True)
class Checked:
    """What checking the fleet's decision showed (``check_known``). ``reused``: a
    fresh one held and ends the run, with ``chosen`` (None: it is the default) and
    ``why``; else ``note`` says how the search goes on. ``verified``: the check's
    figures; ``refuted``: the decision this run's own decision refutes."""

    reused: bool = False
    chosen: Candidate | None = None
    verified: Verified | None = None
    refuted: Refuted | None = None
    why: str = ""
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What a run decided: the kept config (None: the default), the default's and
    the kept config's runtimes (ns; the fresh process's medians when it timed
    them), the controls' noise, the fleet's decision's check and the rounds."""

    chosen: Candidate | None
    default_ns: int
    best_ns: int
    noise: float
    checked: Checked
    played: Played


@dataclass(frozen=True)
class Told:
    """Whether the decision was stored (None: not sent) and, when not, why."""

    stored: bool | None = None
    note: str = ""


def prepare(
    client: CostModelClient,
    scope: Scope,
    text: str,
    lowered: Any,
    named: tuple[str, str] | None,
) -> Prepared:
    """Featurize the program for the service and ask what the fleet decided for it
    (``cfg.reuse``)."""
    try:
        graph = prepare_graph(Hlo(text, configurable=None))
    except CostModelError as exc:
        return Prepared(
            why=f"the HLO could not be featurized ({exc}): kept the default"
        )
    name = reuse.fingerprint(lowered) if named is None else named[1]
    program = reuse.Program(graph.graph_id, name)
    cfg = scope.cfg
    known: BestKnown | None = None
    if cfg.reuse:
        known, _ = reuse.ask(
            client,
            cfg.model,
            program,
            scope.target,
            scope.compiler,
            cfg.min_writers,
            cfg.deadline,
        )
    if known is None:
        return Prepared(graph=graph, program=program)
    served = reuse.served(known, cfg.spec)
    if served.row is None:
        # Invalid, or stale here (an option this jaxlib rejects): never compiled,
        # never verified, no decision.
        ignored = (
            f"the fleet's decision {served.why}: ignored "
            f"({reuse.printable(known.config, 80)})"
        )
        return Prepared(graph=graph, program=program, ignored=ignored)
    row = tuple(float(v) for v in served.row)
    return Prepared(graph=graph, program=program, known=known, row=row)


def with_row(rows: Rows, config: Sequence[float]) -> tuple[Rows, int]:
    """``rows`` holding ``config`` (appended unless sampled already) and its index."""
    row = np.asarray(config, np.float32)
    if row.shape != rows.shape[1:]:
        raise CostModelError(
            f"decided config has {row.size} values, not {rows.shape[1]}"
        )
    same = np.flatnonzero((rows == row).all(axis=1))
    if same.size:
        return rows, int(same[0])
    return np.vstack([rows, row[None]]), len(rows)


def check_known(
    known: BestKnown | None, row: int | None, compiler: str, run: Rounds
) -> Checked:
    """Check the fleet's decision (``known``, row ``row`` of the run's) before any
    search: a fresh one that holds ends the run (``reused``); one that does not
    hold, or a stale one, is adopted as the run's first measured config. One shown
    slower, or with other outputs, is refuted in this run's decision."""
    if known is None or row is None:
        return Checked()
    fresh = reuse.fresh(known, compiler)
    if known.is_default:  # nothing to compile: the default is the decision
        if fresh:
            run.log(
                f"reusing the fleet's decision: the default ({known.writers} writer(s))"
            )
        return Checked(reused=fresh)
    run.log(f"checking the fleet's decision ({'fresh' if fresh else 'stale'}) first")
    config = tuple(float(v) for v in run.rows[row])
    trial = run.verify(row)
    m = trial.candidate
    if m is None:
        if trial.refused_outputs:
            return Checked(
                refuted=Refuted(config=config, reason="outputs"),
                note="the fleet's decision changed the outputs: tuned instead",
            )
        return Checked(note="the fleet's decision did not compile here: tuned instead")
    c = m.confirmation
    assert c is not None and c.summary is not None  # verify() timed it
    s, held = c.summary, not_slower(c)
    verified = Verified(
        kept=held,
        speedup=s.speedup,
        speedup_low=s.speedup_low,
        p_value=s.p_value,
        pairs=s.pairs,
        stale=not fresh,
    )
    run.adopt(m)  # the run's first measured config, whatever follows
    refuted = (
        None
        if held
        else Refuted(config=config, reason="slower", paired_runtimes_ns=c.pairs)
    )
    if fresh and held:
        why = (
            f"the fleet's decision ({known.writers} writer(s)), verified here in a "
            f"fresh process (not slower than the default): {s.speedup:.3f}x the "
            f"default's speed in {s.pairs} rounds (p = {s.p_value:.3g}): reused"
        )
        return Checked(reused=True, chosen=m, verified=verified, why=why)
    why = "decided under " + str(known.compiler) if not fresh else "did not hold"
    note = f"the fleet's decision {why}: tuned with it measured first"
    return Checked(verified=verified, refuted=refuted, note=note)


def tell(
    client: CostModelClient,
    scope: Scope,
    prepared: Prepared,
    rows: Rows,
    outcome: Outcome,
) -> Told:
    """Send the final decision: the kept row with the fresh process's pairs (none
    for the default), and the fleet's decision this run refuted. The service
    stores the pairs itself; it must know the graph first, which the rounds'
    feedback told it: a run without any (a reused decision) sends the
    verification's runtimes as feedback first. A refusal (no writer token, ...) is
    a note, never a failure of the run."""
    assert prepared.program is not None
    cfg, chosen, checked = scope.cfg, outcome.chosen, outcome.checked
    row = rows[0] if chosen is None else rows[chosen.row]
    made = reuse.decision(
        prepared.program,
        row,
        () if chosen is None else chosen.pairs,
        target=scope.target,
        compiler=scope.compiler,
        budget=cfg.budget,
        strategy="reuse" if checked.reused else cfg.strategy,
        refuted=checked.refuted,
    )
    model_version = outcome.played.model_version
    try:
        if not any(r.feedback_stored for r in outcome.played.rounds):
            runtimes, configs = [outcome.default_ns], [rows[0]]
            if chosen is not None and chosen.final_ns is not None:
                runtimes.append(chosen.final_ns)
                configs.append(row)
            client.feedback(
                cfg.model,
                prepared.program.graph_id if prepared.graph is None else prepared.graph,
                np.asarray(runtimes, np.int64),
                configs=np.stack(configs),
                model_version=model_version,
                target=scope.target,
                compiler=scope.compiler,
                deadline=cfg.deadline,
            )
        client.record_decision(
            cfg.model, made, model_version=model_version, deadline=cfg.deadline
        )
    except CostModelError as exc:
        return Told(stored=False, note=f"the decision was not stored ({exc})")
    return Told(stored=True)
