"""A throwaway Prometheus that scrapes costmodel servers and evaluates the shipped rules.

    with PrometheusServer(workdir, ["127.0.0.1:8000"], interval_s=1) as prom:
        prom.query('costmodel:fleet_gain:max')          # instant vector, as dicts
        prom.query_range(expr, start, end, step_s)       # matrix, as dicts

Debian's ``prometheus`` binary (``make prometheus``), a config written into the work
directory (job ``costmodel``, as ``deploy/monitoring/rules.yml`` expects), its TSDB
there too, on a free loopback port. The end-to-end monitoring test and the README's
rendering of the recorded series (``studies/monitoring.py``) both use it.

A process of the harness (``xla_costmodel.harness.ManagedProcess``), so this module
imports it and runs from a clone only: ``monitoring`` imports it inside ``main``,
after ``require_harness``, like the harness itself.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from xla_costmodel.harness import LOOPBACK, ManagedProcess, ProcessError

RULES = Path("deploy/monitoring/rules.yml")  # from the repository root (make)


class PrometheusServer(ManagedProcess):
    name = "prometheus"
    ready_timeout_s = 30.0

    def __init__(
        self,
        workdir: Path,
        targets: Sequence[str],
        interval_s: float = 1.0,
        rules: Path = RULES,
    ) -> None:
        super().__init__(workdir)
        self.targets = list(targets)
        self.interval = f"{max(1, round(interval_s * 1000))}ms"
        self.rules = rules.resolve()  # prometheus runs in workdir

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def config(self) -> dict[str, Any]:
        return {
            "global": {
                "scrape_interval": self.interval,
                "evaluation_interval": self.interval,
            },
            "rule_files": [str(self.rules)],
            "scrape_configs": [
                {"job_name": "costmodel", "static_configs": [{"targets": self.targets}]}
            ],
        }

    def command(self) -> list[str]:
        binary = shutil.which("prometheus")
        if binary is None:
            raise ProcessError("prometheus is not installed (`make prometheus`)")
        path = self.workdir / f"prometheus-{self.port}.yml"
        path.write_text(json.dumps(self.config()))  # YAML is a superset of JSON
        return [
            binary,
            f"--config.file={path}",
            f"--storage.tsdb.path={self.workdir / f'tsdb-{self.port}'}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
            "--log.level=warn",
        ]

    def ready(self) -> bool:
        try:
            return httpx.get(self.url + "/-/ready", timeout=1.0).is_success
        except httpx.HTTPError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        """``/api/v1/query``: the instant vector's samples (``metric``, ``value``)."""
        return self._api("query", {"query": expr})

    def query_range(
        self, expr: str, start: float, end: float, step_s: float
    ) -> list[dict[str, Any]]:
        """``/api/v1/query_range``: one series per label set (``metric``, ``values``)."""
        params = {"query": expr, "start": start, "end": end, "step": step_s}
        return self._api("query_range", params)

    def _api(self, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        body = answer.json()
        if answer.status_code != 200 or body.get("status") != "success":
            raise ProcessError(f"prometheus {path} {params['query']!r}: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result
