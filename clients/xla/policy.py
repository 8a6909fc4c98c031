"""What each round of a tuning run measures: the portfolio first, then the ranking.

    plan(budget, rounds) -> [Round(size, explore), ...]
    pick(ranking, portfolio, round, taken) -> indices to measure
    finalists(vs_default, confirm(budget)) -> the configs the final decision verifies

The first round measures the service's portfolio (configs that won on other programs
of this target, greedy coverage; where the target's knowledge is thin, spread-out
configs): never the top-k near-duplicates of one guess. Later rounds take the top of
the service's adapted ranking, with ``explore`` of their picks still from the
portfolio order (which the service re-weights by what this graph measured), and the
last round exploits only. A budget of 1 or 2 is one round of the portfolio's head: a
ranking adapted to one measurement picked worse than the portfolio's second config
in the simulation. The final decision verifies ``confirm(budget)`` configs, more at
larger budgets: there the best config measured is often not among the two that
measured fastest (round measurements are noisy), and each finalist costs only
pairs, never a compile. ``costmodel tune`` and the fleet simulation (``costmodel
simulate``) share this module; the split was chosen by that simulation
(studies/README.md). Sans I/O, numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

ROUNDS = 3
ONE_ROUND_UP_TO = 2  # budgets this small are one portfolio round
# Share of the budget measured in the first round (the portfolio).
FIRST_SHARE = 0.5
# Picks from the portfolio order in each middle round.
MIDDLE_EXPLORE = 1
# A measured config goes to the final decision when it measured under this ratio to
# the default beside it (the decision's futility bound stops a slower one quickly).
FINALIST_RATIO = 1.0


@dataclass(frozen=True)
class Round:
    size: int  # configs to measure
    explore: int  # of them, from the portfolio order; the rest from the ranking


def plan(budget: int, rounds: int | None = None) -> list[Round]:
    """The rounds of a run of ``budget`` measurements (``rounds`` default 3, 1 for
    budgets up to ``ONE_ROUND_UP_TO``)."""
    if rounds is None:
        n = 1 if budget <= ONE_ROUND_UP_TO else min(ROUNDS, budget)
    else:
        n = rounds
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


def confirm(budget: int) -> int:
    """Configs the final decision verifies: 2, and one more per 4 compiles from 12."""
    return max(2, budget // 4)


def finalists(
    vs_default: Mapping[int, float], confirm: int, ratio: float | None = None
) -> list[int]:
    """The ``confirm`` configs that measured fastest against the default beside them,
    of those under ``ratio`` (``FINALIST_RATIO``): what the final decision verifies."""
    limit = FINALIST_RATIO if ratio is None else ratio
    under = [i for i, v in vs_default.items() if v < limit]
    return sorted(under, key=lambda i: (vs_default[i], i))[:confirm]
