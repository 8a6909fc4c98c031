"""JSON request bodies, decoded into wire models and the core's requests.

    decode_json(model, body, content_type)   415 unless JSON, else the validated model
    validation_error(exc)                    a pydantic error as ours (422, or 400)
    json_graph(body)                         ``PUT /v1/graphs``: the graph's arrays
    json_rank(body, client=, adapt=)         ``POST /v1/rank``: the ``RankRequest``
    json_rank_graph(wire, nbytes)            rank's and feedback's graph: id, arrays, HLO

The one place a JSON body is validated: ``codecs.py`` dispatches rank and upload
bodies here by media type (and keeps npz and HLO text); the feedback and decisions
routes, JSON only, call ``decode_json``. Validation errors name the field by its
dotted path, without list indices.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from xla_costmodel.service.body import media_type
from xla_costmodel.service.core.hlo import HloText
from xla_costmodel.service.core.inputs import RawGraph, config_array, one_graph
from xla_costmodel.service.core.raw_configs import RawConfigs
from xla_costmodel.service.core.requests import RankOptions, RankRequest
from xla_costmodel.service.errors import (
    InvalidRequest,
    MalformedBody,
    UnsupportedMediaType,
)
from xla_costmodel.service.schemas import FeedbackIn, GraphIn, RankIn

JSON_MEDIA_TYPE = "application/json"
M = TypeVar("M", bound=BaseModel)


def decode_json(model: type[M], body: bytes, content_type: str | None) -> M:
    """``model`` from a body that must be JSON (415 naming ``content-type`` if not)."""
    if media_type(content_type) != JSON_MEDIA_TYPE:
        raise UnsupportedMediaType(
            f"content type {content_type or '(none)'!r} is not {JSON_MEDIA_TYPE}",
            "content-type",
        )
    return validated(model, body)


def validated(model: type[M], body: bytes) -> M:
    """``model`` from JSON ``body``; an invalid one raises ``validation_error``'s."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise validation_error(exc) from None


def validation_error(exc: ValidationError) -> InvalidRequest | MalformedBody:
    """The first pydantic error as ours, its location as a dotted field (no indices)."""
    first = exc.errors(include_url=False)[0]
    if first["type"] == "json_invalid":
        return MalformedBody(str(first["msg"]))
    keys = [str(part) for part in first["loc"] if isinstance(part, str)]
    field = ".".join(keys) if keys else "body"
    return InvalidRequest(first["msg"], field)


def json_graph(body: bytes, max_decoded: int) -> RawGraph:
    """An uploaded graph (``max_decoded``: unused, JSON is not compressed)."""
    return _graph_arrays(validated(GraphIn, body), "", len(body))


def json_rank(body: bytes, *, client: str, adapt: bool) -> RankRequest:
    """The rank request of a JSON body; ``adapt=False`` (the query's) overrides it."""
    req = validated(RankIn, body)
    graph = json_rank_graph(req, len(body))
    if (req.configs is None) == (req.raw_configs is None):
        raise InvalidRequest("give exactly one of configs or raw_configs", "configs")
    configs: Any = RawConfigs(req.raw_configs) if req.raw_configs is not None else None
    if req.configs is not None:  # here, off the loop when the body is large
        configs = config_array(req.configs, "configs")
    options = RankOptions(
        model_version=req.model_version,
        top_k=req.top_k,
        target=req.target,
        adapt=req.adapt and adapt,
        portfolio=req.portfolio,
        compiler=req.compiler,
    )
    return RankRequest(
        model=req.model,
        graph_id=req.graph_id,
        graph=graph,
        configs=configs,
        configs_field="configs" if req.raw_configs is None else "raw_configs",
        client=client,
        options=options,
    )


def json_rank_graph(req: RankIn | FeedbackIn, nbytes: int) -> RawGraph | HloText | None:
    """The graph of a rank or feedback body: by id (None), arrays, or HLO text."""
    one_graph(req.graph_id, req.graph, req.hlo)
    if req.configurable is not None and req.hlo is None:
        raise InvalidRequest("configurable goes with hlo", "configurable")
    if req.hlo is not None:
        names = None if req.configurable is None else tuple(req.configurable)
        return HloText(req.hlo, names, "hlo")
    return None if req.graph is None else _graph_arrays(req.graph, "graph.", nbytes)


def _graph_arrays(graph: GraphIn, prefix: str, nbytes: int) -> RawGraph:
    arrays = {
        "node_feat": graph.node_feat,
        "node_opcode": graph.node_opcode,
        "edge_index": graph.edge_index,
    }
    if graph.node_config_ids is not None:
        arrays["node_config_ids"] = graph.node_config_ids
    return RawGraph(arrays, prefix, nbytes)
