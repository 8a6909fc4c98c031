"""``costmodel dataset export``: stored measurements -> TpuGraphs files -> training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from storekit import batch, gid
from typer.testing import CliRunner

from xla_costmodel.dataset import export
from xla_costmodel.models.synthetic import (
    make_layout_arrays,
    make_tile_arrays,
    make_xla_cpu_arrays,
)
from xla_costmodel.service.store import MeasurementStore, default_sqlite_url
from xla_costmodel.tpugraphs.reader import load_npz

GRAPH_KEYS = (
    "node_feat",
    "node_opcode",
    "edge_index",
    "node_config_ids",
    "node_splits",
)


def run_export(*args: str) -> Any:
    app = typer.Typer()
    app.command()(export)
    return CliRunner().invoke(app, list(args))


def import_file(store: MeasurementStore, arrays: dict[str, Any], **kw: Any) -> str:
    graph = {k: arrays[k] for k in GRAPH_KEYS if k in arrays}
    layout = "node_config_ids" in graph
    graph_id = gid(graph)
    store.save_graph(graph_id, "layout" if layout else "tile", graph)
    configs = arrays["node_config_feat" if layout else "config_feat"]
    if layout:
        configs = configs.astype(np.int8)  # what the service stores for layout
    store.add_measurements(
        batch(
            graph_id,
            configs,
            source="import",
            runtimes_ns=arrays["config_runtime"],
            **kw,
        )
    )
    return graph_id


@pytest.fixture
def database(tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """A SQLite store holding 3 tile kernels and a layout graph on two targets."""
    url = default_sqlite_url(tmp_path / "data")
    store = MeasurementStore.open(url)
    tiles = [make_tile_arrays(num_nodes=10, num_configs=30, seed=s) for s in range(3)]
    ids = [import_file(store, arrays) for arrays in tiles]
    # Config 0 of the first kernel measured twice more: the file has its median.
    first = tiles[0]
    again = np.array([first["config_runtime"][0] * 3, first["config_runtime"][0] * 5])
    store.add_measurements(
        batch(ids[0], first["config_feat"][[0, 0]], runtimes_ns=again)
    )
    layout = make_layout_arrays(num_nodes=20, num_configs=12, num_configurable=4)
    layout_id = import_file(store, layout)
    import_file(store, layout, target="tpu-v4")
    store.close()
    return url, {
        "tiles": tiles,
        "tile_ids": ids,
        "layout": layout,
        "layout_id": layout_id,
    }


def test_export_writes_files_the_reader_and_trainer_accept(
    database: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    url, data = database
    out = tmp_path / "dataset"
    result = run_export("--out", str(out), "--database-url", url)
    assert result.exit_code == 0, result.output
    assert "measurements" in result.output
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.npz"))
    expected = [f"tile/tpu-v3/{g}.npz" for g in data["tile_ids"]] + [
        f"layout/{t}/{data['layout_id']}.npz" for t in ("tpu-v3", "tpu-v4")
    ]
    assert files == sorted(expected)

    tile = load_npz(out / "tile" / "tpu-v3" / f"{data['tile_ids'][0]}.npz")
    source = data["tiles"][0]
    np.testing.assert_array_equal(tile.configs, source["config_feat"])
    expected_rt = source["config_runtime"].copy()
    expected_rt[0] *= 3  # median of (1, 3, 5) x runtime
    np.testing.assert_array_equal(tile.runtimes, expected_rt)
    assert tile.normalizers is not None
    assert (tile.normalizers == expected_rt.min()).all()
    assert tile.graph.num_nodes == source["node_feat"].shape[0]

    layout = load_npz(out / "layout" / "tpu-v4" / f"{data['layout_id']}.npz")
    src = data["layout"]
    np.testing.assert_array_equal(layout.configs, src["node_config_feat"])
    np.testing.assert_array_equal(layout.runtimes, src["config_runtime"])
    np.testing.assert_array_equal(layout.graph.node_config_ids, src["node_config_ids"])
    np.testing.assert_array_equal(layout.graph.node_splits, src["node_splits"][0])
    with np.load(out / "layout" / "tpu-v4" / f"{data['layout_id']}.npz") as raw:
        assert raw["node_splits"].shape == (1, 4)  # the files' [1,S]
        assert raw["node_config_feat"].dtype == np.float32

    from xla_costmodel.models.network import ModelConfig
    from xla_costmodel.models.train import TrainConfig, fit

    tiles = sorted((out / "tile").rglob("*.npz"))
    model = ModelConfig("tile", hidden=16, layers=2, embed=16, scorer_hidden=8)
    cfg = TrainConfig(
        "tile", epochs=1, model=model, batch_configs=16, max_steps_per_graph=2
    )
    trained = fit(tiles[:2], tiles[2:], cfg, tmp_path / "run")
    assert trained.summary["epochs_run"] == 1


def test_xla_cpu_measurements_export_as_xla_cpu_files(tmp_path: Path) -> None:
    """The file gets the collection's keys: normalisers and its config_spec."""
    url = default_sqlite_url(tmp_path / "data")
    store = MeasurementStore.open(url)
    arrays = make_xla_cpu_arrays(num_nodes=10, num_configs=8, seed=4)
    graph = {k: arrays[k] for k in GRAPH_KEYS if k in arrays}
    graph_id = gid(graph)
    store.save_graph(graph_id, "xla_cpu", graph)
    store.add_measurements(
        batch(
            graph_id,
            arrays["config_feat"].astype(np.int8),
            model="xla_cpu-m",
            collection="xla_cpu",
            runtimes_ns=arrays["config_runtime"],
        )
    )
    store.close()
    out = tmp_path / "dataset"
    result = run_export("--out", str(out), "--database-url", url)
    assert result.exit_code == 0, result.output
    sample = load_npz(out / "xla_cpu" / "tpu-v3" / f"{graph_id}.npz")
    assert sample.collection == "xla_cpu"
    np.testing.assert_array_equal(sample.configs, arrays["config_feat"])
    assert sample.normalizers is not None
    assert (sample.normalizers == arrays["config_runtime"].min()).all()


def test_export_filters_by_collection_and_target(
    database: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    url, data = database
    out = tmp_path / "dataset"
    args = ["--out", str(out), "--database-url", url]
    result = run_export(*args, "--collection", "layout", "--target", "tpu-v4")
    assert result.exit_code == 0, result.output
    assert [p.relative_to(out).as_posix() for p in out.rglob("*.npz")] == [
        f"layout/tpu-v4/{data['layout_id']}.npz"
    ]


def test_export_defaults_to_the_data_dir_and_never_creates_a_database(
    database: tuple[str, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("COSTMODEL_DATABASE_URL", raising=False)
    monkeypatch.setenv("COSTMODEL_DATA_DIR", str(tmp_path / "data"))
    result = run_export("--out", str(tmp_path / "a"), "--target", "tpu-v4")
    assert result.exit_code == 0, result.output
    assert len(list((tmp_path / "a").rglob("*.npz"))) == 1

    monkeypatch.setenv("COSTMODEL_DATA_DIR", str(tmp_path / "empty"))
    result = run_export("--out", str(tmp_path / "b"))
    assert result.exit_code == 1
    assert "no database at" in result.output
    assert not (tmp_path / "empty").exists()


def test_the_command_is_registered() -> None:
    from xla_costmodel.cli import GROUPS

    assert GROUPS["dataset"][1] == {
        "export": ("xla_costmodel.dataset:export", "service")
    }


def test_export_pools_writers_and_selects_them(tmp_path: Path) -> None:
    """A config's runtime is the median of per-writer medians: one writer's flood of
    rows is one vote; ``--writer`` and ``--exclude-writer`` repeat, and
    ``anonymous`` names the rows stored without a writer."""
    url = default_sqlite_url(tmp_path / "data")
    store = MeasurementStore.open(url)
    arrays = make_tile_arrays(num_nodes=10, num_configs=2, seed=0)
    arrays["config_runtime"] = np.array([1000, 2000], np.int64)
    graph_id = import_file(store, arrays)  # anonymous
    configs = arrays["config_feat"]
    one = configs[[0]]
    for writer, runtimes in (("a", [3000]), ("b", [5000]), ("flood", [9000] * 50)):
        rows = np.repeat(one, len(runtimes), axis=0)
        store.add_measurements(
            batch(graph_id, rows, runtimes_ns=np.array(runtimes), writer=writer)
        )
    store.close()

    def runtime(*args: str) -> list[int]:
        out = tmp_path / "out" / "-".join(args).replace("@", "")
        result = run_export("--out", str(out), "--database-url", url, *args)
        assert result.exit_code == 0, result.output
        files = list(out.rglob("*.npz"))
        if not files:
            return []
        with np.load(files[0]) as z:
            return [int(x) for x in z["config_runtime"]]

    # Config 0 by writer: anonymous 1000, a 3000, b 5000, flood 50 x 9000.
    assert runtime() == [4000, 2000]  # median of 1000, 3000, 5000, 9000
    assert runtime("--exclude-writer", "flood") == [3000, 2000]
    assert runtime("--writer", "a", "--writer", "b") == [4000]
    assert runtime("--writer", "anonymous") == [1000, 2000]
    assert runtime("--exclude-writer", "anonymous", "--exclude-writer", "a") == [7000]
    assert runtime("--writer", "nobody") == []
