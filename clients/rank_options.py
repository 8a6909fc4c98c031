"""``RankOptions``: every choice of one rank besides the model, graph and configs.

``CostModelClient.rank(...)`` builds one from its keywords; sessions build one with
their pinned version, target and compiler; both hand it to ``rank_with``, so the
list of rank keywords is written once, here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xla_costmodel.clients.retry import Deadline


@dataclass(frozen=True)
class RankOptions:
    """How to rank (see ``CostModelClient.rank`` for what each option does)."""

    top_k: int | None = None
    # Seconds (or a ``Deadline``) for the whole call, client-side preparation too.
    deadline: float | Deadline | None = None
    # The caller's own order, best first, answered (degraded) when the service can't.
    fallback: Sequence[int] | None = None
    model_version: str | None = None
    target: str | None = None  # the hardware the configs will run on
    compiler: str | None = None  # the compiler build they will run under
    adapt: bool = True  # False: the model's prior alone
    portfolio: bool = False  # also answer every index in exploration order
