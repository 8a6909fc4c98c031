"""The app factory and its lifespan, which owns every resource on ``app.state``.

create_app(settings) -> FastAPI      nothing is opened until the lifespan starts
app_from_env() -> FastAPI            for ``uvicorn xla_costmodel.service.app:app_from_env --factory``
"""

from __future__ import annotations

import copy
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from xla_costmodel.runner import SessionOptions
from xla_costmodel.service.core.adaptation import Adaptation
from xla_costmodel.service.core.auth import FeedbackAuth
from xla_costmodel.service.core.best import BestLookup
from xla_costmodel.service.core.cache import EmbeddingCache, embedding_memory
from xla_costmodel.service.core.clients import ClientIds
from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.decision_cache import DecisionCache
from xla_costmodel.service.core.decisions import DecisionRecorder
from xla_costmodel.service.core.feedback import FeedbackRecorder
from xla_costmodel.service.core.fleet import FleetGain
from xla_costmodel.service.core.generations import Generations, is_alone
from xla_costmodel.service.core.graph_archive import GraphArchive
from xla_costmodel.service.core.graph_meta import GraphMetaStore
from xla_costmodel.service.core.graphs import Graphs
from xla_costmodel.service.core.inputs import Limits
from xla_costmodel.service.core.knowledge import TargetKnowledge
from xla_costmodel.service.core.ranker import Ranker
from xla_costmodel.service.core.recent import RecentRankings
from xla_costmodel.service.core.redis_store import RedisStore, Seal, connect
from xla_costmodel.service.core.registry import ModelRegistry
from xla_costmodel.service.core.retention import Retention
from xla_costmodel.service.core.scoring import Scorer
from xla_costmodel.service.core.shaping import Shaper
from xla_costmodel.service.errors import (
    InvalidRequest,
    ServiceError,
    error_body,
    http_error,
)
from xla_costmodel.service.logs import configure_logging
from xla_costmodel.service.metrics import Metrics
from xla_costmodel.service.middleware import RequestContext
from xla_costmodel.service.routes import ROUTERS
from xla_costmodel.service.schemas import BODY_MODELS
from xla_costmodel.service.settings import Settings
from xla_costmodel.service.store import Quota, StoreUnavailable, default_sqlite_url

log = logging.getLogger(__name__)
API_VERSION = "1"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Open the cache (and Redis), load and warm every model; close all on exit."""
    settings: Settings = app.state.settings
    app.state.metrics = metrics = Metrics()
    redis = None
    seal = Seal(settings.redis_seal_key)  # what the service reads back from Redis
    if settings.redis_url:
        client = connect(
            settings.redis_url.get_secret_value(),
            settings.redis_timeout_s,
            settings.redis_connect_timeout_s,
        )
        redis = RedisStore(
            client, settings.cache_ttl_s, settings.redis_cooldown_s, seal=seal
        )
    memory = embedding_memory(settings.memory_cache_bytes)
    metrics.watch_memory(lambda: memory.used, lambda: len(memory))
    app.state.cache = cache = EmbeddingCache(memory, redis, metrics)
    options = SessionOptions(settings.intra_op_threads, settings.inter_op_threads)
    app.state.registry = registry = ModelRegistry(
        settings.model_dir, settings.models, options, settings.keep_versions, metrics
    )
    limits = Limits(
        settings.max_nodes,
        settings.max_edges,
        settings.max_configs,
        settings.max_hlo_bytes,
        settings.max_hlo_instructions,
        settings.max_scored_bytes,
    )
    url = (
        settings.database_url.get_secret_value()
        if settings.database_url
        else partial(default_sqlite_url, settings.data_dir)
    )
    app.state.database = db = Database(url, on_statement=metrics.db_statement)
    # The default (a callable) is the SQLite file.
    alone = is_alone(
        settings.workers, app.state.replica, None if callable(url) else url
    )
    generations = Generations(
        None if redis is None else redis.client,
        metrics,
        freshness_s=settings.freshness_s,
        alone=alone,
        seal=seal,
    )
    adaptation = Adaptation(
        db,
        generations,
        metrics,
        settings.adapt_min_measurements,
        settings.adapt_max_measurements,
        settings.adapt_cache_entries,
    )
    app.state.knowledge = knowledge = TargetKnowledge(
        db, generations, metrics, settings.knowledge_max_rows
    )
    scorer = Scorer(metrics, settings.inference_workers, settings.score_chunk_rows)
    records = GraphMetaStore(redis, metrics)
    archive = GraphArchive(db, metrics, redis)
    graphs = Graphs(limits, cache, records, archive, knowledge, scorer)
    shared = redis if settings.shared_ranking_bytes else None
    recent = RecentRankings(
        settings.recent_rankings_bytes,
        shared,
        metrics,
        settings.shared_ranking_bytes,
        settings.recent_client_bytes,
    )
    app.state.clients = ClientIds(db)
    shaper = Shaper(adaptation, knowledge, scorer, metrics)
    app.state.ranker = Ranker(registry, graphs, scorer, shaper, recent, limits)
    quota = Quota(
        settings.feedback_quota_rows,
        settings.feedback_quota_window_s,
        settings.feedback_quota_graph_bytes,
    )
    app.state.feedback = FeedbackRecorder(
        registry,
        graphs,
        scorer,
        recent,
        db,
        generations,
        limits,
        metrics,
        quota if quota.rows or quota.graph_bytes else None,
    )
    app.state.decisions = DecisionRecorder(registry, db, generations, limits, metrics)
    app.state.best = BestLookup(registry, db, DecisionCache(generations), metrics)
    app.state.feedback_auth = FeedbackAuth(db, settings.feedback_auth, metrics)
    retention = Retention(
        db, settings.graph_retention_s, settings.idempotency_retention_s, metrics
    )
    app.state.fleet = fleet = FleetGain(db, metrics)
    metrics.watch_fleet(lambda: fleet.snapshot, settings.fleet_max_targets)
    metrics.watch_ready(lambda: registry.ready)
    try:
        await db.run(lambda store: store.ping())  # opens and migrates it now
    except StoreUnavailable as exc:  # ranking goes on; feedback answers 503
        log.warning("database unavailable at start", extra={"error": str(exc)})
    generations.start()  # the subscriber: other processes' writes
    try:
        await registry.load_all()
        # The shipped seeds are fitted before the first request: a tuner's first
        # portfolio needs them. Then refits follow the database, off the request path.
        await knowledge.prepare(registry.loaded())
        knowledge.start(settings.knowledge_refresh_s)
        fleet.start(settings.fleet_refresh_s)  # off the request path, in this loop
        retention.start(settings.retention_sweep_s)
        log.info(
            "serving",
            extra={
                "models": settings.models,
                "ready": registry.ready,
                "redis": bool(redis),
                "database": db.scheme,
                "feedback_auth": settings.feedback_auth,
            },
        )
        yield
    finally:
        await fleet.stop()
        await knowledge.stop()
        await retention.stop()
        await generations.aclose()  # before Redis closes under its subscriber
        await recent.aclose()  # remembered rankings on their way to Redis
        await cache.aclose()
        if redis is not None:
            await redis.aclose()
        await anyio.to_thread.run_sync(db.close)
        metrics.close()


def create_app(settings: Settings, replica: bool = False) -> FastAPI:
    """The ASGI app; resources open when its lifespan starts. ``replica``: one of
    several processes started apart from ``settings.workers`` (Ray Serve), so other
    processes may write the same database."""
    app = FastAPI(
        title="costmodel",
        version=API_VERSION,
        summary="Learned cost model: ranks XLA compilation configs for a graph.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.replica = replica
    app.add_middleware(
        RequestContext,
        max_inflight=settings.max_inflight,
        max_body_bytes=settings.max_body_bytes,
        body_timeout_s=settings.body_timeout_s,
        body_budget_bytes=settings.body_budget_bytes,
        max_json_bytes=settings.max_json_body_bytes,
    )
    for router in ROUTERS:
        app.include_router(router)
    _install_error_handlers(app)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def app_from_env() -> FastAPI:
    """Factory for uvicorn: settings from ``COSTMODEL_*`` variables, JSON logs."""
    settings = Settings()
    configure_logging(settings.log_level)
    return create_app(settings)


def _install_error_handlers(app: FastAPI) -> None:
    async def service_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ServiceError)
        status, body, headers = http_error(exc)
        return JSONResponse(body, status, headers)

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0]
        keys = [str(part) for part in first["loc"][1:] if isinstance(part, str)]
        return await service_error(
            request, InvalidRequest(first["msg"], ".".join(keys) or None)
        )

    async def http_exception(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(
            exc.status_code, "http_error"
        )
        return JSONResponse(
            error_body(code, str(exc.detail)), exc.status_code, exc.headers
        )

    app.add_exception_handler(ServiceError, service_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_exception)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The generated schema plus the JSON body models that routes read by hand."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title, version=app.version, summary=app.summary, routes=app.routes
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in BODY_MODELS:
            body = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(body.pop("$defs", {}))
            components[model.__name__] = body
        _document_limits(schema, app.state.settings)
        app.openapi_schema = schema
    return app.openapi_schema


def _document_limits(schema: dict[str, Any], settings: Settings) -> None:
    """``top_k`` above ``max_configs`` is a 422; the limit is a setting, so the
    schema learns it here rather than from the static models."""
    top_k = schema["components"]["schemas"]["RankIn"]["properties"]["top_k"]
    rank = schema["paths"].get("/v1/rank", {}).get("post", {})
    # The route's parameters are one module-level list (openapi_extra): written to
    # here only as this app's own copy, whatever another app's limit is.
    rank["parameters"] = copy.deepcopy(rank.get("parameters", []))
    params = [p["schema"] for p in rank["parameters"] if p["name"] == "top_k"]
    for declared in (top_k, *params):
        for option in declared.get("anyOf", [declared]):
            if option.get("type") == "integer":
                option["maximum"] = settings.max_configs
