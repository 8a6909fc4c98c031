"""The health probes' answers: liveness and readiness, v1 and the v2 protocol's."""

from __future__ import annotations

from typing import Literal

from xla_costmodel.service.schemas.common import Wire


class LiveOut(Wire):
    status: Literal["ok"] = "ok"


class ModelStatusOut(Wire):
    version: str | None
    loaded_versions: list[str]
    error: str | None


class ReadyOut(Wire):
    ready: bool
    models: dict[str, ModelStatusOut]


class V2LiveOut(Wire):
    live: bool


class V2ReadyOut(Wire):
    ready: bool
