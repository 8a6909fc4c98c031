"""The README's quick starts and every ``examples/`` script run, against real servers.

A quick start is the fenced block after a ``<!-- quickstart:NAME -->`` line. Python
blocks run as written, with the README's ``http://127.0.0.1:8000`` pointed at the
fixture's server; shell blocks run under ``bash -eu`` with ``costmodel`` on the PATH,
``COSTMODEL_SERVER`` / ``$SERVER`` naming the server. The fleet block's ``costmodel
serve`` line is the fixture's own server (2 workers, PostgreSQL, Redis, writer tokens
required), started the same way before the block runs.

The quick starts run twice: with the development venv from the clone, and on a clean
install (the wheel built from the sdist, in a fresh venv, run from a folder outside the
clone: ``test_the_quick_starts_on_a_clean_install``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import venv
from collections.abc import Callable, Iterator
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
# The files of the clone a block names (``examples/x.py:NAME``, an HLO of datasets/).
NAMED_FILE = re.compile(r"\b(?:examples|datasets)/[\w./-]+?\.(?:py|txt)\b")


def serve(
    workdir: Path,
    env: dict[str, str],
    *,
    workers: int = 1,
    installed: Path | None = None,
) -> ServiceServer:
    """The service a quick start talks to: the clone's (uvicorn on the app factory,
    the clone's xla_cpu artifact) or the ``costmodel serve`` of the venv whose bin
    folder is ``installed``, with the models its package ships."""
    env = {"COSTMODEL_LOG_LEVEL": "WARNING", **env}
    if installed is not None:
        argv = [str(installed / "costmodel"), "serve", "--workers", str(workers)]
        return ServiceServer(workdir, env, argv=argv)
    env["COSTMODEL_MODEL_DIR"] = str(REPO / "models" / "artifacts")
    env["COSTMODEL_MODELS"] = "xla_cpu"
    return ServiceServer(workdir, env, workers=workers)


@pytest.fixture(scope="module")
def solo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``costmodel serve`` as quick starts (a) and (b) run it: loopback, SQLite."""
    env = {"COSTMODEL_DATA_DIR": str(tmp_path_factory.mktemp("data"))}
    with serve(tmp_path_factory.mktemp("solo"), env) as s:
        yield s.url


def fleet_settings(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_server: PostgresServer,
    redis_server: RedisServer,
) -> dict[str, str]:
    """Quick start (c)'s settings: PostgreSQL and Redis, tokens required (as beyond
    loopback), on a new database."""
    if redis_server.proc is None:
        redis_server.start()
    database = postgres_server.database_url(postgres_server.create_database())
    return {
        "COSTMODEL_DATABASE_URL": database,
        "COSTMODEL_REDIS_URL": redis_server.url,
        "COSTMODEL_FEEDBACK_AUTH": "token",
        # Remembered rankings in Redis are signed when writers need tokens.
        "COSTMODEL_REDIS_HMAC_KEY": "quickstart-test-key",
        "COSTMODEL_DATA_DIR": str(tmp_path_factory.mktemp("data")),
        "COSTMODEL_FLEET_REFRESH_S": "0.5",  # GET /v1/targets: 60 s by default
    }


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_server: PostgresServer,
    redis_server: RedisServer,
) -> Iterator[tuple[str, str]]:
    """Quick start (c)'s service, 2 workers: (URL, database URL)."""
    env = fleet_settings(tmp_path_factory, postgres_server, redis_server)
    with serve(tmp_path_factory.mktemp("fleet"), env, workers=2) as server:
        yield server.url, env["COSTMODEL_DATABASE_URL"]


def run_block(
    name: str,
    url: str,
    tmp_path: Path,
    extra_env: dict[str, str] | None = None,
    installed: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Runs a quick start in the clone with this venv or, given the bin folder of an
    ``installed`` venv, in ``tmp_path`` with it and copies of the files it names."""
    lang, code = QUICKSTARTS[name]
    if name == "c":  # the block's server is the fixture's, started the same way
        code = SERVE_LINE.sub("", code)
    cwd = REPO if installed is None else tmp_path
    python = Path(sys.executable) if installed is None else installed / "python"
    for named in NAMED_FILE.findall(code) if installed else ():
        (cwd / named).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / named, cwd / named)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COSTMODEL_")}
    env.pop("PYTHONPATH", None)
    env.update(extra_env or {})
    env["COSTMODEL_SERVER"] = env["SERVER"] = url
    env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}"
    if lang == "python":
        script = tmp_path / f"quickstart_{name}.py"
        script.write_text(code.replace(README_URL, url))
        argv = [str(python), str(script)]
    else:
        assert lang == "sh", lang
        argv = ["bash", "-euo", "pipefail", "-c", code]
    ran = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=240
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    return ran


def test_the_readme_marks_its_quick_starts() -> None:
    assert set(QUICKSTARTS) == {"a", "a-cli", "b", "jit", "c"}
    for _, code in QUICKSTARTS.values():
        assert len(code.strip().splitlines()) <= 15, code


# What each quick start prints, checked on its stdout.
PRINTS: dict[str, Callable[[str], bool]] = {
    "a": lambda out: out.startswith("("),  # the top 3, then the options
    "a-cli": lambda out: out.count("shaped by: adapted") == 2,
    "b": lambda out: out.strip().endswith(" (256,) (256,)"),
    # After (b) tuned the same f and shapes, jit finds the decision by its HLO text.
    "jit": lambda out: out.split()[0] == "best_known",
}


@pytest.mark.slow
def test_quickstart_a_ranks_a_jax_programs_hlo(solo: str, tmp_path: Path) -> None:
    ran = run_block("a", solo, tmp_path)
    assert PRINTS["a"](ran.stdout), ran.stdout


@pytest.mark.slow
def test_quickstart_a_from_the_command_line(solo: str, tmp_path: Path) -> None:
    ran = run_block("a-cli", solo, tmp_path)
    assert PRINTS["a-cli"](ran.stdout), ran.stdout


@pytest.mark.slow
def test_quickstart_b_tunes_and_applies(solo: str, tmp_path: Path) -> None:
    ran = run_block("b", solo, tmp_path)
    assert PRINTS["b"](ran.stdout), ran.stdout


@pytest.mark.slow
def test_quickstart_jit_applies_what_the_tuner_decided(
    solo: str, tmp_path: Path
) -> None:
    """After quick start (b)'s program was tuned (the same f and shapes), ``jit``
    finds the decision by its HLO text: one lookup, the decided options."""
    run_block("b", solo, tmp_path)
    ran = run_block("jit", solo, tmp_path)
    assert PRINTS["jit"](ran.stdout), ran.stdout


def check_fleet_block(
    url: str, database: str, tmp_path: Path, installed: Path | None = None
) -> None:
    """Runs quick start (c) against its service and checks what it did."""
    code = QUICKSTARTS["c"][1]
    assert SERVE_LINE.search(code) and "--workers 2" in code  # as the fixture's
    # $SERVER is defined by the block (the fixture's URL given here), and the two
    # tuners, on one host, run one after the other (as the text says they must).
    assert code.startswith("export SERVER=${SERVER:-")
    tunes = [line for line in code.splitlines() if line.startswith("costmodel tune")]
    assert len(tunes) == 2 and not any(line.rstrip().endswith("&") for line in tunes)
    env = {"COSTMODEL_DATABASE_URL": database}
    ran = run_block("c", url, tmp_path, env, installed)
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


@pytest.mark.slow
def test_quickstart_c_a_fleet_with_a_token(
    fleet: tuple[str, str], tmp_path: Path
) -> None:
    check_fleet_block(*fleet, tmp_path)


@pytest.fixture(scope="module")
def clean_install(
    dist: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A fresh venv with the wheel (built from the sdist) installed: its bin folder.

    Its dependencies are this venv's third-party packages, not installed from the
    package index (jax, onnxruntime, torch...: minutes) but reached through a folder of
    symlinks, one per entry of this venv's site-packages except the clone's editable
    install (``__editable__*``, its finder, and ``xla_costmodel*``, its dist-info) and
    the ``.pth`` hooks. A ``.pth`` in the new venv appends that folder to ``sys.path``
    after its own site-packages, where the wheel goes (``--no-deps``): the only
    ``xla_costmodel`` the new venv can import is the wheel's. (Appending this venv's
    site-packages itself would leave the editable finder importable and the clone's
    dist-info visible to ``importlib.metadata``.) PYTHONPATH is unset while the
    fixture lives, so the servers started meanwhile cannot import the clone either.
    What this does not check is the wheel's dependency metadata:
    tests/test_packaging.py installs its extras from the index.
    """
    root = tmp_path_factory.mktemp("clean-venv")
    venv.create(root)  # no pip of its own: this venv's pip installs into it
    third_party = root / "third-party"
    third_party.mkdir()
    ours = ("__editable__", "xla_costmodel", "__pycache__")
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        if not entry.name.startswith(ours) and entry.suffix != ".pth":
            (third_party / entry.name).symlink_to(entry)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = root / "lib" / version / "site-packages"
    (site / "third-party.pth").write_text(f"{third_party}\n")
    wheel = next(dist.glob("xla_costmodel-*.whl"))
    pip = [sys.executable, "-m", "pip", "--python", str(root / "bin" / "python")]
    installed = subprocess.run(
        [*pip, "install", "-q", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PYTHONPATH", raising=False)
        yield root / "bin"


@pytest.fixture(scope="module")
def clean_solo(
    clean_install: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The clean install's ``costmodel serve``: loopback, SQLite, shipped models."""
    env = {"COSTMODEL_DATA_DIR": str(tmp_path_factory.mktemp("data"))}
    workdir = tmp_path_factory.mktemp("clean-solo")
    with serve(workdir, env, installed=clean_install) as s:
        yield s.url


@pytest.mark.slow
def test_the_quick_starts_on_a_clean_install(
    clean_install: Path, clean_solo: str, tmp_path: Path
) -> None:
    """Quick starts (a) and (b), then (b)'s ``jit``, with the wheel's ``python`` and
    ``costmodel``, from a folder outside the clone, against the wheel's server."""
    assert REPO not in tmp_path.parents
    where = "import xla_costmodel, sys; print(xla_costmodel.__file__)"
    imported = subprocess.run(
        [clean_install / "python", "-c", where],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    site = clean_install.parent / "lib"
    assert Path(imported.stdout.strip()).is_relative_to(site), imported.stdout
    # Nothing of the clone: its harness (not shipped) is not importable.
    harness = [str(clean_install / "python"), "-c", "import xla_costmodel.harness"]
    refused = subprocess.run(harness, cwd=tmp_path, capture_output=True, text=True)
    assert "No module named 'xla_costmodel.harness'" in refused.stderr
    for name in ("a", "a-cli", "b", "jit"):
        ran = run_block(name, clean_solo, tmp_path, installed=clean_install)
        assert PRINTS[name](ran.stdout), (name, ran.stdout)


@pytest.mark.slow
def test_quickstart_c_on_a_clean_install(
    clean_install: Path,
    tmp_path_factory: pytest.TempPathFactory,
    postgres_server: PostgresServer,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """Quick start (c) with the wheel's ``costmodel`` (tokens, two tunes) against
    the wheel's ``costmodel serve --workers 2`` on PostgreSQL and Redis."""
    env = fleet_settings(tmp_path_factory, postgres_server, redis_server)
    workdir = tmp_path_factory.mktemp("clean-fleet")
    with serve(workdir, env, workers=2, installed=clean_install) as server:
        database = env["COSTMODEL_DATABASE_URL"]
        check_fleet_block(server.url, database, tmp_path, clean_install)


# Every script in examples/ and how it runs here: a command line, or (None) a module
# of (fn, args) builders, checked by lowering one of them through `costmodel rank`.
EXAMPLES: dict[str, list[str] | None] = {
    "rank_own_hlo.py": [],
    "tune_and_apply.py": ["--budget", "2"],
    "fleet_tokens.py": ["--budget", "2"],
    "tune_programs.py": None,
    "fleet_programs.py": None,
    "loop_programs.py": None,
}
BUILDERS = {
    "tune_programs.py": "my_program",
    "fleet_programs.py": "conv_strided",
    "loop_programs.py": "seir",
}


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
