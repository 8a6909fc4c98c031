"""Paths and tiny configs shared by the model tests (fixtures are in conftest.py)."""

from __future__ import annotations

TILE_KERNELS = "pb/official_testdata/op_tuning_data.converted"
UNET_TRAIN = "npz/layout/xla/default/train/unet3d.npz"
UNET_VALID = "npz/layout/xla/default/valid/unet_3d.4x4.bf16.npz"
NLP_TEST = "npz/layout/nlp/default/test/3a0c5517a87df8d82fd637b83298a3ba.npz"
FUSION_191 = f"{TILE_KERNELS}/fusion.191_4ae805e53b8d2b8a.npz"


def tiny_config(collection: str, epochs: int = 2, **train_kwargs: object):  # type: ignore[no-untyped-def]
    from xla_costmodel.models.network import ModelConfig
    from xla_costmodel.models.train import TrainConfig

    model = ModelConfig(collection, hidden=16, layers=2, embed=16, scorer_hidden=8)  # type: ignore[arg-type]
    options: dict[str, object] = {"batch_configs": 16, "max_steps_per_graph": 2}
    options.update(train_kwargs)
    return TrainConfig(collection, epochs=epochs, model=model, **options)  # type: ignore[arg-type]
