"""The distribution as users install it: one import package, a light base install that
is the client, and a CLI that names the extra a command needs.

Builds the wheel and the sdist from this tree, installs the wheel **without extras**
into a fresh virtualenv (dependencies from the package index), and uses it from a
folder that has its own ``clients/`` and ``models/`` packages.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("onnxruntime", "fastapi", "uvicorn", "redis", "torch", "jax", "sqlalchemy")


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
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = run(
        sys.executable,
        "-m",
        "build",
        "--no-isolation",
        "--wheel",
        "--sdist",
        "--outdir",
        out,
        REPO,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return out


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
def test_the_wheel_holds_one_package_and_the_sdist_builds(dist: Path) -> None:
    wheel = next(dist.glob("xla_costmodel-*.whl"))
    assert next(dist.glob("xla_costmodel-*.tar.gz"))
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
        "xla_costmodel/service/store/migrations/env.py",
    ):
        assert needed in names, needed


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
