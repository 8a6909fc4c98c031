"""The app factory and its lifespan, which owns every resource on ``app.state``.

create_app(settings) -> FastAPI      nothing is opened until the lifespan starts
app_from_env() -> FastAPI            for ``uvicorn xla_costmodel.service.app:app_from_env --factory``

``app.state`` while serving: ``settings`` and ``replica`` (from ``create_app``), then
the lifespan's ``metrics``, ``database``, ``registry`` and ``core`` (``core/build.py``,
what the routes reach through ``deps.py``).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from xla_costmodel.runner import SessionOptions
from xla_costmodel.service.core.build import build_core
from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.event_bus import is_alone
from xla_costmodel.service.core.redis_store import RedisStore, Seal, connect
from xla_costmodel.service.core.registry import ModelRegistry
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
from xla_costmodel.service.store import StoreUnavailable, default_sqlite_url

log = logging.getLogger(__name__)
API_VERSION = "1"
# Former settings (docs/settings.md).
CACHE_TTL_S = 7 * 24 * 3600  # an embedding's Redis TTL
# Versions loaded per model: a pinned request keeps working across one reload (the
# newest serves unpinned requests).
KEEP_VERSIONS = 2


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Open Redis, the database and the model registry, build the core on them, load
    and warm every model, run the periodic refreshes; close all on exit."""
    settings: Settings = app.state.settings
    app.state.metrics = metrics = Metrics()
    redis = _redis(settings)
    url = _database_url(settings)
    app.state.database = db = Database(url, on_statement=metrics.stores.db_statement)
    scoring = settings.scoring
    app.state.registry = registry = ModelRegistry(
        scoring.model_dir,
        scoring.models,
        SessionOptions(),  # one thread per session: its nodes run in sequence
        KEEP_VERSIONS,
        metrics.models,
    )
    # The default (a callable) is the SQLite file.
    alone = is_alone(
        settings.server.workers, app.state.replica, None if callable(url) else url
    )
    app.state.core = core = build_core(settings, metrics, redis, db, registry, alone)
    try:
        try:
            await db.run(lambda store: store.ping())  # opens and migrates it now
        except StoreUnavailable as exc:  # ranking goes on; feedback answers 503
            log.warning("database unavailable at start", extra={"error": str(exc)})
        await registry.load_all()
        # The shipped seeds are fitted before the first request: a tuner's first
        # portfolio needs them. Then refits follow the database, off the request path.
        await core.knowledge.prepare(registry.loaded())
        async with anyio.create_task_group() as tasks:
            # Other processes' writes: the subscription drops every cache when it
            # comes up, so what the loading above cached is read again.
            tasks.start_soon(core.bus.listen, name="events")
            for loop in core.loops:
                tasks.start_soon(loop.run, name=loop.name)
            log.info(
                "serving",
                extra={
                    "models": scoring.models,
                    "ready": registry.ready,
                    "redis": bool(redis),
                    "database": db.scheme,
                    "feedback_auth": settings.feedback.feedback_auth,
                },
            )
            yield
            tasks.cancel_scope.cancel()  # a step in a thread finishes first
    finally:
        await core.aclose()
        if redis is not None:
            await redis.aclose()
        await anyio.to_thread.run_sync(db.close)
        metrics.close()


def _redis(settings: Settings) -> RedisStore | None:
    """The Redis store, if one is configured (connecting is lazy)."""
    stores = settings.stores
    if not stores.redis_url:
        return None
    # Short socket and connect timeouts, no retries: a slow Redis is a cache miss.
    timeout_s = settings.developer.redis_timeout_s
    client = connect(stores.redis_url.get_secret_value(), timeout_s, timeout_s)
    # Values are sealed: the service reads back only what it wrote.
    seal = Seal(stores.redis_seal_key)
    cooldown_s = settings.developer.redis_cooldown_s
    return RedisStore(client, CACHE_TTL_S, cooldown_s, seal=seal)


def _database_url(settings: Settings) -> str | Callable[[], str]:
    """The configured URL, else (a callable: resolved on first use) the SQLite file."""
    stores = settings.stores
    if stores.database_url:
        return stores.database_url.get_secret_value()
    return partial(default_sqlite_url, stores.data_dir)


def create_app(settings: Settings, replica: bool = False) -> FastAPI:
    """The ASGI app; resources open when its lifespan starts. ``replica``: one of
    several processes started apart from ``COSTMODEL_WORKERS`` (Ray Serve), so other
    processes may write the same database."""
    app = FastAPI(
        title="costmodel",
        version=API_VERSION,
        summary="Learned cost model: ranks XLA compilation configs for a graph.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.replica = replica
    # The group's names are the middleware's parameters; its body budget and JSON
    # bound are the middleware's defaults.
    app.add_middleware(RequestContext, **settings.requests.model_dump())
    for router in ROUTERS:
        app.include_router(router)
    _install_error_handlers(app)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def app_from_env() -> FastAPI:
    """Factory for uvicorn: settings from ``COSTMODEL_*`` variables, JSON logs."""
    settings = Settings()
    configure_logging(settings.server.log_level)
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
                option["maximum"] = settings.limits.max_configs
