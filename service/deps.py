"""Typed dependencies: two-line accessors over ``app.state``, overridable in tests.

They are ``async def`` although they never await: FastAPI runs a sync dependency in
the threadpool, a thread hop per accessor per request for a mere attribute read.
"""

from __future__ import annotations

import hmac
from typing import Annotated, cast

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from xla_costmodel.service.core.auth import Caller
from xla_costmodel.service.core.best import BestLookup
from xla_costmodel.service.core.build import Core
from xla_costmodel.service.core.decisions import DecisionRecorder
from xla_costmodel.service.core.feedback import FeedbackRecorder
from xla_costmodel.service.core.fleet import FleetGain
from xla_costmodel.service.core.ranker import Ranker
from xla_costmodel.service.core.registry import ModelRegistry
from xla_costmodel.service.errors import Forbidden, Unauthorized
from xla_costmodel.service.metrics import Metrics
from xla_costmodel.service.settings import Settings
from xla_costmodel.service.store import Writer


def _core(request: Request) -> Core:
    return cast(Core, request.app.state.core)


async def get_settings(request: Request) -> Settings:
    return cast(Settings, request.app.state.settings)


async def get_registry(request: Request) -> ModelRegistry:
    return cast(ModelRegistry, request.app.state.registry)


async def get_ranker(request: Request) -> Ranker:
    return _core(request).ranker


async def get_metrics(request: Request) -> Metrics:
    return cast(Metrics, request.app.state.metrics)


async def get_feedback(request: Request) -> FeedbackRecorder:
    return _core(request).feedback


async def get_fleet(request: Request) -> FleetGain:
    return _core(request).fleet


async def get_decisions(request: Request) -> DecisionRecorder:
    return _core(request).decisions


async def get_best(request: Request) -> BestLookup:
    return _core(request).best


SettingsDep = Annotated[Settings, Depends(get_settings)]
RegistryDep = Annotated[ModelRegistry, Depends(get_registry)]
RankerDep = Annotated[Ranker, Depends(get_ranker)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
FeedbackDep = Annotated[FeedbackRecorder, Depends(get_feedback)]
FleetDep = Annotated[FleetGain, Depends(get_fleet)]
DecisionsDep = Annotated[DecisionRecorder, Depends(get_decisions)]
BestDep = Annotated[BestLookup, Depends(get_best)]

_bearer = HTTPBearer(auto_error=False, description="COSTMODEL_ADMIN_TOKEN")


async def require_admin(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """401 without a bearer token, 403 with a wrong one or when no token is configured."""
    if credentials is None:
        raise Unauthorized("admin endpoint: send Authorization: Bearer <token>")
    token = settings.server.admin_token
    if token is None:
        raise Forbidden("the admin API is disabled (COSTMODEL_ADMIN_TOKEN is not set)")
    expected = token.get_secret_value().encode()
    if not hmac.compare_digest(credentials.credentials.encode(), expected):
        raise Forbidden("invalid admin token")


AdminDep = Annotated[None, Depends(require_admin)]

_writer_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="WriterToken",
    description="a writer's token (costmodel tokens create); feedback and "
    "decisions only",
)


async def get_writer(
    request: Request,
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_writer_bearer)],
) -> Writer | None:
    """The feedback (or decision) request's writer: 401 without a valid token
    where one is needed.

    The header is judged by the core, not ``HTTPBearer`` (declared for the OpenAPI
    schema): that one reads ``Token x`` or ``Basic ...`` as no header at all."""
    auth = _core(request).feedback_auth
    sent = request.headers.getlist("authorization")
    if len(sent) > 1:
        raise Unauthorized("send one Authorization header", "Authorization")
    server = request.scope.get("server")
    caller = Caller(
        sent[0] if sent else None,
        server[1] if server and isinstance(server[1], int) else None,
        request.headers.get("host"),
    )
    return await auth.writer(caller)


WriterDep = Annotated[Writer | None, Depends(get_writer)]


async def get_anonymous(request: Request) -> bool:
    """Whether this server accepts anonymous writes on the request's port now
    (feedback auth ``off``, or ``auto`` listening on loopback only): only then are
    anonymous decisions served (``core/best.py``)."""
    server = request.scope.get("server")
    port = server[1] if server and isinstance(server[1], int) else None
    return await _core(request).feedback_auth.anonymous_open(port)


AnonymousDep = Annotated[bool, Depends(get_anonymous)]


async def get_client(request: Request) -> str:
    """The rank request's client, for per-client budgets (``core/clients.py``)."""
    ids = _core(request).clients
    peer = request.client
    authorization = request.headers.get("authorization")
    return await ids.of(authorization, None if peer is None else peer.host)


ClientDep = Annotated[str, Depends(get_client)]
