"""Phase 2 of ``xla_costmodel.studies.learning``: adaptation on ``unet_3d.4x4.bf16``.

The shipped layout model never trained on this graph. (a) The headline: 50 rows
(``default_rng(seed).permutation(C)[:50]``) go to the service as feedback through the
client; the service then ranks the file's other rows, adapted and prior-only
(``adapt=False``), and Kendall tau compares each with the recorded runtimes. Each
seed reports under a target of its own, so every seed starts from an empty
measurement set on the same service. (b) The replay learning curve (rounds of
``budget`` measurements, ``xla_costmodel.clients.rounds``), with tau on the unmeasured configs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

import numpy as np

from xla_costmodel.clients import CostModelClient, PreparedGraph, prepare_graph
from xla_costmodel.clients.replay import Budget, Replayer
from xla_costmodel.tpugraphs.arrays import Sample
from xla_costmodel.tpugraphs.metrics import kendall_tau
from xla_costmodel.tpugraphs.reader import load_npz

UNET = "npz/layout/xla/default/valid/unet_3d.4x4.bf16.npz"
LAYOUT_MODEL = "layout"
CURVE_TARGET = "tpu-v3"  # the model's own target; no other phase writes to it
FEEDBACK_ROWS = 50


def unet(shared: Path) -> Sample:
    return load_npz(shared / UNET)


def headline_seed(
    client: CostModelClient, sample: Sample, graph: PreparedGraph, seed: int
) -> dict[str, Any]:
    """Feedback of 50 rows (seeded), then tau on the other rows, adapted vs prior."""
    n = sample.num_configs
    fed = np.random.default_rng(seed).permutation(n)[:FEEDBACK_ROWS]
    other = np.setdiff1d(np.arange(n), fed)
    session = client.session(LAYOUT_MODEL, target=f"tpu-v3.headline-seed{seed}")
    answer = session.feedback(graph, sample.runtimes[fed], configs=sample.configs[fed])
    adapted = session.rank(graph, sample.configs[other])
    prior = session.rank(graph, sample.configs[other], adapt=False)
    if adapted.scores is None or prior.scores is None or adapted.adapted == 0:
        raise RuntimeError(f"seed {seed}: the service did not adapt its ranking")
    truth = sample.runtimes[other]
    return {
        "seed": seed,
        "feedback_rows": int(fed.size),
        "feedback_stored": answer.stored,
        "adapted_distinct_configs": adapted.adapted,
        "ranked_rows": int(other.size),
        "tau_adapted": kendall_tau(adapted.scores, truth),
        "tau_prior": kendall_tau(prior.scores, truth),
    }


def repeat_ceiling(sample: Sample) -> dict[str, Any]:
    """Tau between the 1st and 2nd measurement of each config the file repeats: how
    well one measurement of this graph ranks another, the ceiling for any ranker."""
    rows = sample.configs.reshape(sample.num_configs, -1)
    _, group = np.unique(rows, axis=0, return_inverse=True)
    first: dict[int, float] = {}
    second: dict[int, float] = {}
    for i, g in enumerate(group.reshape(-1).tolist()):
        (second if g in first else first).setdefault(g, float(sample.runtimes[i]))
    keys = sorted(second)
    return {
        "tau": kendall_tau([first[k] for k in keys], [second[k] for k in keys]),
        "repeated_configs": len(keys),
        "distinct_configs": len(first),
        "rows": sample.num_configs,
    }


def headline(client: CostModelClient, sample: Sample, seeds: int) -> dict[str, Any]:
    graph = prepare_graph(sample)
    per_seed = [headline_seed(client, sample, graph, s) for s in range(seeds)]
    rest = per_seed[1:]

    def stats(key: str) -> dict[str, float] | None:
        values = [r[key] for r in rest]
        if not values:
            return None
        return {"mean": fmean(values), "min": min(values), "max": max(values)}

    return {
        "graph": Path(UNET).stem,
        "seed0": per_seed[0],
        "seeds": per_seed,
        "seeds_1_to_n": {
            "count": len(rest),
            "tau_adapted": stats("tau_adapted"),
            "tau_prior": stats("tau_prior"),
        },
        "noise_ceiling": repeat_ceiling(sample),
    }


def curve(
    client: CostModelClient, shared: Path, rounds: int, budget: int
) -> dict[str, Any]:
    """The replay loop on unet; per round the strategies' slowdowns and taus."""
    replayer = Replayer(
        client,
        Budget(count=budget),
        model=LAYOUT_MODEL,
        rounds=rounds,
        target=CURVE_TARGET,
    )
    graph = replayer.run([shared / UNET]).graphs[0]
    assert graph.rounds is not None
    return {
        "rounds": rounds,
        "budget": budget,
        "target": CURVE_TARGET,
        "feedback_stored": graph.feedback_stored,
        "per_round": [_round_row(r) for r in graph.rounds],
    }


def _round_row(r: Any) -> dict[str, Any]:
    keys: Sequence[str] = (
        "round",
        "measured",
        "adapted",
        "slowdown",
        "model_slowdown",
        "random_slowdown",
        "per_graph_slowdown",
    )
    row = {k: getattr(r, k) for k in keys}
    row["kendall_tau_unmeasured"] = r.kendall_tau_unmeasured
    return row


def run(client: CostModelClient, shared: Path, plan: Any) -> dict[str, Any]:
    sample = unet(shared)
    return {
        "headline": headline(client, sample, plan.headline_seeds),
        "curve": curve(client, shared, plan.unet_rounds, plan.unet_budget),
    }
