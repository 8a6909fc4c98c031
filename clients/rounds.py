"""Replay in rounds: the autotuner's learning curve on one labelled graph.

Each round ranks the configs not measured yet, "measures" the top ``budget`` (their
recorded runtimes), sends them as feedback, and goes on; the service adapts its
ranking of the graph to what was fed back. Beside that live loop, three baselines
get the same number of measurements per round, computed here without the service's
database (none of them sends feedback, so they cannot help or hurt the live loop):

- ``model``: the model's prior alone (``adapt=false``): its top ``r * budget``.
- ``random``: the exact expected best of ``r * budget`` uniformly random configs.
- ``per_graph``: TVM's way, no prior: random picks until two distinct configs are
  measured, then each round the top of ``xla_costmodel.tpugraphs.adapt.fit`` on this loop's own
  measurements (seeded, so a replay is repeatable).

After each round the slowdown of every strategy is its best measured runtime / the
true best - 1; where the collection reports Kendall tau (layout, xla_cpu) also tau on
the configs not measured yet (of the live loop's ranking, the prior's, and the
per-graph fit's).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from xla_costmodel.clients.wire import RankResult
from xla_costmodel.tpugraphs.adapt import fit
from xla_costmodel.tpugraphs.arrays import Sample
from xla_costmodel.tpugraphs.metrics import expected_random_topk_slowdown, kendall_tau

# ranks the given config indices of the sample; adapt=False asks for the prior alone
RankFn = Callable[[Sequence[int], bool], RankResult]
FeedbackFn = Callable[[Sequence[int]], int | None]


@dataclass(frozen=True)
class RoundScore:
    round: int
    measured: int  # configs measured so far by each strategy
    adapted: int  # measurements the service's ranking used in this round
    slowdown: float  # model + adaptation (the live loop)
    model_slowdown: float
    random_slowdown: float
    per_graph_slowdown: float
    kendall_tau_unmeasured: dict[str, float | None] | None  # collections with tau


@dataclass(frozen=True)
class RoundsResult:
    rounds: list[RoundScore]
    measured: list[int]  # the live loop's measured configs, in order
    feedback_stored: int | None
    last: RankResult


def run_rounds(
    sample: Sample,
    rounds: int,
    budget: int,
    rank: RankFn,
    feedback: FeedbackFn,
    seed: int = 0,
) -> RoundsResult:
    """The live loop and its baselines on one graph (see the module docstring)."""
    runtimes = sample.runtimes
    n = sample.num_configs
    true_best = float(runtimes.min())
    everything = list(range(n))
    prior = rank(everything, False)
    prior_scores = np.asarray(prior.scores, np.float64)
    rng = np.random.default_rng([seed, zlib.crc32(sample.name.encode())])
    live: list[int] = []
    mine: list[int] = []  # the per-graph (no prior) loop's measurements
    stored: int | None = 0
    out: list[RoundScore] = []
    last = prior
    for r in range(1, rounds + 1):
        remaining = _unmeasured(n, live)
        if not remaining:
            break
        last = rank(remaining, True)
        picks = [remaining[j] for j in last.ranking[:budget]]
        sent = feedback(picks)
        stored = None if sent is None or stored is None else stored + sent
        live += picks
        fitted = _per_graph_scores(sample, mine)
        mine += _per_graph_picks(fitted, mine, budget, n, rng)
        k = len(live)
        tau = None
        if sample.spec.metrics.kendall:
            tau = _taus(sample, remaining, last, prior_scores, fitted)
        out.append(
            RoundScore(
                round=r,
                measured=k,
                adapted=last.adapted,
                slowdown=float(runtimes[live].min()) / true_best - 1.0,
                model_slowdown=float(runtimes[list(prior.ranking[:k])].min())
                / true_best
                - 1.0,
                random_slowdown=expected_random_topk_slowdown(runtimes, k),
                per_graph_slowdown=float(runtimes[mine].min()) / true_best - 1.0,
                kendall_tau_unmeasured=tau,
            )
        )
    return RoundsResult(out, live, stored, last)


def _unmeasured(n: int, measured: Sequence[int]) -> list[int]:
    seen = set(measured)
    return [i for i in range(n) if i not in seen]


def _per_graph_scores(
    sample: Sample, measured: Sequence[int]
) -> npt.NDArray[np.float32] | None:
    """Scores of every config from a no-prior fit on ``measured`` (None: too few)."""
    if len(set(measured)) < 2:
        return None
    idx = list(measured)
    adapter = fit(sample.configs[idx], sample.runtimes[idx], None)
    return adapter.score(sample.configs, None)


def _per_graph_picks(
    scores: npt.NDArray[np.float32] | None,
    measured: Sequence[int],
    budget: int,
    n: int,
    rng: np.random.Generator,
) -> list[int]:
    remaining = np.asarray(_unmeasured(n, measured), np.int64)
    if scores is None:  # nothing to learn from yet: explore at random
        take = min(budget, len(remaining))
        return [int(i) for i in rng.choice(remaining, take, replace=False)]
    order = remaining[np.argsort(scores[remaining], kind="stable")]
    return [int(i) for i in order[:budget]]


def _taus(
    sample: Sample,
    remaining: Sequence[int],
    live: RankResult,
    prior: npt.NDArray[np.float64],
    fitted: npt.NDArray[np.float32] | None,
) -> dict[str, float | None]:
    truth = sample.runtimes[list(remaining)]

    def tau(scores: npt.ArrayLike | None) -> float | None:
        if scores is None or np.unique(truth).size < 2:
            return None
        value = kendall_tau(scores, truth)
        return None if np.isnan(value) else float(value)

    idx = list(remaining)
    return {
        "adapted": tau(None if live.scores is None else np.asarray(live.scores)),
        "model": tau(prior[idx]),
        "per_graph": tau(None if fitted is None else fitted[idx]),
    }
