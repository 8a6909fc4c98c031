"""The whole learning loop through real processes: an autotuner's feedback lands in
the database, is exported as TpuGraphs files, fine-tunes the served model into a new
version, and the running service reloads it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
from servicekit import ADMIN, REPO

from xla_costmodel.clients import CostModelClient
from xla_costmodel.harness import ServiceServer
from xla_costmodel.tpugraphs.reader import load_npz

KERNELS = [
    "pb/official_testdata/op_tuning_data.converted/fusion.191_4ae805e53b8d2b8a.npz",
    "pb/official_testdata/op_tuning_data.converted/fusion.205_11d55dfd21d1a19c.npz",
    "pb/official_testdata/op_tuning_data.converted/fusion.207_4f37352569503a80.npz",
]


def costmodel(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from xla_costmodel.cli import main; main()", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_feedback_export_finetune_reload(
    service_process: ServiceServer,
    model_dir: Path,
    tmp_path: Path,
    shared_data: Path,
) -> None:
    db = f"sqlite:///{tmp_path / 'data' / 'costmodel.db'}"
    distinct = []
    with CostModelClient(service_process.url) as client:
        for i, name in enumerate(KERNELS):
            sample = load_npz(shared_data / name)
            picks = np.random.default_rng(i).permutation(sample.num_configs)[:12]
            result = client.rank("tile", sample, sample.configs)
            assert result.model_version == "1"
            stored = client.feedback(
                "tile", sample, sample.runtimes[picks], configs=sample.configs[picks]
            )
            assert stored.stored == len(picks)
            distinct.append(len({c.tobytes() for c in sample.configs[picks]}))

    exported = tmp_path / "exported"
    out = costmodel("dataset", "export", "--out", str(exported), "--database-url", db)
    assert out.returncode == 0, out.stdout + out.stderr
    files = sorted((exported / "tile" / "tpu-v3").glob("*.npz"))
    assert len(files) == len(KERNELS)
    # one row per distinct measured config (repeats: the median runtime)
    assert sorted(load_npz(f).num_configs for f in files) == sorted(distinct)

    version = model_dir / "tile" / "2"
    out = costmodel(
        "train",
        "--collection",
        "tile",
        "--data",
        str(files[0].parent),
        "--init",
        str(model_dir / "tile" / "1"),
        "--out",
        str(version),
        "--epochs",
        "2",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    manifest = json.loads((version / "manifest.json").read_text())
    assert (manifest["name"], manifest["version"], manifest["target"]) == (
        "tile",
        "2",
        "tpu-v3",
    )
    assert manifest["training"]["init"]["version"] == "1"

    r = httpx.post(
        f"{service_process.url}/v1/models/tile/reload",
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=60,
    )
    assert r.status_code == 200 and r.json()["version"] == "2", r.text
    sample = load_npz(shared_data / KERNELS[0])
    with CostModelClient(service_process.url) as client:
        again = client.rank("tile", sample, sample.configs)
    assert again.model_version == "2"
    # The measurements stored while version 1 served adapt version 2's ranking too.
    picks = np.random.default_rng(0).permutation(sample.num_configs)[:12]
    assert again.adapted == len({c.tobytes() for c in sample.configs[picks]})
