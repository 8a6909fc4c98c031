"""The model catalogue (``GET /v1/models``, reloads) and the fleet's measurements
per model and target (``GET /v1/targets``)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from xla_costmodel.service.schemas.common import Wire
from xla_costmodel.tpugraphs.spec import Collection


class TensorSpecOut(Wire):
    name: str
    dtype: str
    shape: list[int | str]


class ModelOut(Wire):
    name: str
    collection: Collection
    version: str = Field(description="the version serving unpinned requests")
    loaded_versions: list[str] = Field(description="versions a request may pin")
    graph_inputs: list[TensorSpecOut]
    config_input: TensorSpecOut
    embedding: list[TensorSpecOut]


class ModelsOut(Wire):
    models: list[ModelOut]


class ReloadOut(Wire):
    model: str
    previous_version: str | None
    version: str
    changed: bool
    loaded_versions: list[str]


class TargetOut(Wire):
    """One model's measurements on one target (``service/core/fleet.py``)."""

    model: str
    collection: str
    target: str
    programs: int = Field(ge=0, description="graphs with measurements")
    tuned: int = Field(
        ge=0, description="graphs whose default config was measured: the gain's"
    )
    measurements: int = Field(ge=0, description="measured runtimes stored")
    decisions: int = Field(0, ge=0, description="tuning decisions stored")
    gain: float | None = Field(
        description="geometric mean over the tuned graphs of the default config's "
        "runtime / the best measured (a speedup, >= 1); null: no tuned graph"
    )


class TargetsOut(Wire):
    as_of: datetime | None = Field(
        description="when these figures were read from the database (every "
        "COSTMODEL_FLEET_REFRESH_S); null: not yet"
    )
    targets: list[TargetOut] = Field(description="every model and target, sorted")
