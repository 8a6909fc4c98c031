"""``costmodel tokens create`` refuses a revoked writer's name while measurements
still carry it (issue 27): the new holder would inherit them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from xla_costmodel.cli import build_app
from xla_costmodel.service.store import MeasurementBatch, MeasurementStore

runner = CliRunner()


def run(*argv: str) -> tuple[int, str, str]:
    result = runner.invoke(build_app(), list(argv))
    return result.exit_code, result.stdout, result.stderr


def test_a_revoked_name_with_rows_is_refused_until_they_are_purged(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'costmodel.db'}"
    assert run("tokens", "create", "tuner-a", "--database-url", url)[0] == 0
    store = MeasurementStore.open(url)
    try:
        rng = np.random.default_rng(0)
        arrays = {"node_feat": rng.random((3, 140), dtype=np.float32)}
        store.save_graph("g" * 64, "tile", arrays)
        store.add_measurements(
            MeasurementBatch(
                model="tile",
                model_version="1",
                collection="tile",
                target="tpu-v3",
                graph_id="g" * 64,
                configs=np.zeros((2, 24), np.float32),
                runtimes_ns=np.array([5, 6], np.int64),
                scores=None,
                request_id=None,
                source="feedback",
                writer="tuner-a",
            )
        )
    finally:
        store.close()
    assert run("tokens", "revoke", "tuner-a", "--database-url", url)[0] == 0
    code, out, err = run("tokens", "create", "tuner-a", "--database-url", url)
    assert code == 1 and not out
    assert "2 measurements still carry its name" in err and "purge" in err
    purged = run("measurements", "purge", "--writer", "tuner-a", "--database-url", url)
    assert purged[0] == 0
    code, out, _ = run("tokens", "create", "tuner-a", "--database-url", url)
    assert code == 0 and out.strip().startswith("cmw_")
