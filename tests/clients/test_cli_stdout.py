"""What the commands that run a user's program print: stdout carries only the answer
(``--json``: one JSON object, whatever the program prints while it is imported, built
or traced, by Python or by C), and with no server each says how to start one.

The commands run as a user runs them (a child process: a C extension's write to
descriptor 1 is only seen there), against a real service or a closed port.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from xla_costmodel.harness import ServiceServer, free_port

REPO = Path(__file__).resolve().parents[2]
# A program whose libraries talk: at import (Python and C), building and tracing.
NOISY = """
import os

print("physics library: warning one")
os.write(1, b"physics library: warning two (from C)\\n")


def program():
    import jax
    import jax.numpy as jnp

    print("building the program")

    def fn(w, x):
        print("tracing fn")
        return jnp.sum(jax.nn.relu(x @ w) ** 2, axis=-1)

    return fn, (jnp.ones((32, 32), jnp.float32), jnp.ones((8, 32), jnp.float32))
"""
SAID = ("physics library: warning one", "warning two (from C)", "tracing fn")


def no_service(url: str) -> str:
    return f"no costmodel service at {url}: start one with `costmodel serve`"


@pytest.fixture(scope="module", autouse=True)
def jax_installed() -> None:
    if importlib.util.find_spec("jax") is None:
        pytest.fail("jax is not installed: pip install 'xla-costmodel[xla]'")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {
        "COSTMODEL_MODEL_DIR": str(REPO / "models" / "artifacts"),
        "COSTMODEL_MODELS": "xla_cpu",
        "COSTMODEL_LOG_LEVEL": "WARNING",
        "COSTMODEL_DATA_DIR": str(tmp_path_factory.mktemp("data")),
    }
    with ServiceServer(tmp_path_factory.mktemp("stdout"), env) as s:
        yield s.url


@pytest.fixture
def noisy(tmp_path: Path) -> str:
    path = tmp_path / "noisy_program.py"
    path.write_text(NOISY)
    return f"{path}:program"


def costmodel(*argv: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from xla_costmodel.cli import main; main()", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "XDG_CACHE_HOME": str(cache)},
        timeout=300,
    )


def only_json(ran: subprocess.CompletedProcess[str]) -> Any:
    """stdout as one JSON document; the program's lines went to stderr."""
    for line in SAID:
        assert line in ran.stderr, ran.stderr[-2000:]
    return json.loads(ran.stdout)


def test_rank_json_is_only_json(server: str, noisy: str, tmp_path: Path) -> None:
    argv = ("rank", noisy, "--server", server, "--configs", "4", "--json")
    ran = costmodel(*argv, cache=tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert only_json(ran)["configs"] == 4


def test_best_json_is_only_json(server: str, noisy: str, tmp_path: Path) -> None:
    ran = costmodel("best", noisy, "--server", server, "--json", cache=tmp_path)
    assert ran.returncode == 1, ran.stderr[-2000:]  # nothing decided yet
    assert only_json(ran)["error"]["code"] == "no_decision"


def test_tune_without_a_service_keeps_the_default_and_says_why(
    noisy: str, tmp_path: Path
) -> None:
    gone = f"http://127.0.0.1:{free_port()}"
    argv = ("tune", noisy, "--server", gone, "--budget", "2", "--candidates", "8")
    ran = costmodel(*argv, "--json", cache=tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    report = only_json(ran)
    assert report["compiler_options"] == {} and not report["service_answered"]
    assert no_service(gone) in report["reason"], report["reason"]
    assert report["reason"].endswith("kept the default"), report["reason"]


def test_rank_and_best_without_a_service_say_how_to_start_one(
    noisy: str, tmp_path: Path
) -> None:
    gone = f"http://127.0.0.1:{free_port()}"
    for command, code in (("rank", 1), ("best", 2)):
        ran = costmodel(command, noisy, "--server", gone, "--json", cache=tmp_path)
        assert ran.returncode == code and ran.stdout == "", ran.stdout
        assert ran.stderr.splitlines()[-1] == f"error: {no_service(gone)}"
