"""The service on Ray Serve: the same FastAPI app (``create_app``) in N replicas that
share Redis and the measurement database.

build(args) -> Application         the Serve application builder (``serve deploy
                                   deploy/ray/serve.yaml``, ``costmodel serve --ray``)
proxy_middlewares() -> [Middleware] for ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``

Only this module imports ray, and only the CLI imports this module, when asked to.

Each replica builds its own app from ``Settings()``, i.e. from the ``COSTMODEL_*``
variables of its runtime environment (``ReplicaArgs.env`` or the Serve config's
``runtime_env.env_vars``) and the secret files in ``COSTMODEL_SECRETS_DIR``
(``secrets_dir.py``: the database URL, Redis URL and admin token never travel as
plain runtime-environment variables), so a replica reads its settings where it runs
and the app is never pickled. Serve runs the app's lifespan in the replica before the replica
takes traffic (``ASGIAppReplicaWrapper`` drives it with uvicorn's ``LifespanOn``),
so Redis, the database and the warmed models are opened per replica, as under
uvicorn.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from ray import serve
from ray.serve import Application
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from xla_costmodel.service.app import create_app
from xla_costmodel.service.errors import error_body
from xla_costmodel.service.secrets_dir import (
    SECRETS_DIR_ENV,
    replica_secrets_dir,
    secrets_dir,
    split_secrets,
)
from xla_costmodel.service.settings import Settings

log = logging.getLogger(__name__)
ENV_PREFIX = "COSTMODEL_"
REPLICA_HEADER = "x-replica"
DEPLOYMENT = "costmodel"
PROXY_CALLBACK_ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
PROXY_CALLBACK = "xla_costmodel.service.ray_app:proxy_middlewares"


class ReplicaArgs(BaseModel):
    """Builder arguments (``args:`` in the Serve config)."""

    model_config = ConfigDict(extra="forbid")

    replicas: int = Field(2, ge=1, description="fixed count, or the initial one")
    min_replicas: int | None = Field(None, ge=1, description="set both to autoscale")
    max_replicas: int | None = Field(None, ge=1)
    target_ongoing_requests: float = Field(
        8, gt=0, description="autoscaling aims at this many requests per replica"
    )
    # Below the app's own COSTMODEL_MAX_INFLIGHT: requests beyond it wait in the Serve
    # proxy, which routes them to whichever replica frees up first.
    max_ongoing_requests: int = Field(32, ge=1)
    replica_cpus: float = Field(1.0, gt=0, description="CPUs Ray reserves per replica")
    env: dict[str, str] = Field(
        default_factory=dict, description="COSTMODEL_* variables for every replica"
    )

    @model_validator(mode="after")
    def _check(self) -> ReplicaArgs:
        if (self.min_replicas is None) != (self.max_replicas is None):
            raise ValueError("set both min_replicas and max_replicas, or neither")
        low, high = self.min_replicas, self.max_replicas
        if low is not None and high is not None and not low <= self.replicas <= high:
            raise ValueError("need min_replicas <= replicas <= max_replicas")
        bad = [k for k in self.env if not k.startswith(ENV_PREFIX)]
        if bad:
            raise ValueError(f"env holds only {ENV_PREFIX}* variables, not {bad}")
        return self

    def settings(self) -> Settings:
        """What a replica will read, checked here so a typo fails the deploy, not
        every replica (the caller's own COSTMODEL_* environment fills the rest)."""
        fields: dict[str, Any] = {
            k.removeprefix(ENV_PREFIX).lower(): v
            for k, v in self.env.items()
            if k != SECRETS_DIR_ENV
        }
        # not model_validate: that skips the environment
        return Settings.load(replica_secrets_dir(self.env), **fields)


class ReplicaHeader:
    """Adds ``X-Replica: <replica id>`` to every answer of this replica.

    The id is Serve's opaque random replica tag, the same label Serve's own logs and
    metrics carry, so an operator can match a slow or failing answer to its replica's
    logs; it reveals nothing else (no address, no host name).
    """

    def __init__(self, app: ASGIApp, replica: str) -> None:
        self.app = app
        self.replica = replica

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).append(REPLICA_HEADER, self.replica)
            await send(message)

        await self.app(scope, receive, tagged)


class ReplicaFailureIs502:
    """Proxy-side: a request that no replica answered gets 502 Bad Gateway.

    When a replica dies with requests in flight (crash, OOM kill, node loss), the
    Serve proxy sends nothing for them, and its uvicorn then answers a bare 500,
    which clients rightly do not retry (a 500 is a bug). 502 is what happened: the
    upstream failed. Clients retry 502 (idempotent calls; feedback is one, it carries
    an Idempotency-Key), so a lost replica costs a retry, not a failed request. An
    answer a replica started, whatever its status, passes unchanged.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception:
            if started:
                raise
            log.warning("no replica answered", exc_info=True)
        if not started:
            body = error_body("bad_gateway", "the replica failed; retry the request")
            await JSONResponse(body, 502)(scope, receive, send)


def proxy_middlewares() -> list[Middleware]:
    """For ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``, set where Ray starts."""
    return [Middleware(ReplicaFailureIs502)]


@serve.ingress()  # late-bound: the app is built in the replica, see the docstring
class CostModelReplica:
    """One replica: ``create_app(Settings())``, its lifespan run by Serve."""

    def __init__(self) -> None:
        self._settings = Settings.load(replica_secrets_dir(os.environ))
        self._app: Any = None

    def __serve_build_asgi_app__(self) -> ASGIApp:
        app = create_app(self._settings, replica=True)
        tag = serve.get_replica_context().replica_tag
        app.add_middleware(ReplicaHeader, replica=tag)
        self._app = app
        return app

    async def check_health(self) -> None:
        """Serve's periodic probe: cheap, in-process. Redis and the database are
        shared by every replica, so an outage of either must not make Serve restart
        them all (ranking goes on without them); a replica without its loaded models
        cannot serve, so restarting it is the cure."""
        registry = getattr(self._app.state, "registry", None) if self._app else None
        if registry is None or not registry.ready:
            raise RuntimeError("models not loaded")


def build(args: dict[str, Any]) -> Application:
    """The Serve application: ``CostModelReplica`` with ``args`` (``ReplicaArgs``)."""
    try:
        parsed = ReplicaArgs.model_validate(args)
        parsed.settings()
    except ValidationError as exc:
        raise ValueError(f"invalid costmodel Serve arguments: {exc}") from None
    scaling: dict[str, Any] = {"num_replicas": parsed.replicas}
    if parsed.min_replicas is not None:
        scaling = {
            "autoscaling_config": {
                "min_replicas": parsed.min_replicas,
                "initial_replicas": parsed.replicas,
                "max_replicas": parsed.max_replicas,
                "target_ongoing_requests": parsed.target_ongoing_requests,
            }
        }
    # Serve merges these env_vars into the Serve config's runtime_env.env_vars.
    actor = {"num_cpus": parsed.replica_cpus, "runtime_env": {"env_vars": parsed.env}}
    deployment = serve.deployment(
        name=DEPLOYMENT,
        max_ongoing_requests=parsed.max_ongoing_requests,
        health_check_period_s=5,
        health_check_timeout_s=10,
        graceful_shutdown_timeout_s=10,
        ray_actor_options=actor,
        **scaling,
    )(CostModelReplica)
    return deployment.bind()


def run_on_ray(settings: Settings, overrides: dict[str, Any], replicas: int) -> None:
    """``costmodel serve --ray``: Serve's proxy on ``settings.server``'s host:port, the
    replicas configured by the caller's COSTMODEL_* environment and ``overrides``
    (the command's options); blocks until Ctrl-C."""
    import ray

    env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
    for name, value in overrides.items():
        if value is not None and name not in ("host", "port"):
            env[ENV_PREFIX + name.upper()] = str(value)
    # Replicas may run in another working directory (or on another node): relative
    # paths are resolved here, where the caller meant them.
    env[ENV_PREFIX + "MODEL_DIR"] = str(settings.scoring.model_dir.resolve())
    env[ENV_PREFIX + "DATA_DIR"] = str(settings.stores.data_dir.resolve())
    # The proxy listens on the configured host, not the replicas: they get auto's
    # answer.
    auth = "token" if settings.feedback_tokens_required else "off"
    env[ENV_PREFIX + "FEEDBACK_AUTH"] = auth
    env, secrets = split_secrets(env)
    private = secrets_dir(secrets)
    env[SECRETS_DIR_ENV] = str(private)
    for name in secrets:  # nor do the processes a local Ray starts inherit them
        os.environ.pop(name, None)
    # Read by the proxy when it starts: a local Ray started below inherits it; a
    # cluster from `ray start --head` needs it in that command's environment.
    os.environ.setdefault(PROXY_CALLBACK_ENV, PROXY_CALLBACK)
    try:
        ray.init()  # RAY_ADDRESS, if set, names a running cluster
        server = {"host": settings.server.host, "port": settings.server.port}
        serve.start(http_options=server)
        app = build({"replicas": replicas, "env": env})
        serve.run(app, name=DEPLOYMENT, route_prefix="/")
        _wait_for_signal()
        # Replicas run the app's lifespan exit: Redis and the database are closed.
        serve.delete(DEPLOYMENT)
    finally:
        ray.shutdown()  # a local Ray stops with it; a cluster's Ray keeps running
        shutil.rmtree(private, ignore_errors=True)


def _wait_for_signal() -> None:
    """Until SIGINT or SIGTERM. Serve's own ``blocking=True`` handles only Ctrl-C,
    and not always: a SIGINT was seen ignored, and the killed driver left Ray's
    agents running (docs/serving-ray.md)."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass
