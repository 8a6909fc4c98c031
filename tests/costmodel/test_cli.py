"""The ``costmodel`` command: every command is registered, and featurize works end to end."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from xla_costmodel import cli
from xla_costmodel.cli import COMMANDS, build_app
from xla_costmodel.tpugraphs.arrays import make_graph

runner = CliRunner()
COSTMODEL = (sys.executable, "-c", "from xla_costmodel.cli import main; main()")


def test_every_command_is_registered_and_documented() -> None:
    result = runner.invoke(build_app(), ["--help"])
    assert result.exit_code == 0, result.output
    for name in COMMANDS:
        assert name in result.output


def test_building_the_cli_does_not_import_torch() -> None:
    # `costmodel serve` must start on a machine without torch.
    code = (
        "import sys; from xla_costmodel.cli import build_app; build_app(); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


def test_featurize_writes_a_tpugraphs_npz(shared_data: Path, tmp_path: Path) -> None:
    hlo = shared_data / "hlo/unet_3d.4x4.bf16.hlo.txt"
    out = tmp_path / "unet.npz"
    result = runner.invoke(build_app(), ["featurize", str(hlo), "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["nodes"], summary["edges"], summary["configurable"]) == (
        3163,
        5112,
        62,
    )
    real = np.load(
        shared_data / "npz/layout/xla/default/valid/unet_3d.4x4.bf16.npz",
        allow_pickle=False,
    )
    with np.load(out, allow_pickle=False) as got:
        assert got["node_splits"].shape == (1, 8)
        for key in ("node_feat", "node_opcode", "edge_index", "node_config_ids"):
            assert np.array_equal(got[key], real[key]), key
            assert got[key].dtype == real[key].dtype, key
        make_graph(
            got["node_feat"],
            got["node_opcode"],
            got["edge_index"],
            got["node_config_ids"],
        )


def test_featurize_reports_bad_text_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.hlo.txt"
    bad.write_text("HloModule m\n\nENTRY %main () -> f32[] {\n  %x = f32[] bogus(\n}\n")
    result = runner.invoke(
        build_app(), ["featurize", str(bad), "--out", str(tmp_path / "o.npz")]
    )
    assert result.exit_code == 2
    assert "line " in result.output
    assert not (tmp_path / "o.npz").exists()


def test_a_missing_requirement_is_one_line_naming_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli, "missing", lambda extra: ["scipy"] * (extra == "simulate"))
    result = CliRunner().invoke(build_app(), ["simulate", "--quick"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "costmodel simulate needs onnxruntime, scipy: pip install "
        "'xla-costmodel[train,xla]' (--quick: pip install onnxruntime scipy)"
    ]


def test_the_full_simulation_without_torch_names_the_train_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    find_spec = importlib.util.find_spec

    def no_torch(name: str, *args: Any) -> Any:
        return None if name == "torch" else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", no_torch)
    result = CliRunner().invoke(build_app(), ["simulate"])
    assert result.exit_code == 1
    assert (
        result.output.strip()
        .splitlines()[-1]
        .startswith(
            "costmodel simulate needs the train extra for the model's prior: "
            "pip install 'xla-costmodel[train]'"
        )
    )


def test_simulate_outside_a_clone_says_what_data_it_needs(tmp_path: Path) -> None:
    """Run where there is no datasets/ (an installed package): one message naming
    the data and --data, no traceback; an empty --data folder is refused alike."""
    for argv in ([], ["--data", str(tmp_path)]):
        ran = subprocess.run(
            [*COSTMODEL, "simulate", "--quick", *argv],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
        where = (tmp_path / "datasets" / "xla_cpu" if not argv else tmp_path).resolve()
        assert ran.returncode == 1 and ran.stdout == "", ran.stdout
        assert ran.stderr.splitlines() == [
            f"error: no xla_cpu dataset at {where}",
            "costmodel simulate replays measured runtimes: pass --data DIR, one "
            "folder per CPU target of PROGRAM.npz + PROGRAM.json files as "
            "`costmodel collect --out DIR/TARGET` writes them (a clone has five in "
            "datasets/xla_cpu)",
        ]
