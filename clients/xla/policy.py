"""What each round of a tuning run measures: the portfolio first, then the ranking.

    plan(budget, rounds) -> [Round(size, explore), ...]
    pick(ranking, portfolio, round, taken) -> indices to measure

The first round measures the service's portfolio (configs that won on other programs
of this target, greedy coverage; where the target's knowledge is thin, spread-out
configs): never the top-k near-duplicates of one guess. Later rounds take the top of
the service's adapted ranking, with ``explore`` of their picks still from the
portfolio order (which the service re-weights by what this graph measured), and the
last round exploits only. ``costmodel tune`` and the fleet simulation (``costmodel
simulate``) share this module; the split was chosen by that simulation
(studies/README.md). Sans I/O, numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ROUNDS = 3
# Share of the budget measured in the first round (the portfolio).
FIRST_SHARE = 0.5
# Picks from the portfolio order in each middle round.
MIDDLE_EXPLORE = 1


@dataclass(frozen=True)
class Round:
    size: int  # configs to measure
    explore: int  # of them, from the portfolio order; the rest from the ranking


def plan(budget: int, rounds: int | None = None) -> list[Round]:
    """The rounds of a run of ``budget`` measurements (``rounds`` default 3)."""
    n = min(ROUNDS, budget) if rounds is None else rounds
    if not 1 <= n <= budget:
        raise ValueError(f"rounds must be in [1, budget={budget}], got {n}")
    if n == 1:
        return [Round(budget, budget)]
    first = max(1, min(budget - (n - 1), round(budget * FIRST_SHARE)))
    rest = [len(p) for p in np.array_split(np.arange(budget - first), n - 1)]
    out = [Round(first, first)]
    for i, size in enumerate(rest):
        last = i == len(rest) - 1
        out.append(Round(size, 0 if last else min(MIDDLE_EXPLORE, size)))
    return out


def pick(
    ranking: Sequence[int],
    portfolio: Sequence[int] | None,
    step: Round,
    taken: Sequence[int] = (),
) -> list[int]:
    """``step.size`` indices not in ``taken``: ``step.explore`` from the portfolio
    order (the ranking's order when there is none), then the ranking's best."""
    seen = set(taken)
    out: list[int] = []

    def take(order: Sequence[int], k: int) -> None:
        for i in order:
            if len(out) >= k:
                return
            if int(i) not in seen:
                seen.add(int(i))
                out.append(int(i))

    take(portfolio if portfolio is not None else ranking, step.explore)
    take(ranking, step.size)
    return out
