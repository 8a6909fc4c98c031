"""``costmodel serve --workers N``: N uvicorn worker processes sharing one socket.

Each worker builds its own app through ``app_from_env`` (uvicorn's ``factory=True``)
and loads every model once, so settings cannot travel as an object: the command's
overrides become ``COSTMODEL_*`` variables, which the workers inherit. Metrics are
merged across workers by prometheus-client's multiprocess mode, in a fresh directory
per run that is removed at exit (files of an earlier run would add its counts to
this one's). What changes answers (measurements, adaptation, remembered rankings)
lives in the database and Redis, not in a worker (docs/serving-workers.md).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from xla_costmodel.service.settings import Settings

log = logging.getLogger(__name__)
APP_FACTORY = "xla_costmodel.service.app:app_from_env"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# uvicorn's default (5 s) can be shorter than a worker's model load (a busy host, big
# artifacts), and then a SIGHUP restart gives up on every new worker; it also bounds
# how long a hung worker is pinged before it is replaced.
WORKER_START_S = 60


def settings_env(overrides: Mapping[str, Any]) -> dict[str, str]:
    """``COSTMODEL_<NAME>`` for every override given (None: not given)."""
    env = {}
    for name, value in overrides.items():
        if value is None:
            continue
        if isinstance(value, list | tuple):
            value = ",".join(map(str, value))
        env[f"COSTMODEL_{name.upper()}"] = str(value)
    return env


@contextmanager
def patched_environ(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` in ``os.environ`` (which spawned workers inherit), restored after."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def metrics_dir() -> Iterator[Path]:
    """A fresh directory for the workers' metric files, removed at exit."""
    path = Path(tempfile.mkdtemp(prefix="costmodel-metrics-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run_workers(
    settings: Settings, overrides: Mapping[str, Any], graceful_s: int
) -> None:
    """Serve with ``COSTMODEL_WORKERS`` processes until stopped (SIGINT/SIGTERM)."""
    server = settings.server
    if settings.stores.redis_url is None:
        log.warning(
            "several workers without Redis: a ranking is remembered only by the "
            "worker that answered it, so feedback by config_indices may get 409 "
            "ranking_not_found from another",
            extra={"workers": server.workers},
        )
    with metrics_dir() as path:
        env = {**settings_env(overrides), MULTIPROC_ENV: str(path)}
        with patched_environ(env):
            uvicorn.run(
                APP_FACTORY,
                factory=True,
                workers=server.workers,
                host=server.host,
                port=server.port,
                log_config=None,
                access_log=False,
                timeout_graceful_shutdown=graceful_s,
                timeout_worker_healthcheck=WORKER_START_S,
            )
