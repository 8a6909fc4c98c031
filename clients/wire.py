"""The HTTP contract, without I/O: one ``Call`` per request, typed results per answer.

Every parser checks the answer against the contract and raises ``ProtocolError``
on anything else, so a result object is always complete and typed. The rank answer,
the largest, has its own module (``clients.rank_answer``), re-exported here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from xla_costmodel.clients.errors import ProtocolError, json_object
from xla_costmodel.clients.payloads import NPZ
from xla_costmodel.clients.rank_answer import RankResult, fallback_result, parse_rank

JSON = "application/json"


@dataclass(frozen=True)
class Call:
    """One HTTP request. ``idempotent``: repeating it cannot change the outcome."""

    method: str
    path: str
    params: Mapping[str, str] = field(default_factory=dict)
    content: bytes | None = None
    content_type: str | None = None
    idempotent: bool = True
    accept: str | None = None  # None: the client's default, JSON
    idempotency_key: str | None = None  # the same on every resend of this call

    @property
    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": self.content_type} if self.content_type else {}
        if self.accept:
            headers["Accept"] = self.accept
        if self.idempotency_key:
            headers["Idempotency-Key"] = self.idempotency_key
        return headers


def query(**values: str | int | None) -> dict[str, str]:
    return {k: str(v) for k, v in values.items() if v is not None}


def json_body(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@dataclass(frozen=True)
class GraphInfo:
    graph_id: str
    nodes: int
    edges: int
    configurable_nodes: int
    cached: bool


@dataclass(frozen=True)
class FeedbackResult:
    stored: int
    details: Mapping[str, Any] = field(default_factory=dict)


Pairs = tuple[tuple[int, int], ...]  # (default_ns, config_ns), timed together


@dataclass(frozen=True, kw_only=True)
class Refuted:
    """The fleet's answer a writer compiled and found wrong: ``"slower"`` than the
    default in ``paired_runtimes_ns``, or ``"outputs"`` different from the default's
    (no pairs). The service counts it against that exact row (docs/reuse.md)."""

    config: tuple[float, ...]
    reason: Literal["slower", "outputs"]
    paired_runtimes_ns: Pairs = ()

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "config": [float(v) for v in self.config],
            "reason": self.reason,
        }
        if self.paired_runtimes_ns:
            body["paired_runtimes_ns"] = [list(p) for p in self.paired_runtimes_ns]
        return body


@dataclass(frozen=True, kw_only=True)
class Decision:
    """A tuning run's final choice for one program on one target, as a tuner sends
    it to ``POST /v1/decisions`` (``CostModelClient.record_decision``).

    ``config`` is the kept row (the default's when nothing won: a result too); the
    service derives its compiler options from the row and computes the speedup, its
    interval and p-value from ``paired_runtimes_ns`` (each pair the default and the
    config timed together; none for a kept default): a client sends measurements,
    never claims. ``hlo_fingerprint`` (``clients.xla.reuse.fingerprint``) lets
    ``jit`` find the decision without featurizing the program.
    """

    graph_id: str
    config: tuple[float, ...]
    paired_runtimes_ns: Pairs
    budget: int
    strategy: str
    kept_default: bool
    target: str | None = None
    compiler: str | None = None
    hlo_fingerprint: str | None = None
    refuted: Refuted | None = None

    def to_json(self, model: str, model_version: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "graph_id": self.graph_id,
            "config": [float(v) for v in self.config],
            "budget": self.budget,
            "strategy": self.strategy,
            "kept_default": self.kept_default,
        }
        if self.paired_runtimes_ns:
            body["paired_runtimes_ns"] = [list(p) for p in self.paired_runtimes_ns]
        optional = {
            "model_version": model_version,
            "target": self.target,
            "compiler": self.compiler,
            "hlo_fingerprint": self.hlo_fingerprint,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        if self.refuted is not None:
            body["refuted"] = self.refuted.to_json()
        return body


@dataclass(frozen=True)
class BestKnown:
    """``GET /v1/best``: the best decided config of a program on a target.

    ``stale``: decided under another ``compiler`` than the one asked about (apply it
    only after verifying it); ``writers``: how many distinct writers decided it.
    """

    graph_id: str
    target: str
    config: tuple[float, ...]
    compiler_options: Mapping[str, Any]
    speedup: float
    speedup_low: float
    p_value: float | None
    writers: int
    decided_at: str
    compiler: str | None
    stale: bool
    kept_default: bool = False

    @property
    def is_default(self) -> bool:
        """The program's tuning kept XLA's default. Clients never compile
        ``compiler_options`` as sent: they derive options from ``config``
        (``clients.xla.reuse.options_of``)."""
        return self.kept_default


@dataclass(frozen=True)
class DecisionResult:
    stored: bool  # False: a resend, answered with the first answer
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelInfo:
    name: str
    collection: str
    version: str
    inputs: Any = None


def parse_graph_info(response: httpx.Response) -> GraphInfo:
    body = json_object(response)
    try:
        return GraphInfo(
            graph_id=str(body["graph_id"]),
            nodes=int(body["nodes"]),
            edges=int(body["edges"]),
            configurable_nodes=int(body.get("configurable_nodes") or 0),
            cached=bool(body.get("cached", False)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(
            f"graph upload answer: bad or missing field {exc}"
        ) from None


def parse_feedback(response: httpx.Response) -> FeedbackResult:
    body = json_object(response)
    stored = body.get("stored")
    if not isinstance(stored, int):
        raise ProtocolError("feedback answer: 'stored' must be an integer")
    return FeedbackResult(stored, {k: v for k, v in body.items() if k != "stored"})


def parse_best(response: httpx.Response) -> BestKnown:
    body = json_object(response)
    try:
        options = body["compiler_options"]
        if not isinstance(options, dict):
            raise TypeError("compiler_options")
        p_value = body.get("p_value")
        compiler = body.get("compiler")
        return BestKnown(
            graph_id=str(body["graph_id"]),
            target=str(body["target"]),
            config=tuple(float(v) for v in body["config"]),
            compiler_options=options,
            speedup=float(body["speedup"]),
            speedup_low=float(body["speedup_low"]),
            p_value=None if p_value is None else float(p_value),
            writers=int(body["writers"]),
            decided_at=str(body["decided_at"]),
            compiler=None if compiler is None else str(compiler),
            stale=bool(body["stale"]),
            kept_default=bool(body.get("kept_default", False)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"best answer: bad or missing field {exc}") from None


def parse_decision(response: httpx.Response) -> DecisionResult:
    body = json_object(response)
    stored = body.get("stored")
    if not isinstance(stored, bool):
        raise ProtocolError("decision answer: 'stored' must be a boolean")
    return DecisionResult(stored, {k: v for k, v in body.items() if k != "stored"})


def parse_models(response: httpx.Response) -> list[ModelInfo]:
    try:
        body: Any = response.json()
    except ValueError:
        raise ProtocolError("models answer is not JSON") from None
    items = body.get("models") if isinstance(body, dict) else body
    if not isinstance(items, list):
        raise ProtocolError("models answer: expected a list of models")
    try:
        return [
            ModelInfo(
                str(m["name"]), str(m["collection"]), str(m["version"]), m.get("inputs")
            )
            for m in items
        ]
    except (KeyError, TypeError) as exc:
        raise ProtocolError(f"models answer: bad or missing field {exc}") from None


__all__ = [
    "JSON",
    "NPZ",
    "BestKnown",
    "Call",
    "Decision",
    "DecisionResult",
    "FeedbackResult",
    "GraphInfo",
    "ModelInfo",
    "Pairs",
    "RankResult",
    "Refuted",
    "fallback_result",
    "parse_rank",
]
