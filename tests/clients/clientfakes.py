"""Fakes for the client tests: an in-memory service that speaks the documented
contract, transports that are slow on purpose, and a TCP server that never answers.

The fake keeps state (graphs per model, loaded versions, feedback rows) and answers
as the contract says, so tests assert on behaviour, not on call sequences.
``script`` queues outcomes (responses or exceptions) served before the real ones to
every request but ``GET /v1/models``, which a client sends once per model to learn
its collection; ``models_script`` queues those.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx
import numpy as np

from xla_costmodel.tpugraphs.arrays import Graph, make_configs, make_graph
from xla_costmodel.tpugraphs.collections import get
from xla_costmodel.tpugraphs.graph_id import graph_id

Outcome = httpx.Response | Exception
MODELS = ("GET", "/v1/models")


def error(
    status: int, code: str, message: str = "", retry_after: str | None = None
) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    body = {"error": {"code": code, "message": message or code, "field": None}}
    return httpx.Response(status, json=body, headers=headers)


class FakeService:
    def __init__(
        self, collections: dict[str, str] | None = None, feedback_route: bool = True
    ) -> None:
        self.collections = collections or {"tile": "tile", "layout": "layout"}
        self.versions: dict[str, list[str]] = {m: ["1"] for m in self.collections}
        self.graphs: dict[tuple[str, str], Graph] = {}
        self.feedback_rows: list[dict[str, Any]] = []
        self.feedback_keys: dict[str, dict[str, Any]] = {}
        self.feedback_route = feedback_route
        self.requests: list[httpx.Request] = []
        self.script: list[Outcome] = []
        self.models_script: list[Outcome] = []

    def paths(self) -> list[str]:
        return [f"{r.method} {r.url.path}" for r in self.requests]

    @property
    def ops(self) -> list[httpx.Request]:
        """The requests but ``GET /v1/models`` (the clients' collection look-ups)."""
        return [r for r in self.requests if (r.method, r.url.path) != MODELS]

    def op_paths(self) -> list[str]:
        return [f"{r.method} {r.url.path}" for r in self.ops]

    def __call__(self, request: httpx.Request) -> httpx.Response:  # noqa: PLR0911 -- a fake server's routing: one return per route
        self.requests.append(request)
        route = (request.method, request.url.path)
        script = self.models_script if route == MODELS else self.script
        if script:
            outcome = script.pop(0)
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        if route == ("PUT", "/v1/graphs"):
            return self._upload(request)
        if route == ("POST", "/v1/rank"):
            return self._rank(request)
        if route == ("POST", "/v1/feedback") and self.feedback_route:
            return self._feedback(request)
        if route == MODELS:
            models = [
                {
                    "name": m,
                    "collection": c,
                    "version": self.versions[m][-1],
                    "inputs": [],
                }
                for m, c in self.collections.items()
            ]
            return httpx.Response(200, json=models)
        if route == ("GET", "/readyz"):
            return httpx.Response(200, json={"ready": True})
        return httpx.Response(404, json={"detail": "Not Found"})

    def _version(self, model: str, asked: str | None) -> str | httpx.Response:
        if model not in self.collections:
            return error(404, "model_not_found")
        if asked is not None and asked not in self.versions[model]:
            return error(409, "model_version_not_loaded")
        return asked or self.versions[model][-1]

    def _upload(self, request: httpx.Request) -> httpx.Response:
        model = request.url.params["model"]
        version = self._version(model, request.url.params.get("model_version"))
        if isinstance(version, httpx.Response):
            return version
        assert request.headers["content-type"] == "application/x-npz"
        with np.load(io.BytesIO(request.content)) as data:
            g = make_graph(**{k: data[k] for k in data.files})
        gid = graph_id(g.node_feat, g.node_opcode, g.edge_index, g.node_config_ids)
        cached = (model, gid) in self.graphs
        self.graphs[(model, gid)] = g
        return httpx.Response(
            200,
            json={
                "graph_id": gid,
                "nodes": g.num_nodes,
                "edges": g.num_edges,
                "configurable_nodes": g.num_configurable,
                "cached": cached,
            },
        )

    def _rank(self, request: httpx.Request) -> httpx.Response:
        params: Mapping[str, str] = request.url.params
        json_body = request.headers.get("content-type", "").startswith(
            "application/json"
        )
        if json_body:  # what JSON puts in the body, npz bodies put in the query
            body = json.loads(request.content)
            params = {k: str(v) for k, v in body.items() if k != "configs"}
        model = params["model"]
        version = self._version(model, params.get("model_version"))
        if isinstance(version, httpx.Response):
            return version
        if json_body:
            key = get(self.collections[model]).config_key
            arrays = {key: np.asarray(body["configs"], np.float32)}
        else:
            with np.load(io.BytesIO(request.content)) as data:
                arrays = {k: data[k] for k in data.files}
        (key,) = [k for k in ("config_feat", "node_config_feat") if k in arrays]
        inline = {k: v for k, v in arrays.items() if k != key}
        if bool(inline) == ("graph_id" in params):
            return error(
                422, "invalid_request", "give exactly one of graph_id or graph"
            )
        if inline:  # the graph travels with the request: validated, hashed, kept
            graph = make_graph(**inline)
            gid = graph_id(
                graph.node_feat,
                graph.node_opcode,
                graph.edge_index,
                graph.node_config_ids,
            )
            cache = "memory" if (model, gid) in self.graphs else "miss"
            self.graphs[(model, gid)] = graph
        else:
            gid, cache = params["graph_id"], "memory"
            found = self.graphs.get((model, gid))
            if found is None:
                return error(404, "graph_not_found")
            graph = found
        configs = make_configs(arrays[key], graph, key)
        # A deterministic stand-in model: lower feature sum = faster.
        scores = configs.reshape(configs.shape[0], -1).sum(axis=1).astype(np.float64)
        order = np.argsort(scores, kind="stable")
        k = int(params.get("top_k", len(order)))
        if "application/x-npz" in request.headers.get("accept", ""):
            buf = io.BytesIO()
            np.savez(
                buf, ranking=order, scores=scores.astype(np.float32), top_k=order[:k]
            )
            headers = {
                "X-Model": model,
                "X-Model-Version": version,
                "X-Cache": cache,
                "X-Graph-ID": gid,
                "Content-Type": "application/x-npz",
            }
            return httpx.Response(200, content=buf.getvalue(), headers=headers)
        ranking = order.tolist()
        body = {
            "model": model,
            "model_version": version,
            "graph_id": gid,
            "cache": cache,
            "ranking": ranking,
            "scores": scores.tolist(),
            "top_k": ranking[:k],
        }
        return httpx.Response(200, json=body)

    def _feedback(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if (body["model"], body["graph_id"]) not in self.graphs:
            return error(404, "graph_not_found")
        key = request.headers.get("idempotency-key")
        if key is not None and key in self.feedback_keys:  # the contract: stored once
            return httpx.Response(
                200,
                json=self.feedback_keys[key],
                headers={"Idempotent-Replayed": "true"},
            )
        self.feedback_rows.append(body)
        answer = {"stored": len(body["runtimes_ns"])}
        if key is not None:
            self.feedback_keys[key] = answer
        return httpx.Response(200, json=answer)


class Sleeps(list[float]):
    """A ``sleep`` that records instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.append(seconds)


def _read_timeout(request: httpx.Request) -> float:
    timeout: dict[str, float | None] = request.extensions.get("timeout", {})
    return timeout.get("read") or float("inf")


class SlowTransport(httpx.BaseTransport):
    """Answers after ``delay`` seconds, unless the request's read timeout fires first
    (as a real socket would), so it shows which timeout reached the transport."""

    def __init__(self, delay: float, inner: httpx.BaseTransport | None = None) -> None:
        self.delay = delay
        self.inner = inner or httpx.MockTransport(
            lambda r: httpx.Response(200, json={})
        )
        self.timeouts: list[float] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        read = _read_timeout(request)
        self.timeouts.append(read)
        time.sleep(min(self.delay, read))
        if self.delay > read:
            raise httpx.ReadTimeout("read timed out", request=request)
        return self.inner.handle_request(request)


class AsyncSlowTransport(httpx.AsyncBaseTransport):
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.timeouts: list[float] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        read = _read_timeout(request)
        self.timeouts.append(read)
        await asyncio.sleep(min(self.delay, read))
        if self.delay > read:
            raise httpx.ReadTimeout("read timed out", request=request)
        return httpx.Response(200, json={})


def unused_url() -> str:
    """A URL on which nothing listens: connecting is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@contextmanager
def silent_server() -> Iterator[str]:
    """A real TCP server that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()
