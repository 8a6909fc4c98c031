"""Liveness, readiness (also under the KServe/Triton v2 paths) and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST

from xla_costmodel.service.deps import MetricsDep, RegistryDep
from xla_costmodel.service.errors import NotReady
from xla_costmodel.service.schemas import (
    LiveOut,
    ModelStatusOut,
    ReadyOut,
    V2LiveOut,
    V2ReadyOut,
    error_responses,
)

router = APIRouter(tags=["health"])


def _check_ready(registry: RegistryDep) -> None:
    if not registry.ready:
        pending = [
            f"{s.name} ({s.status or 'loading'})"
            for s in registry.slots()
            if s.current is None
        ]
        raise NotReady("models not ready: " + "; ".join(pending))


@router.get("/livez", response_model=LiveOut)
async def livez() -> LiveOut:
    return LiveOut()


@router.get("/readyz", response_model=ReadyOut, responses=error_responses(503))
async def readyz(registry: RegistryDep) -> ReadyOut:
    """200 once every configured model is loaded and warmed up, else 503."""
    _check_ready(registry)
    models = {
        s.name: ModelStatusOut(
            version=s.current.version if s.current else None,
            loaded_versions=list(s.versions),
            error=s.status,
        )
        for s in registry.slots()
    }
    return ReadyOut(ready=True, models=models)


@router.get("/v2/health/live", response_model=V2LiveOut)
async def v2_live() -> V2LiveOut:
    return V2LiveOut(live=True)


@router.get(
    "/v2/health/ready", response_model=V2ReadyOut, responses=error_responses(503)
)
async def v2_ready(registry: RegistryDep) -> V2ReadyOut:
    _check_ready(registry)
    return V2ReadyOut(ready=True)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}
    },
)
async def metrics(metrics: MetricsDep) -> Response:
    return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)
