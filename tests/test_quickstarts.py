"""The README's quick starts and every ``examples/`` script run, against real servers.

A quick start is the fenced block after a ``<!-- quickstart:NAME -->`` line. Python
blocks run as written, with the README's ``http://127.0.0.1:8000`` pointed at the
fixture's server; shell blocks run under ``bash -eu`` with ``costmodel`` on the PATH,
``COSTMODEL_SERVER`` / ``$SERVER`` naming the server. The fleet block's ``costmodel
serve`` line is the fixture's own server (2 workers, PostgreSQL, Redis, writer tokens
required), started the same way before the block runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from xla_costmodel.harness import PostgresServer, RedisServer, ServiceServer

pytest.importorskip("jax")  # the quick starts need the xla extra, as the README says

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
README_URL = "http://127.0.0.1:8000"
BLOCK = re.compile(r"<!-- quickstart:([a-z-]+) -->\n```(\w+)\n(.*?)```", re.S)
QUICKSTARTS = {name: (lang, code) for name, lang, code in BLOCK.findall(README)}
COSTMODEL = str(Path(sys.executable).parent / "costmodel")
SERVE_LINE = re.compile(r"^costmodel serve .*&.*$", re.M)


def serve(workdir: Path, **env: str) -> ServiceServer:
    workers = int(env.pop("WORKERS", "1"))
    return ServiceServer(
        workdir,
        {
            "COSTMODEL_MODEL_DIR": str(REPO / "models" / "artifacts"),
            "COSTMODEL_MODELS": "xla_cpu",
            "COSTMODEL_LOG_LEVEL": "WARNING",
            **env,
        },
        workers=workers,
    )


@pytest.fixture(scope="module")
def solo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``costmodel serve`` as quick starts (a) and (b) run it: loopback, SQLite."""
    data = tmp_path_factory.mktemp("data")
    with serve(tmp_path_factory.mktemp("solo"), COSTMODEL_DATA_DIR=str(data)) as s:
        yield s.url


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_server: PostgresServer,
    redis_server: RedisServer,
) -> Iterator[tuple[str, str]]:
    """Quick start (c)'s service: 2 workers on PostgreSQL and Redis, tokens required
    (as beyond loopback). (URL, database URL)."""
    if redis_server.proc is None:
        redis_server.start()
    database = postgres_server.database_url(postgres_server.create_database())
    env = {
        "COSTMODEL_DATABASE_URL": database,
        "COSTMODEL_REDIS_URL": redis_server.url,
        "COSTMODEL_FEEDBACK_AUTH": "token",
        # Remembered rankings in Redis are signed when writers need tokens.
        "COSTMODEL_REDIS_HMAC_KEY": "quickstart-test-key",
        "COSTMODEL_DATA_DIR": str(tmp_path_factory.mktemp("data")),
        "COSTMODEL_FLEET_REFRESH_S": "0.5",  # GET /v1/targets: 60 s by default
        "WORKERS": "2",
    }
    with serve(tmp_path_factory.mktemp("fleet"), **env) as server:
        yield server.url, database


def run_block(
    name: str, url: str, tmp_path: Path, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    lang, code = QUICKSTARTS[name]
    if name == "c":  # the block's server is the fixture's, started the same way
        code = SERVE_LINE.sub("", code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COSTMODEL_")}
    env.update(extra_env or {})
    env["COSTMODEL_SERVER"] = env["SERVER"] = url
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    if lang == "python":
        script = tmp_path / f"quickstart_{name}.py"
        script.write_text(code.replace(README_URL, url))
        argv = [sys.executable, str(script)]
    else:
        assert lang == "sh", lang
        argv = ["bash", "-euo", "pipefail", "-c", code]
    ran = subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=240
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    return ran


def test_the_readme_marks_its_quick_starts() -> None:
    assert set(QUICKSTARTS) == {"a", "a-cli", "b", "jit", "c"}
    for _, code in QUICKSTARTS.values():
        assert len(code.strip().splitlines()) <= 15, code


@pytest.mark.slow
def test_quickstart_a_ranks_a_jax_programs_hlo(solo: str, tmp_path: Path) -> None:
    ran = run_block("a", solo, tmp_path)
    assert ran.stdout.startswith("("), ran.stdout  # the top 3, then the options


@pytest.mark.slow
def test_quickstart_a_from_the_command_line(solo: str, tmp_path: Path) -> None:
    ran = run_block("a-cli", solo, tmp_path)
    assert ran.stdout.count("shaped by: adapted") == 2, ran.stdout


@pytest.mark.slow
def test_quickstart_b_tunes_and_applies(solo: str, tmp_path: Path) -> None:
    ran = run_block("b", solo, tmp_path)
    assert ran.stdout.strip().endswith(" (256,) (256,)"), ran.stdout


@pytest.mark.slow
def test_quickstart_jit_applies_what_the_tuner_decided(
    solo: str, tmp_path: Path
) -> None:
    """After quick start (b)'s program was tuned (the same f and shapes), ``jit``
    finds the decision by its HLO text: one lookup, the decided options."""
    run_block("b", solo, tmp_path)
    ran = run_block("jit", solo, tmp_path)
    source = ran.stdout.split()[0]
    assert source == "best_known", ran.stdout


@pytest.mark.slow
def test_quickstart_c_a_fleet_with_a_token(
    fleet: tuple[str, str], tmp_path: Path
) -> None:
    url, database = fleet
    code = QUICKSTARTS["c"][1]
    assert SERVE_LINE.search(code) and "--workers 2" in code  # as the fixture's
    # $SERVER is defined by the block (the fixture's URL given here), and the two
    # tuners, on one host, run one after the other (as the text says they must).
    assert code.startswith("export SERVER=${SERVER:-")
    tunes = [line for line in code.splitlines() if line.startswith("costmodel tune")]
    assert len(tunes) == 2 and not any(line.rstrip().endswith("&") for line in tunes)
    ran = run_block("c", url, tmp_path, {"COSTMODEL_DATABASE_URL": database})
    assert ran.stdout.count("service: xla_cpu:1") == 2, ran.stdout
    fleet_now = json.loads(ran.stdout.strip().splitlines()[-1])  # the block's curl
    assert set(fleet_now) == {"as_of", "targets"}, fleet_now
    assert "feedback not stored" not in ran.stdout, ran.stdout  # the token worked
    # Both programs' measurements reached the shared database (the gain is refreshed
    # in the background: COSTMODEL_FLEET_REFRESH_S).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        targets = httpx.get(f"{url}/v1/targets", timeout=5).json()["targets"]
        if targets and targets[0]["programs"] == 2:
            break
        time.sleep(0.5)
    assert targets and targets[0]["programs"] == 2, targets


# Every script in examples/ and how it runs here: a command line, or (None) a module
# of (fn, args) builders, checked by lowering one of them through `costmodel rank`.
EXAMPLES: dict[str, list[str] | None] = {
    "rank_own_hlo.py": [],
    "tune_and_apply.py": ["--budget", "2"],
    "fleet_tokens.py": ["--budget", "2"],
    "tune_programs.py": None,
    "fleet_programs.py": None,
}
BUILDERS = {"tune_programs.py": "my_program", "fleet_programs.py": "conv_strided"}


def test_every_example_is_run_here() -> None:
    assert sorted(p.name for p in (REPO / "examples").glob("*.py")) == sorted(EXAMPLES)


def tokens(database: str, *names: str) -> str:
    """Writer tokens created as the README says, comma-separated."""
    env = {**os.environ, "COSTMODEL_DATABASE_URL": database}
    made = []
    for name in names:
        created = subprocess.run(
            [COSTMODEL, "tokens", "create", name],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert created.returncode == 0, created.stderr
        made.append(created.stdout.strip().splitlines()[-1])
    return ",".join(made)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example(script: str, solo: str, request: pytest.FixtureRequest) -> None:
    args = EXAMPLES[script]
    if args is None:
        argv = [
            *(COSTMODEL, "rank"),
            f"examples/{script}:{BUILDERS[script]}",
            *("--server", solo, "--configs", "8"),
        ]
    elif script == "fleet_tokens.py":
        url, database = request.getfixturevalue("fleet")
        argv = [sys.executable, f"examples/{script}", "--server", url, *args]
        argv += ["--tokens", tokens(database, "example-1", "example-2")]
    else:
        argv = [sys.executable, f"examples/{script}", "--server", solo, *args]
    ran = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert ran.stdout.strip(), ran.stderr[-2000:]
