"""Export contract: onnx.checker, then onnxruntime (as served) vs PyTorch on real graphs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from modelkit import FUSION_191, NLP_TEST, UNET_VALID

from xla_costmodel.manifest import read_manifest
from xla_costmodel.models.data import SIGNED_NODE_COLUMNS
from xla_costmodel.models.train import graph_tensors
from xla_costmodel.runner import ArtifactRunner
from xla_costmodel.tpugraphs.arrays import make_graph
from xla_costmodel.tpugraphs.reader import load_npz

RTOL, ATOL = 1e-3, 1e-4


def torch_outputs(model, graph, configs):  # type: ignore[no-untyped-def]
    with torch.no_grad():
        emb = model.encode(graph_tensors(graph))
        scores = model.scorer(*emb, torch.from_numpy(configs))
    return [e.numpy() for e in emb], scores.numpy()


def check_same(
    result, artifact: Path, path: Path, n_configs: int | None = None
) -> None:  # type: ignore[no-untyped-def]
    sample = load_npz(path)
    configs = sample.configs if n_configs is None else sample.configs[:n_configs]
    runner = ArtifactRunner(artifact)
    emb = runner.encode(sample.graph)
    want_emb, want_scores = torch_outputs(result.model, sample.graph, configs)
    for name, want in zip(runner.embedding_names, want_emb, strict=True):
        np.testing.assert_allclose(emb[name], want, rtol=RTOL, atol=ATOL, err_msg=name)
    np.testing.assert_allclose(
        runner.score(emb, configs), want_scores, rtol=RTOL, atol=ATOL
    )


@pytest.mark.parametrize("which", ["tile", "layout"])
def test_onnx_files_pass_the_checker_and_manifest_validates(which, request) -> None:  # type: ignore[no-untyped-def]
    _, artifact = request.getfixturevalue(f"{which}_artifact")
    for f in ("encoder.onnx", "scorer.onnx"):
        model = onnx.load(artifact / f)
        onnx.checker.check_model(model, full_check=True)
        assert model.opset_import[0].version >= 17
    manifest = read_manifest(artifact)
    assert manifest.collection == which and manifest.name == which
    assert manifest.version == artifact.name
    assert manifest.training["configs_after_dedup"] > 0
    assert set(manifest.metrics["mean"]) and manifest.metrics["baselines"]["random"]
    raw = json.loads((artifact / "manifest.json").read_text())
    dims = [
        d
        for spec in raw["scorer"]["inputs"]
        for d in spec["shape"]
        if isinstance(d, str)
    ]
    assert "num_configs" in dims


def test_tile_onnxruntime_matches_pytorch_on_a_real_kernel(
    tile_artifact, shared_data
) -> None:  # type: ignore[no-untyped-def]
    check_same(*tile_artifact, shared_data / FUSION_191)


def test_layout_onnxruntime_matches_pytorch_on_unet(
    layout_artifact, shared_data
) -> None:  # type: ignore[no-untyped-def]
    check_same(*layout_artifact, shared_data / UNET_VALID)


def test_layout_matches_pytorch_on_the_21918_node_nlp_graph(
    layout_artifact, shared_data
) -> None:  # type: ignore[no-untyped-def]
    check_same(*layout_artifact, shared_data / NLP_TEST, n_configs=40)


def test_negative_paddings_encode_like_pytorch(layout_artifact, shared_data) -> None:  # type: ignore[no-untyped-def]
    """Padding columns may be negative (a pad that crops): the exported signed log
    matches PyTorch's on them too."""
    result, artifact = layout_artifact
    assert result.model.encoder.gnn.node_in.signed_cols.numel() > 0
    sample = load_npz(shared_data / UNET_VALID)
    feat = sample.graph.node_feat.copy()
    feat[::2, list(SIGNED_NODE_COLUMNS)] *= -1.0
    assert (feat < 0).any()
    graph = dataclasses.replace(sample.graph, node_feat=feat)
    runner = ArtifactRunner(artifact)
    emb = runner.encode(graph)
    want, _ = torch_outputs(result.model, graph, sample.configs[:2])
    for name, value in zip(runner.embedding_names, want, strict=True):
        np.testing.assert_allclose(emb[name], value, rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("which", ["tile", "layout"])
def test_scores_do_not_depend_on_the_rest_of_the_batch(
    which, request, shared_data
) -> None:  # type: ignore[no-untyped-def]
    _, artifact = request.getfixturevalue(f"{which}_artifact")
    sample = load_npz(shared_data / (FUSION_191 if which == "tile" else UNET_VALID))
    runner = ArtifactRunner(artifact)
    emb = runner.encode(sample.graph)
    full = runner.score(emb, sample.configs[:64])
    alone = np.concatenate(
        [runner.score(emb, sample.configs[i : i + 1]) for i in range(64)]
    )
    shuffled = runner.score(emb, sample.configs[:64][::-1])[::-1]
    np.testing.assert_allclose(alone, full, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(shuffled, full, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("which", ["tile", "layout"])
def test_a_single_node_graph_without_edges_runs(which, request) -> None:  # type: ignore[no-untyped-def]
    _, artifact = request.getfixturevalue(f"{which}_artifact")
    runner = ArtifactRunner(artifact)
    ids = np.array([0]) if which == "layout" else None
    graph = make_graph(
        np.ones((1, 140), np.float32), np.array([63]), np.zeros((0, 2)), ids
    )
    emb = runner.encode(graph)
    configs = np.zeros((3, 24) if which == "tile" else (3, 1, 18), np.float32)
    scores = runner.score(emb, configs)
    assert scores.shape == (3,) and np.isfinite(scores).all()


def test_metrics_selected_on_by_early_stopping_are_labelled_so(tile_artifact) -> None:  # type: ignore[no-untyped-def]
    """The tile fixture early-stops on its validation kernel, then reports on it."""
    result, out = tile_artifact
    metrics = read_manifest(out).metrics
    assert result.summary["epoch_selected_on_validation"] is True
    assert metrics["split"] == "validation (selected on)"
    assert "optimistic" in metrics["note"]
