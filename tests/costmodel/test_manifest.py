"""The artifact contract refuses manifests the service could not wire up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xla_costmodel.manifest import (
    ArtifactError,
    GraphSpec,
    Manifest,
    TensorSpec,
    list_versions,
    read_manifest,
    sha256_file,
    write_manifest,
)
from xla_costmodel.tpugraphs import xla_cpu2


def _spec(name: str, shape: list[int | str], dtype: str = "float32") -> TensorSpec:
    return TensorSpec(name=name, dtype=dtype, shape=shape)  # type: ignore[arg-type]


def _manifest(
    tmp_path: Path, scorer_inputs: list[TensorSpec] | None = None
) -> Manifest:
    for f in ("encoder.onnx", "scorer.onnx"):
        (tmp_path / f).write_bytes(f.encode())
    emb = _spec("graph_embedding", [8])
    return Manifest(
        name="tile",
        collection="tile",
        version="3",
        target="tpu-v3",
        created="2026-11-22T00:00:00Z",
        opset=18,
        feature_dims={"node_feat": 140},
        encoder=GraphSpec(
            file="encoder.onnx",
            sha256=sha256_file(tmp_path / "encoder.onnx"),
            inputs=[_spec("node_feat", ["num_nodes", 140])],
            outputs=[emb],
        ),
        scorer=GraphSpec(
            file="scorer.onnx",
            sha256=sha256_file(tmp_path / "scorer.onnx"),
            inputs=scorer_inputs or [emb, _spec("config_feat", ["num_configs", 24])],
            outputs=[_spec("scores", ["num_configs"])],
        ),
    )


def test_roundtrip(tmp_path: Path) -> None:
    write_manifest(tmp_path, _manifest(tmp_path))
    m = read_manifest(tmp_path)
    assert m.version == "3" and m.config_input.name == "config_feat"
    assert [s.name for s in m.embedding_specs] == ["graph_embedding"]


def test_tampered_onnx_is_refused(tmp_path: Path) -> None:
    write_manifest(tmp_path, _manifest(tmp_path))
    (tmp_path / "scorer.onnx").write_bytes(b"tampered")
    with pytest.raises(ArtifactError, match="sha256"):
        read_manifest(tmp_path)


def test_scorer_must_take_encoder_outputs(tmp_path: Path) -> None:
    bad = [_spec("graph_embedding", [16]), _spec("config_feat", ["num_configs", 24])]
    write_manifest(tmp_path, _manifest(tmp_path, bad))
    with pytest.raises(ArtifactError, match="encoder output 'graph_embedding'"):
        read_manifest(tmp_path)


def test_scorer_needs_its_config_input(tmp_path: Path) -> None:
    bad = [_spec("graph_embedding", [8]), _spec("node_config_feat", ["c", "n", 18])]
    write_manifest(tmp_path, _manifest(tmp_path, bad))
    with pytest.raises(ArtifactError, match="'config_feat'"):
        read_manifest(tmp_path)


def test_the_config_input_has_its_collections_width(tmp_path: Path) -> None:
    """xla_cpu takes config_feat too, with its own width: a tile-wide one is refused."""
    manifest = _manifest(tmp_path).model_copy(update={"collection": "xla_cpu"})
    write_manifest(tmp_path, manifest)
    with pytest.raises(ArtifactError, match=r"ends in \[24\], a xla_cpu config row"):
        read_manifest(tmp_path)
    widths = [
        _spec("graph_embedding", [8]),
        _spec("config_feat", ["c", xla_cpu2.WIDTH]),
    ]
    right = _manifest(tmp_path, widths).model_copy(update={"collection": "xla_cpu"})
    write_manifest(tmp_path, right)
    assert read_manifest(tmp_path).spec.width == xla_cpu2.WIDTH


def test_unknown_fields_and_missing_manifest(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="missing"):
        read_manifest(tmp_path)
    data = _manifest(tmp_path).model_dump(mode="json") | {"surprise": 1}
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match="surprise"):
        read_manifest(tmp_path)


def test_versions_sort_numerically(tmp_path: Path) -> None:
    for v in ("2", "10", "1", "tmp"):
        (tmp_path / "tile" / v).mkdir(parents=True)
    assert list_versions(tmp_path, "tile") == ["1", "2", "10"]
    assert list_versions(tmp_path, "layout") == []


def test_version_folders_are_ascii_digits(tmp_path: Path) -> None:
    # str.isdigit() took these; int() then failed on "²" (a 500 at load or reload).
    for v in ("3", "²", "١٢", "4 ", "+5", "007"):
        (tmp_path / "tile" / v).mkdir(parents=True)
    (tmp_path / "tile" / "9").write_text("a file, not a version")
    assert list_versions(tmp_path, "tile") == ["3", "007"]


@pytest.mark.parametrize(
    "file", ["../scorer.onnx", "/etc/passwd", "sub/encoder.onnx", "..", ".", "a b"]
)
def test_manifest_files_are_plain_names_inside_the_artifact(
    tmp_path: Path, file: str
) -> None:
    data = _manifest(tmp_path).model_dump(mode="json")
    data["encoder"]["file"] = file
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ArtifactError):
        read_manifest(tmp_path, verify_files=False)


def test_a_manifest_file_may_not_link_out_of_the_artifact(tmp_path: Path) -> None:
    artifact = tmp_path / "tile" / "3"
    artifact.mkdir(parents=True)
    write_manifest(artifact, _manifest(artifact))
    outside = tmp_path / "elsewhere.onnx"
    outside.write_bytes((artifact / "encoder.onnx").read_bytes())
    (artifact / "encoder.onnx").unlink()
    (artifact / "encoder.onnx").symlink_to(outside)  # same bytes, same sha256
    with pytest.raises(ArtifactError, match="not inside"):
        read_manifest(artifact)
