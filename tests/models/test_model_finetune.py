"""``costmodel train --init``: fine-tuning starts from the artifact's own weights (zero
epochs reproduce it under onnxruntime, from a checkpoint or from the ONNX files alone),
training then changes it and learns the planted signal, and bad starts fail in one line.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from modelkit import tiny_config
from typer.testing import CliRunner

from xla_costmodel.manifest import read_manifest
from xla_costmodel.models import cli
from xla_costmodel.models.checkpoint import CHECKPOINT, TrainResult, save_checkpoint
from xla_costmodel.models.data import ExampleStore
from xla_costmodel.models.export import export_artifact
from xla_costmodel.models.finetune import InitError, architecture, finetune, load_init
from xla_costmodel.models.network import CostModel
from xla_costmodel.models.synthetic import write_tree
from xla_costmodel.models.train import fit
from xla_costmodel.runner import ArtifactRunner
from xla_costmodel.tpugraphs.collections import TILE
from xla_costmodel.tpugraphs.metrics import mean_metrics
from xla_costmodel.tpugraphs.reader import load_npz

SIZES = {"num_nodes": 20, "num_configs": 60}
SHIPPED = Path(__file__).resolve().parents[2] / "models" / "artifacts"
FOLDED = ("mean", "inv_std", "linear.weight", "linear.bias")  # a NormLinear's


def app() -> typer.Typer:
    application = typer.Typer()
    application.command("train")(cli.train)
    application.command("export")(cli.export)  # two commands: subcommand syntax
    return application


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """Planted-signal tile files: train, valid and a test split used for nothing else."""
    root = tmp_path_factory.mktemp("planted")
    return {
        split: write_tree(root, "tile", split, n, seed=seed, **SIZES)
        for split, n, seed in (("train", 6, 0), ("valid", 2, 1), ("test", 4, 2))
    }


@pytest.fixture(scope="module")
def init_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny tile model trained 1 epoch on random runtimes (it knows nothing of the
    planted signal), exported as name ``tiny``, target ``tpu-v4``, with its checkpoint."""
    root = tmp_path_factory.mktemp("init")
    files = write_tree(root, "tile", "train", 3, seed=5, signal=False, **SIZES)
    out = root / "artifacts" / "tiny" / "1"
    result = fit(files, [], tiny_config("tile", epochs=1), root / "run")
    save_checkpoint(result, out)
    export_artifact(result, out, name="tiny", target="tpu-v4")
    return out


def outputs(artifact: Path, files: list[Path]) -> list[np.ndarray]:
    """Every embedding and score the artifact gives on ``files`` (onnxruntime)."""
    runner = ArtifactRunner(artifact)
    got = []
    for path in files:
        sample = load_npz(path)
        emb = runner.encode(sample.graph)
        got += [*emb.values(), runner.score(emb, sample.configs)]
    return got


def quality(artifact: Path, files: list[Path]) -> float:
    """Mean top-1/5 slowdown (lower is better) of the artifact's rankings."""
    runner = ArtifactRunner(artifact)
    rows = []
    for ex in ExampleStore(files, "tile"):
        scores = runner.score(runner.encode(ex.graph), ex.configs)
        rows.append(TILE.metrics(scores, ex.targets))
    mean = mean_metrics(rows, TILE.metrics.keys)
    return float(np.mean([mean["top1_slowdown"], mean["top5_slowdown"]]))


@pytest.mark.parametrize("weights", ["checkpoint", "onnx"])
def test_zero_epochs_reproduce_the_init_artifact(
    weights: str, init_artifact: Path, planted: dict[str, list[Path]], tmp_path: Path
) -> None:
    init = tmp_path / "served" / "tiny" / "1"
    shutil.copytree(init_artifact, init)
    if weights == "onnx":  # as served: manifest + ONNX only
        (init / CHECKPOINT).unlink()
    out = tmp_path / "ft" / "tiny" / "2"
    result = CliRunner().invoke(
        app(),
        [
            "train",
            "--collection",
            "tile",
            "--data",
            str(planted["train"][0].parent),
            "--valid",
            str(planted["valid"][0].parent),
            "--out",
            str(out),
            "--init",
            str(init),
            "--epochs",
            "0",
        ],
    )
    assert result.exit_code == 0, result.output
    for have, want in zip(
        outputs(out, planted["test"]), outputs(init, planted["test"]), strict=True
    ):
        np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5)
    manifest, before = read_manifest(out), read_manifest(init)
    assert (manifest.name, manifest.version, manifest.target) == ("tiny", "2", "tpu-v4")
    record = manifest.training["init"]
    assert record["artifact"] == str(init)
    assert (record["name"], record["version"]) == ("tiny", "1")
    assert record["sha256"] == {
        "encoder": before.encoder.sha256,
        "scorer": before.scorer.sha256,
    }
    source = str(init / CHECKPOINT) if weights == "checkpoint" else "onnx initializers"
    assert record["weights"] == source
    assert manifest.training["model_config"] == before.training["model_config"]
    assert manifest.training["best_epoch"] == 0 and manifest.training["epochs_run"] == 0


def test_finetuning_changes_the_model_and_learns_the_planted_signal(
    init_artifact: Path, planted: dict[str, list[Path]], tmp_path: Path
) -> None:
    start = load_init(init_artifact, "tile")
    cfg = tiny_config("tile", epochs=6, lr=5e-3, patience=100)
    out = tmp_path / "tiny" / "2"
    manifest = finetune(start, planted["train"], planted["valid"], cfg, out)
    assert manifest.training["init"]["weights"] == str(init_artifact / CHECKPOINT)
    assert manifest.training["best_epoch"] > 0  # an epoch of training beat the start
    changed = outputs(out, planted["test"])[-1]
    assert not np.allclose(changed, outputs(init_artifact, planted["test"])[-1])
    before, after = (
        quality(init_artifact, planted["test"]),
        quality(out, planted["test"]),
    )
    assert after <= before, (after, before)
    assert after < 0.5 * before or after < 0.05, (after, before)


def test_the_init_network_is_left_untouched(
    init_artifact: Path, planted: dict[str, list[Path]], tmp_path: Path
) -> None:
    start = load_init(init_artifact)
    weights = {k: v.clone() for k, v in start.model.state_dict().items()}
    cfg = tiny_config("tile", epochs=1)
    result = fit(planted["train"], [], cfg, tmp_path, init=start.model)
    assert all(torch.equal(v, start.model.state_dict()[k]) for k, v in weights.items())
    assert any(
        not torch.equal(v, result.model.state_dict()[k]) for k, v in weights.items()
    )


def test_a_checkpoint_of_other_weights_is_not_used(
    init_artifact: Path, tmp_path: Path
) -> None:
    """A stale checkpoint beside the artifact fails the onnxruntime check: the weights
    come from the ONNX files instead."""
    init = tmp_path / "tiny" / "1"
    shutil.copytree(init_artifact, init)
    other = CostModel(load_init(init_artifact).config)
    save_checkpoint(TrainResult(other, {}, {}), init)
    assert load_init(init).weights == "onnx initializers"


@pytest.mark.parametrize("name", ["tile", "layout"])
def test_shipped_artifacts_load_from_their_checkpoints_or_onnx_alone(
    name: str, tmp_path: Path
) -> None:
    """The shipped checkpoint is found in the checkpoint tree; a copy of the artifact
    alone (as served) gives the same network from its ONNX files."""
    shipped = SHIPPED / name / "1"
    start = load_init(shipped, name)
    assert Path(start.weights).resolve() == (
        SHIPPED.parent / "checkpoints" / name / "1" / CHECKPOINT
    )
    served = tmp_path / name
    shutil.copytree(shipped, served)
    alone = load_init(served, name)
    assert alone.weights == "onnx initializers"
    want, have = start.model.state_dict(), alone.model.state_dict()
    same = [k for k in want if torch.allclose(want[k], have[k])]
    # all but the parameters the exporter folded into the scorer's input layer
    assert set(want) - set(same) <= {f"scorer.config_in.{p}" for p in FOLDED}


def error_of(args: list[str]) -> str:
    result = CliRunner().invoke(app(), ["train", *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def test_bad_starts_fail_in_one_line(
    init_artifact: Path, planted: dict[str, list[Path]], tmp_path: Path
) -> None:
    data = ["--data", str(planted["train"][0].parent), "--epochs", "1"]
    out = ["--out", str(tmp_path / "out" / "2")]
    init = ["--init", str(init_artifact)]
    wrong = error_of(["--collection", "layout", *data, *out, *init])
    assert "is a tile model, not layout" in wrong
    missing = tmp_path / "nowhere" / "1"
    gone = error_of(["--collection", "tile", *data, *out, "--init", str(missing)])
    assert "no such artifact directory" in gone
    clash = error_of(["--collection", "tile", *data, *out, *init, "--hidden", "32"])
    assert "--hidden 32 (it has 16)" in clash
    same = error_of(["--collection", "tile", *data, "--out", str(init_artifact), *init])
    assert "is the --init artifact" in same
    # A flag that agrees with the artifact is fine; so is leaving it out.
    start = load_init(init_artifact)
    assert architecture(start, hidden=16, layers=None) == start.config


def test_the_api_refuses_another_architecture(
    init_artifact: Path, planted: dict[str, list[Path]], tmp_path: Path
) -> None:
    cfg = tiny_config("tile", epochs=1)
    cfg.model.layers = 3
    with pytest.raises(InitError, match=r"--layers 3 \(it has 2\)"):
        finetune(init_artifact, planted["train"], [], cfg, tmp_path / "2")
    with pytest.raises(InitError, match="no such artifact directory"):
        load_init(tmp_path / "missing")
