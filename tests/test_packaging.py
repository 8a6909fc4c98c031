"""The distribution as users install it: one import package, a light base install that
is the client, and a CLI that names the extra a command needs.

Takes the sdist built from this tree and the wheel built **from that sdist** (the
session's ``dist`` fixture, tests/conftest.py), installs the wheel
**without extras** into a fresh virtualenv (dependencies from the package index) and
uses it from a folder that has its own ``clients/`` and ``models/`` packages; then
installs ``[service,bench]`` from it into another and serves the shipped models.

The process harness (``harness/``) is the tests': the wheel does not hold it, the
installed command works without it, and the bench says it needs a clone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import venv
import zipfile
from pathlib import Path

import httpx
import pytest

from xla_costmodel.harness import free_port

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("onnxruntime", "fastapi", "uvicorn", "redis", "torch", "jax", "sqlalchemy")
HARNESS = "xla_costmodel/harness/"


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def base_env(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel installed, no extras."""
    root = tmp_path_factory.mktemp("base-venv")
    venv.create(root, with_pip=True)
    wheel = next(dist.glob("*.whl"))
    installed = run(root / "bin" / "python", "-m", "pip", "install", "-q", wheel)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return root


@pytest.mark.slow
def test_the_wheel_built_from_the_sdist_holds_one_package(dist: Path) -> None:
    wheel = next(dist.glob("xla_costmodel-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    tops = {n.split("/", 1)[0] for n in names if ".dist-info/" not in n}
    assert tops == {"xla_costmodel"}
    for needed in (
        "xla_costmodel/py.typed",
        "xla_costmodel/clients/client.py",
        "xla_costmodel/service/app.py",
        "xla_costmodel/tpugraphs/reader.py",
        "xla_costmodel/models/artifacts/tile/1/manifest.json",
        "xla_costmodel/models/artifacts/xla_cpu/1/knowledge.npz",
        "xla_costmodel/service/store/migrations/env.py",
        # The developer tools ship (the command table lists them; simulate is
        # studies'); what they start servers with does not.
        "xla_costmodel/bench/cli.py",
        "xla_costmodel/chaos/cli.py",
        "xla_costmodel/studies/fleet.py",
    ):
        assert needed in names, needed
    assert not [n for n in names if n.startswith(HARNESS)]


@pytest.mark.slow
def test_the_base_install_is_the_client(base_env: Path, tmp_path: Path) -> None:
    python = base_env / "bin" / "python"
    listed = run(python, "-m", "pip", "list", "--format=freeze")
    have = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert not have & set(HEAVY), have & set(HEAVY)
    # A user's project with packages named like ours: both import side by side.
    for own in ("clients", "models"):
        (tmp_path / own).mkdir()
        (tmp_path / own / "__init__.py").write_text(f"NAME = 'users {own}'\n")
    code = (
        "from xla_costmodel.clients import CostModelClient, AsyncCostModelClient; "
        "import clients, models; print(clients.NAME, models.NAME, "
        "CostModelClient.__name__, AsyncCostModelClient.__name__)"
    )
    used = run(python, "-c", code, cwd=tmp_path)
    assert used.returncode == 0, used.stderr
    assert used.stdout.split() == [
        "users",
        "clients",
        "users",
        "models",
        "CostModelClient",
        "AsyncCostModelClient",
    ]
    harness = run(python, "-c", "import xla_costmodel.harness", cwd=tmp_path)
    assert "No module named 'xla_costmodel.harness'" in harness.stderr


@pytest.mark.slow
def test_the_command_works_and_names_missing_extras(
    base_env: Path, tmp_path: Path
) -> None:
    costmodel = base_env / "bin" / "costmodel"
    helped = run(costmodel, "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "serve" in helped.stdout, helped.stderr
    shown = run(costmodel, "--version", cwd=tmp_path)
    version = run(
        sys.executable,
        "-c",
        "import importlib.metadata as m; print(m.version('xla-costmodel'))",
    )
    assert shown.returncode == 0
    assert shown.stdout.strip() == f"xla-costmodel {version.stdout.strip()}"
    for command, extra in (
        ("serve", "service"),
        ("train", "train"),
        ("dataset export", "service"),
    ):
        refused = run(costmodel, *command.split(), "--port", "1", cwd=tmp_path)
        assert refused.returncode == 1, (command, refused.stdout, refused.stderr)
        lines = refused.stderr.strip().splitlines()
        assert lines == [
            f"costmodel {command} needs the {extra} extra: "
            f"pip install 'xla-costmodel[{extra}]'"
        ]
    # The client's own command runs on the base install.
    replay = run(costmodel, "replay", "--help", cwd=tmp_path)
    assert replay.returncode == 0 and "--rounds" in replay.stdout


# Ranks a real program's HLO text with the installed client against the served shipped
# xla_cpu model: the package data (artifacts, seeds, migrations) came through the wheel.
RANK = """
import sys
from xla_costmodel.clients import CostModelClient
from xla_costmodel.tpugraphs import xla_cpu

url, hlo = sys.argv[1], open(sys.argv[2]).read()
with CostModelClient(url) as client:
    result = client.rank("xla_cpu", hlo, xla_cpu.sample(16, seed=0), top_k=4)
print(result.model_version, len(result.top_k), sorted(set(result.top_k)) == sorted(result.top_k))
"""


@pytest.fixture(scope="module")
def service_env(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel installed with ``[service,bench]``."""
    root = tmp_path_factory.mktemp("service-venv")
    venv.create(root, with_pip=True)
    wheel = next(dist.glob("*.whl"))
    installed = run(
        root / "bin" / "python", "-m", "pip", "install", "-q", f"{wheel}[service,bench]"
    )
    assert installed.returncode == 0, (
        installed.stdout[-3000:] + installed.stderr[-3000:]
    )
    return root


@pytest.mark.slow
def test_the_command_works_without_the_harness(
    service_env: Path, tmp_path: Path
) -> None:
    """Every command module is importable (bench and chaos are, with their extra
    installed); the bench, which starts servers, says it needs a clone."""
    costmodel = service_env / "bin" / "costmodel"
    helped = run(costmodel, "--help", cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    # The commands themselves, not the one-line stand-ins for a missing extra.
    for summary in ("Benchmark the service", "Faults under load"):
        assert summary in helped.stdout, helped.stdout
    serve = run(costmodel, "serve", "--help", cwd=tmp_path)
    assert serve.returncode == 0 and "--workers" in serve.stdout, serve.stderr
    bench = run(costmodel, "bench", "--quick", cwd=tmp_path)
    assert bench.returncode == 1, (bench.stdout, bench.stderr)
    assert bench.stderr.strip().splitlines() == [
        "costmodel bench needs a clone of the repository (the test harness is not "
        "installed): run it from a clone, after pip install -e '.[service,bench]'"
    ]


@pytest.mark.slow
def test_the_service_extra_serves_the_shipped_models(
    service_env: Path, tmp_path_factory: pytest.TempPathFactory, shared_data: Path
) -> None:
    root = service_env
    work = tmp_path_factory.mktemp("serve-cwd")  # no checkout anywhere near
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COSTMODEL_", "PYTHONPATH"))
    }
    env["COSTMODEL_DATA_DIR"] = str(work / "data")
    server = subprocess.Popen(
        [
            root / "bin" / "costmodel",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert server.poll() is None, server.stderr.read() if server.stderr else ""
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("the installed service never became ready")
        listed = httpx.get(f"{url}/v1/models", timeout=5).json()
        names = {m["name"] for m in listed["models"]}
        assert names == {"tile", "layout", "xla_cpu"}, listed
        script = work / "rank.py"
        script.write_text(RANK)
        hlo = shared_data / "hlo" / "jax" / "mlp_infer.hlo.txt"
        ranked = run(root / "bin" / "python", script, url, hlo, cwd=work)
        assert ranked.returncode == 0, ranked.stderr[-3000:]
        assert ranked.stdout.split() == ["1", "4", "True"], ranked.stdout
    finally:
        server.terminate()
        server.wait(timeout=30)
