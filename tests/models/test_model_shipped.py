"""The shipped artifacts in the repo load as the service loads them, and their shipped
PyTorch checkpoints are the same models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xla_costmodel.manifest import list_versions, read_manifest
from xla_costmodel.runner import ArtifactRunner
from xla_costmodel.tpugraphs.collections import get
from xla_costmodel.tpugraphs.reader import file_graph, load_npz

ARTIFACTS = Path(__file__).resolve().parents[2] / "models" / "artifacts"
CHECKPOINTS = ARTIFACTS.parent / "checkpoints"
REPO = ARTIFACTS.parents[1]  # the manifests' data paths are relative to it
SAMPLE = {
    "tile": "pb/official_testdata/op_tuning_data.converted/fusion.191_4ae805e53b8d2b8a.npz",
    "layout": "npz/layout/xla/default/valid/unet_3d.4x4.bf16.npz",
}
# xla_cpu's data is the project's own, committed in the repository.
XLA_CPU_DATA = REPO / "datasets" / "xla_cpu"
XLA_CPU_SAMPLE = XLA_CPU_DATA / "cpu-amd-25.1-avx2" / "mlp_4x2048_b32.npz"
SHIPPED = ["tile", "layout", "xla_cpu"]


def sample_path(name: str, shared_data: Path) -> Path:
    return XLA_CPU_SAMPLE if name == "xla_cpu" else shared_data / SAMPLE[name]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_artifact_loads_and_scores(name: str, shared_data: Path) -> None:
    versions = list_versions(ARTIFACTS, name)
    assert versions, f"no shipped {name} artifact"
    artifact = ARTIFACTS / name / versions[-1]
    manifest = read_manifest(artifact)
    assert manifest.collection == name and manifest.opset >= 17
    assert set(get(name).metrics.keys) <= set(manifest.metrics["mean"])
    assert manifest.training["configs_after_dedup"] > 0
    size = sum(f.stat().st_size for f in artifact.iterdir())
    assert size < 3_000_000
    runner = ArtifactRunner(artifact)
    sample = load_npz(sample_path(name, shared_data))
    scores = runner.score(runner.encode(sample.graph), sample.configs[:50])
    assert scores.shape == (50,) and np.isfinite(scores).all()


def test_shipped_tile_model_trains_on_every_kernel_and_reports_cross_validation() -> (
    None
):
    manifest = read_manifest(ARTIFACTS / "tile" / "1")
    trained = {Path(f).name for f in manifest.training["data_files"]}
    scored = {row["graph"] for row in manifest.metrics["graphs"]}
    assert manifest.metrics["validation"]["method"] == "leave-one-kernel-out"
    assert manifest.training["valid_files"] == []  # no early stopping on its own data
    assert "fusion.191_4ae805e53b8d2b8a" in scored and len(scored) == 7
    assert {f"{g}.npz" for g in scored} <= trained


def test_shipped_layout_model_never_trains_on_its_validation_graph(
    shared_data: Path,
) -> None:
    manifest = read_manifest(ARTIFACTS / "layout" / "1")
    valid = {Path(f).name for f in manifest.metrics["validation"]["files"]}
    assert valid == {Path(SAMPLE["layout"]).name}
    # By graph, not file name: the converted module_tuning_data_layout is this graph too.
    valid_ids = {file_graph(shared_data / SAMPLE["layout"])[0]}
    converted = "pb/official_testdata/module_tuning_data_layout.converted.npz"
    assert file_graph(shared_data / converted)[0] in valid_ids
    trained = [file_graph(REPO / f)[0] for f in manifest.training["data_files"]]
    assert trained and not valid_ids & set(trained)
    assert manifest.training["train_config"]["early_stopping"] is False


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_checkpoint_is_the_artifacts_model(
    name: str, shared_data: Path
) -> None:
    """``models/checkpoints/<name>/<version>`` loads as plain data (weights_only) and
    scores like the served ONNX artifact of the same version."""
    import torch

    from xla_costmodel.models.checkpoint import CHECKPOINT, load_checkpoint
    from xla_costmodel.models.train import graph_tensors

    version = list_versions(ARTIFACTS, name)[-1]
    path = CHECKPOINTS / name / version / CHECKPOINT
    assert path.stat().st_size < 1_000_000
    model = load_checkpoint(path).model  # torch.load(weights_only=True)
    runner = ArtifactRunner(ARTIFACTS / name / version)
    sample = load_npz(sample_path(name, shared_data))
    configs = sample.configs[:64]
    with torch.no_grad():
        want = model(graph_tensors(sample.graph), torch.from_numpy(configs)).numpy()
    got = runner.score(runner.encode(sample.graph), configs)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_shipped_xla_cpu_model_names_its_cpus_and_holds_out_families_and_targets() -> (
    None
):
    """Trained on every collected program of every target (CPU), with metrics from
    cross-validation leaving families and targets out, every target listed, and
    per-target knowledge seeds shipped beside it."""
    import json

    from xla_costmodel.models.xla_cpu_programs import sidecar_target
    from xla_costmodel.tpugraphs.knowledge import load_seeds

    manifest = read_manifest(ARTIFACTS / "xla_cpu" / "1")
    folders = sorted(d for d in XLA_CPU_DATA.iterdir() if d.is_dir())
    ok = {}
    for folder in folders:
        for p in folder.glob("*.json"):
            side = json.loads(p.read_text())
            if side["status"] == "ok":
                ok[sidecar_target(folder), side["name"]] = side
    trained = {
        (Path(f).parent.name, Path(f).stem) for f in manifest.training["data_files"]
    }
    assert trained == {(f.name, n) for f in folders for (t, n) in ok if t == f.name}
    targets = sorted({t for t, _ in ok})
    assert manifest.targets == targets and manifest.target in targets
    assert all(t.startswith("cpu-") for t in targets)
    assert manifest.knowledge is not None
    seeds = load_seeds(ARTIFACTS / "xla_cpu" / "1" / manifest.knowledge.file)
    assert {t: len(r) for t, r in seeds.items()} == manifest.knowledge.programs
    assert sum(manifest.knowledge.programs.values()) == len(ok)
    validation = manifest.metrics["validation"]
    families = {s["family"] for s in ok.values()}
    assert validation["method"] == "leave-families-out"
    assert set(validation["families"]) == set(validation["fixed"]) == families
    assert {(r["target"], r["graph"]) for r in manifest.metrics["graphs"]} == set(ok)
    assert set(manifest.metrics["targets_left_out"]) == set(targets)
