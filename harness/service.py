"""The costmodel service as a process: uvicorn on the app factory, or its own command
line."""

from __future__ import annotations

import os
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xla_costmodel.harness.processes import LOOPBACK, ManagedProcess

# The module the service's own ``costmodel serve`` runs, for ``ServiceServer(argv=)``.
SERVE_MODULE = "xla_costmodel.service.cli"


class ServiceServer(ManagedProcess):
    """The costmodel service, configured by ``COSTMODEL_*`` variables.

    ``settings_env`` is set on top of this process's environment, whose own
    ``COSTMODEL_*`` variables (a Redis on 6379, say) stay out: the server gets exactly
    the settings it is given. Without ``argv`` it is uvicorn on the service's factory
    ``xla_costmodel.service.app:app_from_env`` (``create_app(Settings())``, the app
    ``costmodel serve`` runs) with ``workers`` processes and no access log; with
    ``argv`` (``[sys.executable, "-m", SERVE_MODULE]``, the ``costmodel`` script and
    ``serve``, ...) it is that command with ``--host`` and ``--port`` appended.
    """

    name = "service"
    ready_timeout_s = 90.0

    def __init__(
        self,
        workdir: Path,
        settings_env: Mapping[str, str],
        workers: int = 1,
        argv: Sequence[str] | None = None,
    ) -> None:
        super().__init__(workdir)
        self.settings_env = dict(settings_env)
        self.workers = workers
        self.argv = list(argv) if argv is not None else None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def command(self) -> list[str]:
        address = ["--host", LOOPBACK, "--port", str(self.port)]
        if self.argv is not None:
            return [*self.argv, *address]
        return [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "xla_costmodel.service.app:app_from_env",
            *address,
            "--workers",
            str(self.workers),
            "--log-level",
            "warning",
            "--no-access-log",
        ]

    def popen_options(self) -> dict[str, Any]:
        inherited = {
            k: v for k, v in os.environ.items() if not k.startswith("COSTMODEL_")
        }
        return {"cwd": self.workdir, "env": {**inherited, **self.settings_env}}

    def ready(self) -> bool:
        """``GET /readyz`` answers 200 once every model is loaded and warmed up."""
        # No proxy: an http_proxy variable must not route loopback probes away.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(self.url + "/readyz", timeout=1.0) as response:
                return bool(response.status == 200)
        except OSError:  # refused, reset, timed out, or an HTTP error status
            return False
