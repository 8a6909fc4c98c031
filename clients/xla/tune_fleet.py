"""What a ``tune`` run asks the fleet before it searches, and tells it after.

    prepare(state, client, text, lowered, named) -> why   featurize, ask GET /v1/best
    with_row(rows, config) -> (rows, index)             the fleet's row among them
    check_known(state, run, log) -> Candidate | None    verify the fleet's decision
    tell(state, client, run, rows, chosen, default_ns)  POST /v1/decisions

A fleet's decision is compiled and output-checked in the tuning process and timed
against the default in a fresh one (``Rounds.verify``, ``confirm.py``): one that
holds (not shown slower) ends a run with one compile; one shown slower, or whose
outputs differ, is refuted in the run's own decision (``wire.Refuted``), which the
service counts against that exact row. The decision sends measurements, never
claims: the kept row with the fresh process's pairs (``reuse.decision``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.errors import CostModelError
from xla_costmodel.clients.hlo import Hlo
from xla_costmodel.clients.payloads import prepare_graph
from xla_costmodel.clients.wire import Refuted
from xla_costmodel.clients.xla import reuse
from xla_costmodel.clients.xla.confirm import not_slower
from xla_costmodel.clients.xla.tune_config import Log, Rows
from xla_costmodel.clients.xla.tune_report import RunState
from xla_costmodel.clients.xla.tune_rounds import Candidate, Rounds
from xla_costmodel.tpugraphs import xla_cpu


def prepare(
    state: RunState,
    client: CostModelClient,
    text: str,
    lowered: Any,
    named: tuple[str, str] | None,
) -> str:
    """Featurize the program for the service and ask what the fleet decided for it
    (``cfg.reuse``); returns why the default stays when the HLO cannot be used."""
    try:
        state.graph = prepare_graph(Hlo(text, configurable=None))
    except CostModelError as exc:
        return f"the HLO could not be featurized ({exc}): kept the default"
    name = reuse.fingerprint(lowered) if named is None else named[1]
    state.program = reuse.Program(state.graph.graph_id, name)
    if state.cfg.reuse:
        state.known, _ = reuse.ask(
            client,
            state.cfg.model,
            state.program,
            state.target,
            state.compiler,
            state.cfg.min_writers,
            state.cfg.deadline,
        )
    if state.known is not None and reuse.options_of(state.known) is None:
        # Not a valid, sampled row of this spec: never compiled, never verified.
        state.ignored = (
            "the fleet's decision is not a valid row of "
            f"{xla_cpu.SPEC}: ignored ({reuse.printable(state.known.config, 80)})"
        )
        state.known = None
    return ""


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


def check_known(state: RunState, run: Rounds, log: Log) -> Candidate | None:
    """Check the fleet's decision before any search: a fresh one that holds ends the
    run (``state.reused``; the kept config, None for the default); one that does
    not hold, or a stale one, is adopted as the run's first measured config. One
    shown slower, or with other outputs, is refuted in this run's decision."""
    known, row = state.known, state.known_row
    if known is None or row is None:
        return None
    fresh = reuse.fresh(known, state.compiler)
    if known.is_default:
        state.reused = fresh  # nothing to compile: the default is the decision
        if fresh:
            log(
                f"reusing the fleet's decision: the default ({known.writers} writer(s))"
            )
        return None
    options = xla_cpu.to_options(run.rows[row])
    log(f"checking the fleet's decision ({'fresh' if fresh else 'stale'}) first")
    config = tuple(float(v) for v in run.rows[row])
    m = run.verify(row, options)
    if m is None:
        if run.refused_outputs:
            state.refuted = Refuted(config=config, reason="outputs")
            run.notes.append("the fleet's decision changed the outputs: tuned instead")
        else:
            run.notes.append("the fleet's decision did not compile here: tuned instead")
        return None
    c = m.confirmation
    assert c is not None and c.summary is not None  # verify() timed it
    s = c.summary
    held = not_slower(c)
    state.verified = {
        "kept": held,
        "speedup": s.speedup,
        "speedup_low": s.speedup_low,
        "p_value": s.p_value,
        "pairs": s.pairs,
        "stale": not fresh,
    }
    run.adopt(m)  # the run's first measured config, whatever follows
    if not held:
        state.refuted = Refuted(
            config=config, reason="slower", paired_runtimes_ns=c.pairs
        )
    if fresh and held:
        state.reused = True
        state.why = (
            f"the fleet's decision ({known.writers} writer(s)), verified here in a "
            f"fresh process (not slower than the default): {s.speedup:.3f}x the "
            f"default's speed in {s.pairs} rounds (p = {s.p_value:.3g}): reused"
        )
        return m
    why = "decided under " + str(known.compiler) if not fresh else "did not hold"
    run.notes.append(f"the fleet's decision {why}: tuned with it measured first")
    return None


def tell(
    state: RunState,
    client: CostModelClient,
    run: Rounds,
    rows: Rows,
    chosen: Candidate | None,
    default_ns: int,
) -> None:
    """Send the final decision: the kept row with the fresh process's pairs (none
    for the default), and the fleet's decision this run refuted. The service
    stores the pairs itself; it must know the graph first, which the rounds'
    feedback told it: a run without any (a reused decision) sends the
    verification's runtimes as feedback first. A refusal (no writer token, ...) is
    a note, never a failure of the run."""
    assert state.program is not None
    cfg = state.cfg
    row = rows[0] if chosen is None else rows[chosen.row]
    made = reuse.decision(
        state.program,
        row,
        () if chosen is None else chosen.pairs,
        target=state.target,
        compiler=state.compiler,
        budget=cfg.budget,
        strategy="reuse" if state.reused else cfg.strategy,
        refuted=state.refuted,
    )
    model_version = state.model_version
    try:
        if not any(r.feedback_stored for r in run.rounds):
            runtimes, configs = [default_ns], [rows[0]]
            if chosen is not None and chosen.final_ns is not None:
                runtimes.append(chosen.final_ns)
                configs.append(row)
            client.feedback(
                cfg.model,
                state.graph if state.graph is not None else state.program.graph_id,
                np.asarray(runtimes, np.int64),
                configs=np.stack(configs),
                model_version=model_version,
                target=state.target,
                compiler=state.compiler,
                deadline=cfg.deadline,
            )
        client.record_decision(
            cfg.model, made, model_version=model_version, deadline=cfg.deadline
        )
        state.decision_stored = True
    except CostModelError as exc:
        state.decision_stored = False
        run.notes.append(f"the decision was not stored ({exc})")
