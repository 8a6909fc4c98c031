"""Checkout data is found from the working directory, or the command names the flag.

Training reads ``datasets/tpugraphs`` and ``datasets/xla_cpu`` relative to where it
runs (the repository root under ``make``), never relative to where the module lies: an
installed package has neither beside it. The shipped artifacts are package data.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from xla_costmodel import shipped_models

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("module", "flag"),
    [
        ("xla_costmodel.models.xla_cpu_recipe", "--data"),
        ("xla_costmodel.models.shipped", "--data"),
    ],
)
def test_a_missing_default_names_the_flag(
    module: str, flag: str, tmp_path: Path
) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", module],
        cwd=tmp_path,  # no datasets/ here
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 1, ran.stderr
    last = ran.stderr.strip().splitlines()[-1]
    assert last.startswith("error: no ") and f"pass {flag} PATH" in last, last
    assert not (tmp_path / "runs").exists()  # nothing written before the check


def test_the_shipped_models_are_package_data() -> None:
    found = shipped_models()
    assert found.resolve() == REPO / "models" / "artifacts"
    assert {p.name for p in found.iterdir() if p.is_dir()} >= {
        "tile",
        "layout",
        "xla_cpu",
    }


def test_no_module_finds_checkout_data_beside_itself() -> None:
    """``Path(__file__).parents[...]`` reaches out of the package: right in a checkout
    by coincidence, wrong in an installed one. Package data beside a module (the
    migrations, the KServe peer's script) is fine: it ships with it."""
    package = REPO / "xla_costmodel"
    # The package and every folder linked into it (rglob does not follow the links).
    roots = [package, *(p.resolve() for p in package.iterdir() if p.is_symlink())]
    files = [f for root in roots for f in sorted(root.rglob("*.py"))]
    assert len(files) > 150  # the whole package was read
    offenders = []
    for path in files:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if "__file__" in line and ".parents[" in line:
                offenders.append(f"{path}:{n}")
    assert offenders == []
