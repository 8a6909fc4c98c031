"""Thin client for the costmodel service, and the replay autotuner built on it.

Depends on httpx and numpy (plus the numpy-only ``tpugraphs`` format core) only::

    from xla_costmodel.clients import CostModelClient

    with CostModelClient("http://127.0.0.1:8000") as client:
        session = client.session("tile")
        result = session.rank("kernel.npz", configs, top_k=5, deadline=0.5, fallback=[0])
        if not result.degraded:
            session.feedback("kernel.npz", runtimes, configs=configs[list(result.top_k)])

A graph may also be HLO text (``Hlo(text)``, or a ``.hlo.txt`` path) and configs may be
raw (``TileSizes``, or instruction name -> ``NodeLayout``): both are featurized and
encoded on the client, so the graph_id is the service's own (see ``xla_costmodel.clients.hlo``)::

        client.rank("layout", Hlo.read("model.hlo.txt"), [{"dot.3": NodeLayout([0, 1])}])
"""

from __future__ import annotations

from xla_costmodel.clients.async_client import AsyncCostModelClient
from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.errors import (
    ApiError,
    CostModelError,
    DeadlineExceeded,
    EndpointNotFound,
    GraphNotFound,
    InvalidRequest,
    ModelNotFound,
    NoDecision,
    NotFound,
    ProtocolError,
    ServiceUnavailable,
    VersionNotLoaded,
)
from xla_costmodel.clients.exchange import DEFAULT_LIMITS, DEFAULT_TIMEOUT
from xla_costmodel.clients.feedback_options import FeedbackOptions
from xla_costmodel.clients.hlo import Hlo
from xla_costmodel.clients.payloads import GraphInput, PreparedGraph, prepare_graph
from xla_costmodel.clients.rank_options import RankOptions
from xla_costmodel.clients.retry import Deadline, RetryPolicy
from xla_costmodel.clients.session import AsyncTuningSession, TuningSession
from xla_costmodel.clients.wire import (
    BestKnown,
    Decision,
    DecisionResult,
    FeedbackResult,
    GraphInfo,
    ModelInfo,
    RankResult,
)
from xla_costmodel.tpugraphs.configs import NodeLayout, TileSizes

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_TIMEOUT",
    "ApiError",
    "AsyncCostModelClient",
    "AsyncTuningSession",
    "BestKnown",
    "CostModelClient",
    "CostModelError",
    "Deadline",
    "DeadlineExceeded",
    "Decision",
    "DecisionResult",
    "EndpointNotFound",
    "FeedbackOptions",
    "FeedbackResult",
    "GraphInfo",
    "GraphInput",
    "GraphNotFound",
    "Hlo",
    "InvalidRequest",
    "ModelInfo",
    "ModelNotFound",
    "NoDecision",
    "NodeLayout",
    "NotFound",
    "PreparedGraph",
    "ProtocolError",
    "RankOptions",
    "RankResult",
    "RetryPolicy",
    "ServiceUnavailable",
    "TileSizes",
    "TuningSession",
    "VersionNotLoaded",
    "prepare_graph",
]
