"""The loaded models, and the admin reload."""

from __future__ import annotations

from fastapi import APIRouter, Path, Request

from xla_costmodel.runner import ArtifactRunner
from xla_costmodel.service.deps import AdminDep, RegistryDep
from xla_costmodel.service.schemas import (
    ModelOut,
    ModelsOut,
    ReloadOut,
    TensorSpecOut,
    error_responses,
)

router = APIRouter(prefix="/v1/models", tags=["models"])


def _model_out(runner: ArtifactRunner, loaded: list[str]) -> ModelOut:
    m = runner.manifest
    return ModelOut(
        name=runner.name,
        collection=m.collection,
        version=runner.version,
        loaded_versions=loaded,
        graph_inputs=[TensorSpecOut(**s.model_dump()) for s in m.encoder.inputs],
        config_input=TensorSpecOut(**m.config_input.model_dump()),
        embedding=[TensorSpecOut(**s.model_dump()) for s in m.encoder.outputs],
    )


@router.get("", response_model=ModelsOut, responses=error_responses(503))
async def list_models(registry: RegistryDep) -> ModelsOut:
    """Models serving now, with the inputs a client must send."""
    return ModelsOut(
        models=[
            _model_out(s.current, list(s.versions))
            for s in registry.slots()
            if s.current
        ]
    )


@router.post(
    "/{name}/reload",
    response_model=ReloadOut,
    responses={
        # The model name travels in the request line: one that cannot be sent as a
        # valid HTTP path is refused by uvicorn's parser, as plain text, before the app.
        400: {
            "description": "the HTTP server could not parse the request (plain text)",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        **error_responses(401, 403, 404, 409, 422, 503),
    },
)
async def reload_model(
    request: Request,
    registry: RegistryDep,
    _: AdminDep,
    name: str = Path(max_length=64),
) -> ReloadOut:
    """Load, warm and swap in the newest version on disk; on failure the old one serves."""
    request.state.model = name
    result = await registry.reload(name)
    return ReloadOut(
        model=result.name,
        previous_version=result.previous_version,
        version=result.version,
        changed=result.changed,
        loaded_versions=result.loaded_versions,
    )
