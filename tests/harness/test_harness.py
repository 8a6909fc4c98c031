"""The process managers every layer starts servers with (``xla_costmodel.harness``):
real processes on free ports, restarts on the same port, and artifact copies."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xla_costmodel.harness import (
    ManagedProcess,
    PostgresServer,
    ProcessError,
    RedisServer,
    add_version,
)

REPO = Path(__file__).resolve().parents[2]


def test_the_harness_imports_only_the_standard_library() -> None:
    """The base install can import it: psycopg waits for the PostgreSQL probe."""
    code = (
        "import sys; before = set(sys.modules); import xla_costmodel.harness; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "print(sorted(new - set(sys.stdlib_module_names)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "['xla_costmodel']"


def test_redis_process_starts_answers_and_stops(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as redis:
        pid = redis.pid
        assert redis.ready() and redis.dbsize() == 0
        redis.flushall()
    assert not redis.running and not Path(f"/proc/{pid}").exists()


def test_a_restart_keeps_the_port(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as redis:
        url = redis.url
        redis.kill()
        assert not redis.ready()
        redis.start()
        assert redis.url == url and redis.ready()


def test_a_process_that_cannot_start_is_reported_with_its_log(tmp_path: Path) -> None:
    class Broken(ManagedProcess):
        name = "broken"

        def command(self) -> list[str]:
            return ["sh", "-c", "echo cannot bind >&2; exit 3"]

        def ready(self) -> bool:
            return False

    with pytest.raises(ProcessError, match="cannot bind"):
        Broken(tmp_path).start()


def test_postgres_survives_a_shutdown_and_stop_removes_the_cluster(
    tmp_path: Path,
) -> None:
    pg = PostgresServer(tmp_path)
    with pg:
        name = pg.create_database()
        pg.shutdown()
        assert not pg.running and pg.root is not None
        pg.start()
        pg.drop_database(name)  # the database outlived the outage
        root = pg.root
    assert root is not None and pg.root is None and not root.exists()


@pytest.mark.parametrize("corrupt", [None, "truncate", "sha256"])
def test_add_version_copies_an_artifact_under_a_new_version(
    tmp_path: Path, corrupt: str | None
) -> None:
    shutil.copytree(
        REPO / "models" / "artifacts" / "tile" / "1", tmp_path / "tile" / "1"
    )
    target = add_version(tmp_path, "tile", "7", corrupt=corrupt)  # type: ignore[arg-type]
    manifest = json.loads((target / "manifest.json").read_text())
    original = tmp_path / "tile" / "1"
    assert manifest["version"] == "7"
    encoder = (target / "encoder.onnx").stat().st_size
    assert (encoder < (original / "encoder.onnx").stat().st_size) == (
        corrupt == "truncate"
    )
    assert (manifest["scorer"]["sha256"] == "0" * 64) == (corrupt == "sha256")
