"""Tiny trained models shared by the model tests: trained once per session, on real files."""

from __future__ import annotations

from pathlib import Path

import pytest
from modelkit import TILE_KERNELS, UNET_TRAIN, UNET_VALID, tiny_config


@pytest.fixture(scope="session")
def tile_artifact(shared_data: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """(TrainResult, artifact dir) of a tiny tile model trained 2 epochs on real kernels."""
    from xla_costmodel.models.export import export_artifact
    from xla_costmodel.models.train import fit

    kernels = sorted((shared_data / TILE_KERNELS).glob("*.npz"))
    valid = [k for k in kernels if k.name.startswith("fusion.205")]
    train = [k for k in kernels if k not in valid]
    out = tmp_path_factory.mktemp("tile") / "3"
    result = fit(train, valid, tiny_config("tile"), out)
    export_artifact(result, out)
    return result, out


@pytest.fixture(scope="session")
def layout_artifact(shared_data: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from xla_costmodel.models.export import export_artifact
    from xla_costmodel.models.train import fit

    out = tmp_path_factory.mktemp("layout") / "1"
    result = fit(
        [shared_data / UNET_TRAIN],
        [shared_data / UNET_VALID],
        tiny_config("layout"),
        out,
    )
    export_artifact(result, out)
    return result, out
