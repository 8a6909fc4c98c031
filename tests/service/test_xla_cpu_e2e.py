"""The xla_cpu collection end to end, through the registry alone: a tiny model trained
on synthetic xla_cpu files (``xla_cpu/2``), exported, served beside the shipped models
(in process) and by a real uvicorn process for the replay autotuner; an old client's
``xla_cpu/1`` rows are taken as their upgrades."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from servicekit import NPZ, SERVE, AppClient, npz_bytes, program

from xla_costmodel.clients import CostModelClient
from xla_costmodel.clients.replay import Budget, Replayer
from xla_costmodel.harness import ServiceServer
from xla_costmodel.service.store import MeasurementStore, default_sqlite_url
from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2
from xla_costmodel.tpugraphs.reader import load_npz

MODEL = "xla_cpu-tiny"
pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def xla_cpu_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    from xla_costmodel.models.synthetic import write_tree

    root = tmp_path_factory.mktemp("xla_cpu_data")
    return {
        "train": write_tree(root, "xla_cpu", "train", 8, seed=0, num_configs=60),
        "valid": write_tree(root, "xla_cpu", "valid", 2, seed=1, num_configs=60),
    }


@pytest.fixture(scope="module")
def artifact(
    xla_cpu_files: dict[str, list[Path]], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A tiny xla_cpu model, trained (PyTorch) and exported (ONNX + manifest)."""
    from xla_costmodel.models.export import export_artifact
    from xla_costmodel.models.network import ModelConfig
    from xla_costmodel.models.train import TrainConfig, fit

    model = ModelConfig("xla_cpu", hidden=16, layers=2, embed=16, scorer_hidden=8)
    cfg = TrainConfig("xla_cpu", epochs=3, model=model, batch_configs=32)
    out = tmp_path_factory.mktemp("xla_cpu_model") / MODEL / "1"
    result = fit(xla_cpu_files["train"], xla_cpu_files["valid"], cfg, out.parent)
    export_artifact(result, out, name=MODEL)
    return out


def test_the_artifact_declares_its_collection(artifact: Path) -> None:
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert (manifest["name"], manifest["collection"]) == (MODEL, "xla_cpu")
    config_input = [
        s for s in manifest["scorer"]["inputs"] if s["name"] == "config_feat"
    ]
    assert config_input[0]["shape"] == ["num_configs", xla_cpu2.WIDTH]
    assert [s["name"] for s in manifest["encoder"]["outputs"]] == ["graph_embedding"]
    metrics = manifest["metrics"]
    assert metrics["collection"] == "xla_cpu" and len(metrics["graphs"]) == 2
    assert {"kendall_tau", "top1_slowdown", "top10_slowdown"} <= set(metrics["mean"])
    default = metrics["baselines"]["default"]  # the files mark it (config 0)
    assert default["top1_slowdown"] is not None and "reason" not in default


async def test_served_beside_the_shipped_models(
    make_client: AppClient,
    model_dir: Path,
    artifact: Path,
    xla_cpu_files: dict[str, list[Path]],
) -> None:
    shutil.copytree(artifact, model_dir / MODEL / "1")
    client: httpx.AsyncClient = await make_client(models=["tile", "layout", MODEL])
    listed = {m["name"]: m for m in (await client.get("/v1/models")).json()["models"]}
    assert listed[MODEL]["collection"] == "xla_cpu"
    assert listed[MODEL]["config_input"]["shape"] == ["num_configs", xla_cpu2.WIDTH]

    path = xla_cpu_files["valid"][0]
    sample = load_npz(path)
    # The file as it is (config_spec and labels included) uploads and ranks.
    up = await client.put(
        f"/v1/graphs?model={MODEL}", content=path.read_bytes(), headers=NPZ
    )
    assert up.status_code == 200, up.text
    assert up.json()["configurable_nodes"] == 0
    gid = up.json()["graph_id"]
    ranked = await client.post(
        f"/v1/rank?model={MODEL}", content=path.read_bytes(), headers=NPZ
    )
    assert ranked.status_code == 200, ranked.text
    assert sorted(ranked.json()["ranking"]) == list(range(sample.num_configs))
    prior = np.array(ranked.json()["scores"])

    # Raw configs: flat option dicts, {} the default (config 0 of the file).
    raw = [{}, {xla_cpu.SCHEDULER_KEY: "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}]
    by_raw = await client.post(
        "/v1/rank", json={"model": MODEL, "graph_id": gid, "raw_configs": raw}
    )
    assert by_raw.status_code == 200, by_raw.text
    assert by_raw.json()["scores"][0] == pytest.approx(prior[0], rel=1e-5, abs=1e-6)
    bad = await client.post(
        "/v1/rank",
        json={"model": MODEL, "graph_id": gid, "raw_configs": [{"xla_nope": True}]},
    )
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "raw_configs[0]"
    wide = await client.post(
        "/v1/rank", json={"model": MODEL, "graph_id": gid, "configs": [[0.0] * 24]}
    )
    assert wide.status_code == 422
    assert f"[?,{xla_cpu2.WIDTH}]" in wide.json()["error"]["message"]

    # Feedback on 6 distinct configs, then the ranking adapts to them.
    fed = list(range(6))
    body: dict[str, Any] = {
        "model": MODEL,
        "graph_id": gid,
        "configs": sample.configs[fed].tolist(),
        "runtimes_ns": [int(r) for r in sample.runtimes[fed]],
    }
    stored = await client.post("/v1/feedback", json=body)
    assert stored.status_code == 200, stored.text
    assert stored.json()["stored"] == 6 and stored.json()["kendall_tau"] is not None
    again = await client.post(
        f"/v1/rank?model={MODEL}", content=path.read_bytes(), headers=NPZ
    )
    assert again.status_code == 200 and again.json()["adapted"] == 6


V1_ROWS = xla_cpu.sample(6, seed=11)  # row 0: the default
THRESHOLD = f"{xla_cpu2.THRESHOLD_KEY}=65536"


async def test_an_old_clients_rows_are_their_upgrades(
    make_client: AppClient, model_dir: Path, artifact: Path
) -> None:
    """xla_cpu/1 rows (17 wide, JSON or int8 npz) rank as their xla_cpu/2 upgrades
    and are stored as them; raw options may carry the extra-options map; rows of
    no spec are 422 naming the field."""
    shutil.copytree(artifact, model_dir / MODEL / "1")
    client: httpx.AsyncClient = await make_client(models=[MODEL])
    v2 = xla_cpu2.upgrade_v1_rows(V1_ROWS)
    graph = program(5)

    async def scores(body: dict[str, Any]) -> list[float]:
        r = await client.post("/v1/rank", json={"model": MODEL, **body})
        assert r.status_code == 200, r.text
        return list(r.json()["scores"])

    first = await client.post(
        "/v1/rank", json={"model": MODEL, "graph": graph, "configs": v2.tolist()}
    )
    new, gid = first.json()["scores"], first.json()["graph_id"]
    assert await scores({"graph_id": gid, "configs": V1_ROWS.tolist()}) == new
    raw = [xla_cpu2.to_options(r).flat() for r in v2]
    assert await scores({"graph_id": gid, "raw_configs": raw}) == pytest.approx(new)
    arrays = {k: np.asarray(v) for k, v in graph.items()}
    arrays["node_feat"] = arrays["node_feat"].astype(np.float32)
    npz = npz_bytes(**arrays, config_feat=V1_ROWS.astype(np.int8))
    r = await client.post(f"/v1/rank?model={MODEL}", content=npz, headers=NPZ)
    assert r.status_code == 200 and r.json()["scores"] == pytest.approx(new)
    # The map's rows are their own configs, with their own scores.
    mapped = [{xla_cpu2.EXTRA_KEY: THRESHOLD}, {}]
    assert len(await scores({"graph_id": gid, "raw_configs": mapped})) == 2

    # Feedback: a 17-wide batch, and a ranking of one picked by index, stored at 20.
    runtimes = [1000 + 10 * i for i in range(6)]
    fed = await client.post(
        "/v1/feedback",
        json={"model": MODEL, "graph_id": gid, "configs": V1_ROWS[:3].tolist()}
        | {"runtimes_ns": runtimes[:3]},
    )
    assert fed.status_code == 200, fed.text
    ranked = await client.post(
        "/v1/rank",
        json={"model": MODEL, "graph_id": gid, "configs": V1_ROWS.tolist()},
    )
    picked = await client.post(
        "/v1/feedback",
        json={"model": MODEL, "graph_id": gid, "config_indices": [3, 4, 5]}
        | {"ranking_id": ranked.json()["ranking_id"], "runtimes_ns": runtimes[3:]},
    )
    assert picked.status_code == 200, picked.text
    store = MeasurementStore.open(default_sqlite_url(model_dir.parent / "data"))
    try:
        target = next(iter(k[1] for k in store.keys("xla_cpu") if k[2] == gid))
        rows = store.measurements("xla_cpu", target, gid)
    finally:
        store.close()
    np.testing.assert_array_equal(rows.configs, v2)

    for configs, field in (
        ([[1.0] * 19], "configs"),
        ([[1.0] * 21], "configs"),
        ([[1.0] * 17, [1.0] * 20], "configs"),
    ):
        r = await client.post(
            "/v1/rank", json={"model": MODEL, "graph_id": gid, "configs": configs}
        )
        assert r.status_code == 422 and r.json()["error"]["field"] == field, r.text
    bad_raw = [{}, {xla_cpu2.EXTRA_KEY: f"{xla_cpu2.THRESHOLD_KEY}=7"}]
    r = await client.post(
        "/v1/rank", json={"model": MODEL, "graph_id": gid, "raw_configs": bad_raw}
    )
    assert r.status_code == 422 and r.json()["error"]["field"] == "raw_configs[1]"
    assert xla_cpu2.THRESHOLD_KEY in r.json()["error"]["message"]


def test_replay_plays_xla_cpu_files(
    tmp_path: Path, artifact: Path, xla_cpu_files: dict[str, list[Path]]
) -> None:
    models = tmp_path / "models"
    shutil.copytree(artifact, models / MODEL / "1")
    env = {
        "COSTMODEL_MODELS": MODEL,
        "COSTMODEL_MODEL_DIR": str(models),
        "COSTMODEL_DATA_DIR": str(tmp_path / "data"),
    }
    server = ServiceServer(tmp_path, env, argv=SERVE)
    server.start()
    try:
        with CostModelClient(server.url) as client:
            report = Replayer(client, Budget(count=4), rounds=2).run(
                xla_cpu_files["valid"]
            )
    finally:
        server.stop()
    assert not report.skipped and len(report.graphs) == 2
    for graph in report.graphs:
        assert (graph.collection, graph.model) == ("xla_cpu", MODEL)
        assert graph.feedback_stored == 8 and graph.adapted == 4  # 2 rounds of 4
        assert graph.score.speedup_vs_default is not None  # config 0, the default
        assert graph.rounds is not None and graph.rounds[-1].measured == 8
        assert graph.rounds[-1].kendall_tau_unmeasured is not None
