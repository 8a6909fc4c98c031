"""Request bodies by media type: npz and HLO text here, JSON in ``json_body.py``,
decoded into the core's requests; and the rank answer as npz.

The decoders are looked up in ``GRAPH_DECODERS``/``RANK_DECODERS`` by media type, so a
new input format (HLO text, say) is one function and one table entry. Decoding only
parses; validation of the arrays happens in ``xla_costmodel.service.core.inputs``, and HLO text
and raw configs are featurized/encoded by the core once it knows the model.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from xla_costmodel.service.body import media_type
from xla_costmodel.service.core.hlo import HloText
from xla_costmodel.service.core.inputs import SENT_GRAPH_KEYS, RawGraph, one_graph
from xla_costmodel.service.core.requests import (
    RankOptions,
    RankRequest,
    UploadRequest,
)
from xla_costmodel.service.errors import (
    InvalidRequest,
    MalformedBody,
    PayloadTooLarge,
    UnsupportedMediaType,
)
from xla_costmodel.service.json_body import JSON_MEDIA_TYPE, json_graph, json_rank
from xla_costmodel.service.schemas import HLO_MEDIA_TYPE, NPZ_MEDIA_TYPE
from xla_costmodel.tpugraphs.collections import COLLECTIONS, config_keys
from xla_costmodel.tpugraphs.npz import NpzError, NpzTooLarge, read_npz

CONFIG_KEYS = config_keys()  # config_feat, node_config_feat
# Keys of TpuGraphs files that the service does not need (labels, splits, the config
# spec): ignored, so a file uploads as it is.
IGNORED_KEYS = frozenset(
    key
    for c in COLLECTIONS.values()
    for key in c.file_keys
    if key not in SENT_GRAPH_KEYS and key not in CONFIG_KEYS
)


@dataclass(frozen=True, kw_only=True)
class Params:
    """Query parameters; for npz bodies they carry what JSON puts in the body."""

    model: str | None = None
    model_version: str | None = None
    graph_id: str | None = None
    top_k: int | None = None
    configurable: tuple[str, ...] | None = None  # text/x-hlo uploads
    target: str | None = None
    adapt: bool | None = None  # also for JSON bodies: adapt=false in the query wins
    portfolio: bool | None = None
    compiler: str | None = None


def split_names(values: list[str] | None) -> tuple[str, ...] | None:
    """``configurable=a,b&configurable=c`` -> ``("a", "b", "c")``."""
    if values is None:
        return None
    return tuple(n.strip() for v in values for n in v.split(",") if n.strip())


def prefers_npz(accept: str | None) -> bool:
    """Whether ``Accept`` names npz with a q at least JSON's (JSON is the default).

    Media ranges are case-insensitive; JSON takes the q of the most specific range
    that matches it, npz only that of its own name (``*/*`` is no request for npz),
    and q=0 means "not this one".
    """
    ranges: dict[str, float] = {}
    for part in (accept or "").lower().split(","):
        name, *params = (p.strip() for p in part.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if name:
            ranges[name] = max(q, ranges.get(name, 0.0))

    def quality(offered: str) -> float:
        for candidate in (offered, offered.split("/")[0] + "/*", "*/*"):
            if candidate in ranges:
                return ranges[candidate]
        return 0.0

    npz = ranges.get(NPZ_MEDIA_TYPE, 0.0)
    return npz > 0 and npz >= quality(JSON_MEDIA_TYPE)


def decode_upload(
    body: bytes, content_type: str | None, params: Params, max_decoded: int
) -> UploadRequest:
    decoder = GRAPH_DECODERS.get(media_type(content_type))
    if decoder is None:
        raise UnsupportedMediaType(
            _unsupported(content_type, GRAPH_DECODERS), "content-type"
        )
    if params.model is None:
        raise InvalidRequest("query parameter 'model' is required", "model")
    graph = decoder(body, max_decoded)
    if params.configurable is not None:
        if not isinstance(graph, HloText):
            raise InvalidRequest(
                f"configurable is for {HLO_MEDIA_TYPE} bodies", "configurable"
            )
        graph = HloText(graph.text, params.configurable, graph.field)
    return UploadRequest(
        model=params.model, model_version=params.model_version, graph=graph
    )


def decode_rank(
    body: bytes,
    content_type: str | None,
    params: Params,
    max_decoded: int,
    client: str = "",
) -> RankRequest:
    """The rank request of a body and its query; ``client``: whose budget remembers
    the batch (``core/clients.py``)."""
    decoder = RANK_DECODERS.get(media_type(content_type))
    if decoder is None:
        raise UnsupportedMediaType(
            _unsupported(content_type, RANK_DECODERS), "content-type"
        )
    return decoder(body, params, max_decoded, client)


def _unsupported(content_type: str | None, table: Mapping[str, Any]) -> str:
    return f"content type {content_type or '(none)'!r} is not one of {', '.join(table)}"


def _hlo_graph(body: bytes, max_decoded: int) -> HloText:
    # The size bound (COSTMODEL_MAX_HLO_BYTES) is core.graphs', on the loop, before
    # the text is parsed: body and JSON "hlo" alike.
    # XLA text is ASCII outside strings; a stray byte in metadata is replaced rather
    # than failing the module (as ``costmodel featurize`` does).
    return HloText(body.decode("utf-8", errors="replace"))


def _json_rank(
    body: bytes, params: Params, max_decoded: int, client: str
) -> RankRequest:
    """A JSON body carries every parameter but ``adapt=false``, which the query may
    add (it wins)."""
    for name, value in vars(params).items():
        if value is not None and name != "adapt":
            raise InvalidRequest(
                "query parameters are for application/x-npz bodies; put it in the JSON",
                name,
            )
    return json_rank(body, client=client, adapt=params.adapt is not False)


def load_npz(
    body: bytes, max_decoded: int, allowed: frozenset[str] | None = None
) -> dict[str, np.ndarray[Any, Any]]:
    """The ``allowed`` arrays of an npz body (None: all): no pickles, a bound on the
    decompressed size, and every key checked before any member is decoded (an
    unexpected one is 422; a TpuGraphs key the service does not need is skipped,
    never decoded)."""

    def keep(key: str) -> bool:
        if allowed is None:
            return True
        if key in allowed:
            return True
        if key in IGNORED_KEYS:
            return False
        raise InvalidRequest(f"unexpected array {key!r}", key)

    try:
        return read_npz(body, max_decoded, keep)
    except NpzTooLarge as exc:
        raise PayloadTooLarge(str(exc), "body") from None
    except NpzError as exc:
        raise MalformedBody(f"not a readable npz archive: {exc}") from None


NPZ_KEYS = frozenset(SENT_GRAPH_KEYS) | set(CONFIG_KEYS)


def _npz_graph(body: bytes, max_decoded: int) -> RawGraph:
    return _npz_raw_graph(load_npz(body, max_decoded, NPZ_KEYS))


def _npz_rank(
    body: bytes, params: Params, max_decoded: int, client: str
) -> RankRequest:
    if params.model is None:
        raise InvalidRequest(
            "query parameter 'model' is required for npz bodies", "model"
        )
    arrays = load_npz(body, max_decoded, NPZ_KEYS)
    present = [k for k in CONFIG_KEYS if k in arrays]
    if len(present) != 1:
        raise InvalidRequest(
            f"give exactly one of {' or '.join(CONFIG_KEYS)}", CONFIG_KEYS[0]
        )
    raw = _npz_raw_graph(arrays)
    graph = raw if raw.arrays else None
    one_graph(params.graph_id, graph)
    options = RankOptions(
        model_version=params.model_version,
        top_k=params.top_k,
        target=params.target,
        adapt=params.adapt is not False,
        portfolio=params.portfolio is True,
        compiler=params.compiler,
    )
    return RankRequest(
        model=params.model,
        graph_id=params.graph_id,
        graph=graph,
        configs=arrays[present[0]],
        configs_field=present[0],
        client=client,
        options=options,
    )


def _npz_raw_graph(arrays: Mapping[str, Any]) -> RawGraph:
    """The graph arrays, sized by what they decoded to: the compressed body's size
    says nothing of the work of validating and hashing them."""
    graph = {k: v for k, v in arrays.items() if k in SENT_GRAPH_KEYS}
    nbytes = sum(int(v.nbytes) for v in graph.values())
    return RawGraph(graph, "", nbytes)


GraphDecoder = Callable[[bytes, int], RawGraph | HloText]
RankDecoder = Callable[[bytes, Params, int, str], RankRequest]

GRAPH_DECODERS: dict[str, GraphDecoder] = {
    JSON_MEDIA_TYPE: json_graph,
    NPZ_MEDIA_TYPE: _npz_graph,
    HLO_MEDIA_TYPE: _hlo_graph,
}
RANK_DECODERS: dict[str, RankDecoder] = {
    JSON_MEDIA_TYPE: _json_rank,
    NPZ_MEDIA_TYPE: _npz_rank,
}


def encode_rank_npz(
    ranking: np.ndarray[Any, Any],
    scores: np.ndarray[Any, Any],
    top_k: np.ndarray[Any, Any],
    portfolio: np.ndarray[Any, Any] | None = None,
) -> bytes:
    """A rank answer as npz (for ``Accept: application/x-npz``); ``portfolio`` when
    the request asked for it."""
    buf = io.BytesIO()
    extra = {} if portfolio is None else {"portfolio": np.asarray(portfolio, np.int64)}
    np.savez(  # asarray: the ranker's arrays already have these dtypes, no copies
        buf,
        ranking=np.asarray(ranking, np.int64),
        scores=np.asarray(scores, np.float32),
        top_k=np.asarray(top_k, np.int64),
        **extra,  # type: ignore[arg-type]  # numpy's stub: **kwds as allow_pickle
    )
    return buf.getvalue()
