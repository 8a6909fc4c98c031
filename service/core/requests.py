"""The core's requests, as the codecs decode them from a body and its query.

    UploadRequest(model=, graph=, model_version=)
    RankRequest(model=, graph_id= | graph=, configs=, configs_field=, client=,
                options=RankOptions(top_k=, target=, adapt=, portfolio=, ...))

A rank is one frozen ``RankRequest``, built by keyword once, that reaches the
ranker and its shaping unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xla_costmodel.service.core.hlo import HloText
from xla_costmodel.service.core.inputs import RawGraph


@dataclass(frozen=True, kw_only=True)
class UploadRequest:
    model: str
    model_version: str | None = None
    graph: RawGraph | HloText


@dataclass(frozen=True, kw_only=True)
class RankOptions:
    """How to rank, besides what: the answer's size and what may shape the scores."""

    model_version: str | None = None  # None: the model's newest loaded
    top_k: int | None = None  # None: every config
    target: str | None = None  # hardware to adapt to; None: the model's
    adapt: bool = True  # False: the model's prior alone
    portfolio: bool = False  # also answer the exploration order (blend.py)
    compiler: str | None = None  # to run under; None: the target's newest rows'


@dataclass(frozen=True, kw_only=True)
class RankRequest:
    """Exactly one of ``graph_id`` and ``graph`` (the decoders check: ``one_graph``)."""

    model: str
    graph_id: str | None = None
    graph: RawGraph | HloText | None = None
    configs: Any  # arrays, or RawConfigs
    configs_field: str  # the body field they came in: error messages name it
    client: str = ""  # whose budget remembers the batch (``core/clients.py``)
    options: RankOptions = field(default_factory=RankOptions)
