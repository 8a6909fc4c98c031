"""The fleet's tuning gain per model and target, as JSON (the same figures as the
``costmodel_fleet_*`` metrics, uncapped: every target is listed)."""

from __future__ import annotations

from fastapi import APIRouter

from xla_costmodel.service.deps import FleetDep
from xla_costmodel.service.schemas import TargetOut, TargetsOut, error_responses

router = APIRouter(prefix="/v1/targets", tags=["fleet"])


@router.get("", response_model=TargetsOut, responses=error_responses(503))
async def list_targets(fleet: FleetDep) -> TargetsOut:
    """Programs, measurements, tuning decisions and geometric-mean gain per model
    and target, from the latest snapshot of the measurement database (never a
    query per request)."""
    snapshot = fleet.snapshot
    return TargetsOut(
        as_of=snapshot.as_of,
        targets=[
            TargetOut(
                model=t.model,
                collection=t.collection,
                target=t.target,
                programs=t.programs,
                tuned=t.tuned,
                measurements=t.measurements,
                decisions=t.decisions,
                gain=t.gain,
            )
            for t in snapshot.targets
        ],
    )
