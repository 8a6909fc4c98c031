"""Schemathesis against the live OpenAPI of a real uvicorn process (with redis-server).

Every operation in ``/openapi.json`` gets generated requests, valid and invalid, and
each answer must be no 5xx, accepted when the request conforms to the schema, and a
documented status, media type and body. A tiny tile graph is uploaded first, and the
hooks below put its id, a served model and a matching config width into some of the
generated bodies: random ids are 404s, so without them rank and feedback would never
reach their logic. Feedback needs a writer token (``COSTMODEL_FEEDBACK_AUTH=token``,
a writer created with ``costmodel tokens create``), the reload route the admin token.
"""

from __future__ import annotations

import io
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)
from servicekit import ADMIN, SERVE
from typer.testing import CliRunner

from xla_costmodel.cli import build_app
from xla_costmodel.harness import ServiceServer
from xla_costmodel.tpugraphs import xla_cpu2

CHECKS = [
    not_a_server_error,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
    content_type_conformance,
]
# Per operation and generation mode; bounded so the run stays well under a minute on
# one core (each rank or upload request runs the model).
MAX_EXAMPLES = 20
TILE_WIDTH = 24
XLA_CPU_ROW = xla_cpu2.sample(2, seed=1)[1].tolist()  # a row other than the default
PAIRS = [[1200 + i, 1000] for i in range(8)]  # (default, row) runtimes: faster
JSON, NPZ, HLO = "application/json", "application/x-npz", "text/x-hlo"
# Two nodes, node 0 consuming node 1: the smallest graph the tile model takes.
TINY_GRAPH: dict[str, Any] = {
    "node_feat": [[0.0] * 140, [1.0] * 140],
    "node_opcode": [63, 2],
    "edge_index": [[1, 0]],
}


def _tiny_npz(graph: bool = True, configs: int = 0) -> bytes:
    arrays: dict[str, Any] = {}
    if graph:
        arrays["node_feat"] = np.asarray(TINY_GRAPH["node_feat"], np.float32)
        arrays["node_opcode"] = np.asarray(TINY_GRAPH["node_opcode"], np.int64)
        arrays["edge_index"] = np.asarray(TINY_GRAPH["edge_index"], np.int64)
    if configs:
        arrays["config_feat"] = np.ones((configs, TILE_WIDTH), np.float32)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


@pytest.fixture
def service_process(
    tmp_path: Any, model_dir: Any, redis_url: str
) -> Iterator[ServiceServer]:
    """The service with writer tokens required, and one writer (``.token``)."""
    database = f"sqlite:///{tmp_path / 'costmodel.db'}"
    argv = ["tokens", "create", "schemathesis", "--database-url", database]
    created = CliRunner().invoke(build_app(), argv)
    assert created.exit_code == 0, created.output
    env = {
        "COSTMODEL_MODEL_DIR": str(model_dir),
        "COSTMODEL_DATABASE_URL": database,
        "COSTMODEL_REDIS_URL": redis_url,
        "COSTMODEL_ADMIN_TOKEN": ADMIN,
        "COSTMODEL_FEEDBACK_AUTH": "token",
        "COSTMODEL_REDIS_HMAC_KEY": "schemathesis-seal",  # required with token auth
    }
    server = ServiceServer(tmp_path, env, argv=SERVE)
    server.token = created.stdout.splitlines()[-1]  # type: ignore[attr-defined]
    server.start()
    yield server
    server.stop()


@pytest.fixture
def live_schema(service_process: ServiceServer) -> tuple[Any, Repair]:
    """The live schema, with a hook that aims part of the traffic at a known graph
    (returned too: the schema's own examples are generated without hooks)."""
    up = httpx.put(
        f"{service_process.url}/v1/graphs",
        params={"model": "tile"},
        json=TINY_GRAPH,
        timeout=30,
    )
    assert up.status_code == 200, up.text
    graph_id = up.json()["graph_id"]
    writer = {"Authorization": f"Bearer {service_process.token}"}  # type: ignore[attr-defined]
    # Feedback stores the graph (a decision's pairs are measurements of a stored
    # graph), then a decision for it, so that lookups aimed at it find one.
    measured = httpx.post(
        f"{service_process.url}/v1/feedback",
        json={
            "model": "tile",
            "graph_id": graph_id,
            "configs": [[1.0] * TILE_WIDTH],
            "runtimes_ns": [1000],
        },
        headers=writer,
        timeout=30,
    )
    assert measured.status_code == 200, measured.text
    decided = httpx.post(
        f"{service_process.url}/v1/decisions",
        json={
            "model": "xla_cpu",
            "graph_id": graph_id,
            "config": XLA_CPU_ROW,
            "paired_runtimes_ns": PAIRS,
            "budget": 16,
            "strategy": "model",
            "kept_default": False,
        },
        headers=writer,
        timeout=30,
    )
    assert decided.status_code == 200, decided.text
    models = httpx.get(f"{service_process.url}/v1/models", timeout=30).json()
    served = {m["name"] for m in models["models"]}

    url = f"{service_process.url}/openapi.json"
    upload = httpx.get(url, timeout=30).json()["paths"]["/v1/graphs"]["put"]
    hlo = upload["requestBody"]["content"][HLO]["example"]
    schema = schemathesis.openapi.from_url(url)
    schema.config.update(base_url=service_process.url)
    schema.config.generation.update(max_examples=MAX_EXAMPLES)
    repair = Repair(graph_id, served, hlo, service_process.token)  # type: ignore[attr-defined]

    @schema.hook
    def flatmap_case(ctx: Any, case: Any) -> Any:
        return repair.strategy(case)

    return schema, repair


class Repair:
    """Makes schema-valid cases obey the rules a JSON Schema cannot state.

    Every rule here is in the OpenAPI descriptions; the server answers 422/400 to a
    request that breaks one, which is right, so positive cases are made to keep
    them. Schemathesis re-validates a case after a hook changes it, so a repaired
    case still counts as positive only if the schema accepts it.

    - per-node (layout) configs are rectangular: one node count per batch;
    - an npz body is an npz archive; HLO text parses (here: the schema's example);
    - ``configurable`` (upload query) goes with ``text/x-hlo`` bodies only;
    - rank: query parameters other than ``adapt`` are for npz bodies, which need
      ``model`` in the query;
    - feedback, decisions: an ``Idempotency-Key`` names one request (another body:
      422);
    - decisions: a row of the model's spec other than the default, paired runtimes
      of a stored graph (the uploaded one, measured first), no compiler options
      but the row's (none sent), no refutation (one must name another valid row
      and pairs that show it slower);
    - best: exactly one of ``graph_id`` and ``hlo_fingerprint``; half the lookups
      ask for the uploaded graph, which has a decision;
    - for a served model, the graph's arrays agree with each other, configs are as
      wide as the model's, and feedback has one runtime per config. Half the cases
      (all that name a served model) get the served tile model, the uploaded graph
      and such configs; the others keep a generated model name: 404.
    """

    def __init__(
        self, graph_id: str, served: set[str], hlo: str, token: str = ""
    ) -> None:
        self.graph_id = graph_id
        self.served = served
        self.hlo = hlo
        self.token = token  # the writer's, for feedback

    def strategy(self, case: Any) -> Any:
        meta = case.meta
        if meta is None or not meta.generation.mode.is_positive:
            return st.just(case)
        fix = {
            "/v1/graphs": self._graph,
            "/v1/rank": self._rank,
            "/v1/feedback": self._feedback,
            "/v1/decisions": self._decision,
            "/v1/best": self._best,
        }.get(case.operation.path)
        if fix is None:
            return st.just(case)
        return st.booleans().map(lambda aim: fix(case, aim))

    def _model(self, case: Any) -> Any:
        if isinstance(case.body, dict) and "model" in case.body:
            return case.body["model"]
        return case.query.get("model")

    def _graph(self, case: Any, aim: bool) -> Any:
        query = dict(case.query)
        if case.media_type != HLO:
            query.pop("configurable", None)
        if aim or query.get("model") in self.served:
            query["model"] = "tile"
            query.pop("configurable", None)  # the tile model configures no nodes
            case.body = {JSON: dict(TINY_GRAPH), HLO: self.hlo}.get(
                case.media_type, case.body
            )
        if case.media_type == NPZ:
            case.body = _tiny_npz()
        case.query = query
        return case

    def _rank(self, case: Any, aim: bool) -> Any:
        aim = aim or self._model(case) in self.served
        if case.media_type == NPZ:
            query = dict(case.query)
            query.setdefault("model", "unknown-model")
            if aim:
                query.update(model="tile", graph_id=self.graph_id)
            has_graph = "graph_id" not in query
            case.query = query
            case.body = _tiny_npz(graph=has_graph, configs=3)
            return case
        case.query = {k: v for k, v in case.query.items() if k == "adapt"}
        if isinstance(case.body, dict):
            case.body = _rectangular(case.body)
        if aim and isinstance(case.body, dict):
            body = self._known_graph(case.body)
            body.pop("raw_configs", None)
            body["configs"] = _rows(body.get("configs"), None)
            case.body = body
        return case

    def _feedback(self, case: Any, aim: bool) -> Any:
        _unique_key(case)
        if isinstance(case.body, dict):
            case.body = _rectangular(case.body)
        if (aim or self._model(case) in self.served) and isinstance(case.body, dict):
            body = self._known_graph(case.body)
            body.pop("config_indices", None)
            body.pop("ranking_id", None)
            body["configs"] = _rows(body.get("configs"), len(body["runtimes_ns"]))
            case.body = body
        return case

    def _decision(self, case: Any, aim: bool) -> Any:
        _unique_key(case)
        if not isinstance(case.body, dict):
            return case
        body = dict(case.body)
        if aim or self._model(case) in self.served:
            body.pop("model_version", None)  # a version that is not loaded: 409
            for key in ("compiler_options", "refuted"):
                body.pop(key, None)
            body.update(model="xla_cpu", kept_default=False, graph_id=self.graph_id)
            body["config"] = XLA_CPU_ROW
            body["paired_runtimes_ns"] = body.get("paired_runtimes_ns") or PAIRS
        case.body = body
        return case

    def _best(self, case: Any, aim: bool) -> Any:
        if aim:
            case.query = {
                **{k: v for k, v in case.query.items() if k == "compiler"},
                "model": "xla_cpu",
                "graph_id": self.graph_id,
            }
        elif ("graph_id" in case.query) == ("hlo_fingerprint" in case.query):
            # Exactly one names the program (both or neither: 422).
            query = {k: v for k, v in case.query.items() if k != "hlo_fingerprint"}
            case.query = {"graph_id": self.graph_id, **query}
        return case

    def _known_graph(self, body: dict[str, Any]) -> dict[str, Any]:
        body = {k: v for k, v in body.items() if k not in ("graph", "hlo")}
        body.pop("configurable", None)
        return {**body, "model": "tile", "graph_id": self.graph_id}


def _unique_key(case: Any) -> None:
    key = case.headers.get("Idempotency-Key")
    if key is not None:  # a key names one request: a reuse with another is 422
        case.headers["Idempotency-Key"] = f"{key[:160]}-{uuid.uuid4().hex}"


def _rectangular(body: dict[str, Any]) -> dict[str, Any]:
    """Per-node configs cut to one node count, so the batch is one array."""
    configs = body.get("configs")
    if not (isinstance(configs, list) and configs):
        return body
    if not all(
        isinstance(c, list) and (not c or isinstance(c[0], list)) for c in configs
    ):
        return body
    nodes = min(len(c) for c in configs)
    return {**body, "configs": [c[:nodes] for c in configs]}


def _rows(configs: Any, count: int | None) -> list[list[float]]:
    """Generated tile config rows if they are that, else ones; ``count`` of them."""
    rows = configs if isinstance(configs, list) else []
    if not all(isinstance(r, list) and len(r) == TILE_WIDTH for r in rows):
        rows = []
    rows = [r for r in rows if all(isinstance(x, (int, float)) for x in r)]
    if count is None:
        return rows or [[1.0] * TILE_WIDTH]
    rows = (rows or [[1.0] * TILE_WIDTH]) * count
    return rows[:count]


def _run(
    strategy: Any, answers: Counter[tuple[str, int]], examples: int, token: str
) -> None:
    admin = {"Authorization": f"Bearer {ADMIN}"}
    writer = {"Authorization": f"Bearer {token}"}

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink],
    )
    @given(case=strategy)
    def run(case: Any) -> None:
        writes = case.operation.path in ("/v1/feedback", "/v1/decisions")
        headers = writer if writes else admin
        response = case.call_and_validate(headers=headers, checks=CHECKS, timeout=30)
        answers[case.operation.label, response.status_code] += 1

    run()


def _strategies(operation: Any, repair: Repair) -> Iterator[tuple[str, Any, int]]:
    """The schema's own examples, then generated valid and invalid requests."""
    examples = operation.get_strategies_from_examples()
    if examples:
        repaired = st.one_of(examples).flatmap(repair.strategy)
        yield "examples", repaired, 2 * len(examples)
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        yield mode.value, operation.as_strategy(generation_mode=mode), MAX_EXAMPLES


def _brief(exc: BaseException) -> str:
    """The failure without its curl line, whose body can be a 140-float matrix."""
    lines = [line for line in str(exc).splitlines() if "curl " not in line]
    return "\n".join(lines)[:2000]


def test_live_openapi_conformance(live_schema: tuple[Any, Repair]) -> None:
    schema, repair = live_schema
    failures = []
    answers: Counter[tuple[str, int]] = Counter()
    for result in schema.get_all_operations():
        operation = result.ok()
        for kind, strategy, examples in _strategies(operation, repair):
            try:
                _run(strategy, answers, examples, repair.token)
            except Unsatisfiable:
                # No parameters and no body: there is nothing to make invalid.
                if kind != GenerationMode.NEGATIVE.value:
                    raise
            except (AssertionError, BaseExceptionGroup) as exc:
                # Schemathesis raises a FailureGroup (a BaseExceptionGroup); keep
                # going so one run reports every operation's findings.
                failures.append(f"{operation.label} [{kind}]: {_brief(exc)}")
    assert not failures, "\n\n".join(failures)
    # The hooks did their job: generated requests reached the routes' logic.
    for label in (
        "PUT /v1/graphs",
        "POST /v1/rank",
        "POST /v1/feedback",
        "POST /v1/decisions",
        "GET /v1/best",
    ):
        assert answers[label, 200] > 0, (label, sorted(answers.items()))
