"""``FeedbackOptions``: every choice of one report besides the model, graph and runtimes.

The twin of ``RankOptions``: ``CostModelClient.feedback(...)`` builds one from its
keywords, sessions build one with their pinned version, target and compiler, and
both hand it to ``feedback_with`` and on to ``operations.feedback_flow``, so the
list of feedback keywords is written once, here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from xla_costmodel.clients.retry import Deadline


@dataclass(frozen=True, kw_only=True)
class FeedbackOptions:
    """What the runtimes were measured for and under (see
    ``CostModelClient.feedback``): exactly one of ``configs`` and
    ``config_indices``, the indices with the ``ranking_id`` of the answer they
    index."""

    configs: Any | None = None  # config rows (arrays or raw configs), or
    config_indices: Sequence[int] | None = None  # indices into a rank answer
    ranking_id: str | None = None  # that answer's (``RankResult.ranking_id``)
    model_version: str | None = None  # None: the version serving now
    target: str | None = None  # the hardware measured on; None: the model's
    compiler: str | None = None  # the build measured under; None: unknown
    # Seconds (or a ``Deadline``) for the whole call, resends included.
    deadline: float | Deadline | None = None
