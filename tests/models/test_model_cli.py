"""CLI smoke: train a tiny model on a synthetic dataset tree, evaluate --json, export."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from xla_costmodel.manifest import read_manifest
from xla_costmodel.models import cli
from xla_costmodel.models.synthetic import write_tree
from xla_costmodel.tpugraphs.metrics import LAYOUT_KEYS, TILE_KEYS


def app() -> typer.Typer:
    """The three commands as ``xla_costmodel.cli`` registers them."""
    application = typer.Typer()
    for name in ("train", "evaluate", "export"):
        application.command(name)(getattr(cli, name))
    return application


def test_train_evaluate_export_on_a_dataset_tree(tmp_path: Path) -> None:
    root = tmp_path / "dataset"
    write_tree(root, "tile", "train", 4, seed=0, num_nodes=12, num_configs=30)
    write_tree(root, "tile", "valid", 2, seed=1, num_nodes=12, num_configs=30)
    write_tree(root, "layout", "train", 1, seed=0, num_nodes=20, num_configs=20)
    runner = CliRunner()
    out = tmp_path / "artifacts" / "tile" / "2"
    result = runner.invoke(
        app(),
        [
            "train",
            "--collection",
            "tile",
            "--data",
            str(root / "npz"),
            "--valid",
            str(root / "npz/tile/xla/valid"),
            "--out",
            str(out),
            "--epochs",
            "2",
            "--seed",
            "1",
            "--hidden",
            "8",
            "--layers",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    manifest = read_manifest(out)
    assert (manifest.name, manifest.version, manifest.training["seed"]) == (
        "tile",
        "2",
        1,
    )
    # the layout file in the --data tree is skipped; the valid files are not trained on
    assert all("/tile/xla/" in f for f in manifest.training["data_files"])
    training = manifest.training
    assert training["data_files"] and len(training["valid_files"]) == 2
    assert not set(training["data_files"]) & set(training["valid_files"])
    assert (out / "train_log.jsonl").read_text().count("\n") == 2

    result = runner.invoke(
        app(),
        [
            "evaluate",
            "--model",
            str(out),
            "--data",
            str(root / "npz/tile/xla/valid"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["collection"] == "tile" and report["model_version"] == "2"
    assert len(report["graphs"]) == 2
    for part in (
        report["mean"],
        report["baselines"]["random"],
        report["baselines"]["default"],
    ):
        assert set(TILE_KEYS) <= set(part)

    again = tmp_path / "exported" / "5"
    result = runner.invoke(
        app(),
        ["export", "--checkpoint", str(out / "checkpoint.pt"), "--out", str(again)],
    )
    assert result.exit_code == 0, result.output
    assert read_manifest(again).version == "5"


def test_layout_report_has_every_key_and_a_null_default(
    tmp_path: Path, shared_data: Path
) -> None:
    from modelkit import UNET_VALID, tiny_config

    from xla_costmodel.models.evaluate import evaluate_artifact
    from xla_costmodel.models.export import export_artifact
    from xla_costmodel.models.train import fit

    files = write_tree(
        tmp_path, "layout", "train", 2, seed=0, num_nodes=20, num_configs=20
    )
    out = tmp_path / "layout" / "1"
    export_artifact(fit(files, [], tiny_config("layout", epochs=1), out), out)
    test_file = shared_data / "npz/layout/xla/default/test"
    notes: list[str] = []
    report = evaluate_artifact(
        out, [shared_data / UNET_VALID, test_file], note=notes.append
    )
    assert report["graphs"][0]["config_set"] == "eval_indices"
    assert report["graphs"][0]["num_configs"] == 1000
    assert set(LAYOUT_KEYS) <= set(report["mean"])
    assert report["baselines"]["default"]["kendall_tau"] is None
    assert report["baselines"]["default"]["reason"]
    assert report["skipped"] and notes  # the unlabelled test file
    json.dumps(report, allow_nan=False)


def test_train_skips_copies_of_validation_graphs_elsewhere_in_data(
    tmp_path: Path,
) -> None:
    """A validation graph copied under another name in --data is caught by graph id."""
    root = tmp_path / "dataset"
    write_tree(root, "tile", "train", 3, seed=0, num_nodes=12, num_configs=30)
    valid = write_tree(root, "tile", "valid", 1, seed=1, num_nodes=12, num_configs=30)
    copy = root / "npz/tile/xla/train/renamed_copy.npz"
    copy.write_bytes(valid[0].read_bytes())
    out = tmp_path / "artifacts" / "tile" / "1"
    result = CliRunner().invoke(
        app(),
        [
            "train",
            "--collection",
            "tile",
            "--data",
            str(root / "npz"),
            "--valid",
            str(valid[0]),
            "--out",
            str(out),
            "--epochs",
            "1",
            "--hidden",
            "8",
            "--layers",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    data_files = read_manifest(out).training["data_files"]
    assert len(data_files) == 3
    assert str(copy) not in data_files and str(valid[0]) not in data_files


def test_train_xla_cpu_from_a_mixed_tree(tmp_path: Path) -> None:
    """``--collection xla_cpu`` picks its files by their config_spec, the others (tile:
    the same config key) are skipped; choices come from the registry."""
    root = tmp_path / "dataset"
    write_tree(root, "xla_cpu", "train", 3, seed=0, num_nodes=12, num_configs=30)
    write_tree(root, "xla_cpu", "valid", 1, seed=1, num_nodes=12, num_configs=30)
    write_tree(root, "tile", "train", 2, seed=0, num_nodes=12, num_configs=30)
    out = tmp_path / "artifacts" / "xla_cpu" / "1"
    result = CliRunner().invoke(
        app(),
        [
            "train",
            "--collection",
            "xla_cpu",
            "--data",
            str(root / "npz"),
            "--valid",
            str(root / "npz/xla_cpu/valid"),
            "--out",
            str(out),
            "--epochs",
            "1",
            "--hidden",
            "8",
            "--layers",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    manifest = read_manifest(out)
    assert (manifest.name, manifest.collection) == ("xla_cpu", "xla_cpu")
    assert len(manifest.training["data_files"]) == 3
    assert all("/xla_cpu/train/" in f for f in manifest.training["data_files"])
    assert {"kendall_tau", *TILE_KEYS} <= set(manifest.metrics["mean"])
    bad = CliRunner().invoke(
        app(), ["train", "--collection", "gpu", "--data", "x", "--out", str(out)]
    )
    assert bad.exit_code == 2 and "xla_cpu" in bad.output
