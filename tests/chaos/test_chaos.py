"""``costmodel chaos`` end to end with 2-second phases: a real redis-server, PostgreSQL
cluster and ``costmodel serve`` subprocess, the real client in 8 threads, real faults
(SIGSTOP, SIGKILL, a database restart, a truncated ONNX file, too many requests).

Checks the JSON's shape, that no acknowledged feedback is missing from PostgreSQL, that
every fault was felt (server counters, 503s with Retry-After, the reload answers), that
nothing answered a 500, and that no process the run started outlives it. No timing
thresholds: figures depend on the machine.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from typing import Any

import pytest

from xla_costmodel.harness import child_processes

PHASES = [
    "baseline",
    "redis_paused",
    "redis_restarted",
    "postgres_restarted",
    "model_reloaded",
    "overloaded",
    "soak",
]


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    """One run with tiny phases (the plan is the internal knob; the command line only
    offers the quick and full plans), printed as the command prints ``--json``."""
    from xla_costmodel.chaos.cli import to_json
    from xla_costmodel.chaos.harness import PLANS, run

    before = child_processes()
    out = run(replace(PLANS["quick"], phase_s=2.0, soak_s=2.0), log=lambda _: None)
    assert child_processes() <= before, "a process started by the run outlived it"
    return json.loads(to_json(out))  # type: ignore[no-any-return]


def phase(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in result["phases"] if p["name"] == name)


def test_shape(result: dict[str, Any]) -> None:
    assert [p["name"] for p in result["phases"]] == PHASES
    for p in result["phases"]:
        assert {
            "name",
            "requests",
            "errors",
            "p50_ms",
            "p99_ms",
            "503s",
            "retry_after",
        } <= p.keys()
        assert p["requests"] > 0, p
        assert 0 <= p["errors"] <= p["requests"]
        assert p["p50_ms"] is not None and p["p50_ms"] <= p["p99_ms"]
    assert isinstance(result["rss_growth"], float)
    assert result["rss"]["rss_mb_start"] > 0
    assert result["clients"] >= 8


def test_no_acknowledged_feedback_lost(result: dict[str, Any]) -> None:
    assert result["feedback_acknowledged"] > 0
    assert result["feedback_acknowledged_rows"] >= result["feedback_acknowledged"]
    assert result["feedback_lost"] == 0
    assert result["feedback_short_answers"] == 0
    assert result["checks"]["no_feedback_stored_twice"]
    # Rows may be stored whose answer the client never saw, never fewer.
    assert result["feedback_rows_in_database"] >= result["feedback_acknowledged_rows"]


def test_nothing_answered_500(result: dict[str, Any]) -> None:
    assert [p["500s"] for p in result["phases"]] == [0] * len(PHASES)
    assert [p["other_5xx"] for p in result["phases"]] == [0] * len(PHASES)


def test_redis_faults_were_felt(result: dict[str, Any]) -> None:
    for name in ("redis_paused", "redis_restarted"):
        server = phase(result, name)["server"]
        assert server["redis_errors"] + server["redis_bypassed"] > 0, name


def test_postgres_restart_was_felt(result: dict[str, Any]) -> None:
    p = phase(result, "postgres_restarted")
    assert p["server"]["database_errors"] > 0 or p["503s"] > 0
    assert p["fault"]["down_s"] > 0


def test_reloads_good_served_corrupt_refused(result: dict[str, Any]) -> None:
    p = phase(result, "model_reloaded")
    good, corrupt = p["fault"]["good"], p["fault"]["corrupt"]
    assert good["status"] == 200 and good["served"] == good["version"]
    assert corrupt["status"] == 409 and corrupt["code"] == "reload_failed"
    assert p["fault"]["serving_after"] == good["version"]
    assert p["server"]["reloads_loaded"] == 1 and p["server"]["reloads_failed"] == 1
    # After the refused reload, every rank is still answered by the good version.
    assert set(phase(result, "overloaded")["rank_versions"]) == {good["version"]}


def test_overload_answers_503_with_retry_after(result: dict[str, Any]) -> None:
    p = phase(result, "overloaded")
    assert p["503s"] > 0
    assert p["retry_after"] == p["503s"]
    assert phase(result, "baseline")["503s"] == 0


def test_table_renders(result: dict[str, Any]) -> None:
    from rich.console import Console

    from xla_costmodel.chaos.cli import print_table

    buffer = io.StringIO()
    print_table(result, Console(file=buffer, width=200))
    text = buffer.getvalue()
    assert all(name in text for name in PHASES)
    assert "lost: 0" in text


def test_command_is_registered() -> None:
    from typer.testing import CliRunner

    from xla_costmodel.cli import build_app

    answer = CliRunner().invoke(build_app(), ["chaos", "--help"])
    assert answer.exit_code == 0, answer.output
    assert "--quick" in answer.output and "--json" in answer.output
