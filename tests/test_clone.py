"""A clone alone is enough: the data the tests and the training recipe read is in the
repository (``datasets/tpugraphs``), never in a folder beside the checkout.

The slow test copies the tree as a clone has it (tracked and new files, not ignored
ones) into a directory with nothing beside it, and runs tests that need the real
TpuGraphs files there, with the copy's own package first on the path.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "datasets" / "tpugraphs"
# Tests that read the real TpuGraphs files through each way there is: the shared
# fixture, a module-level path, and the working-directory default (bench, training).
DATA_TESTS = (
    "tests/tpugraphs/test_reader.py",
    "tests/tpugraphs/test_configs.py",
    "tests/bench/test_bench_units.py",
    "tests/costmodel/test_paths.py",
)


def test_the_sample_is_in_the_repository_and_its_manifest_names_every_file() -> None:
    manifest = (DATA / "MANIFEST.md").read_text()
    listed = dict(
        re.findall(r"^\| ([^ |]+) \| \d+ \| `([0-9a-f]{64})` \|", manifest, re.M)
    )
    files = {
        str(p.relative_to(DATA)): p
        for p in DATA.rglob("*")
        if p.is_file() and p.name not in ("MANIFEST.md", "FORMAT.md", "README.md")
    }
    assert sorted(files) == sorted(listed)
    for name, path in files.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == listed[name], name
    assert "Licence" in manifest and "LICENSE" in manifest
    assert sum(p.stat().st_size for p in files.values()) < 6_000_000


def test_nothing_reads_a_folder_beside_the_checkout() -> None:
    offenders = []
    sources = [*REPO.glob("*.md"), REPO / "Makefile", *REPO.glob("docs/*.md")]
    for folder in ("xla_costmodel", "tests", "examples", "deploy"):
        sources += (REPO / folder).rglob("*.py")
    for linked in (REPO / "xla_costmodel").iterdir():
        if linked.is_symlink():
            sources += linked.resolve().rglob("*.py")
    for path in sources:
        if path.resolve() == Path(__file__).resolve():
            continue  # this test names what it looks for
        text = path.read_text()
        if "shared/tpugraphs" in text or '"shared" / "tpugraphs"' in text:
            offenders.append(str(path.relative_to(REPO)))
    assert offenders == []


def clone_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [f for f in listed.split("\0") if f and os.path.lexists(REPO / f)]


@pytest.mark.slow
def test_data_needing_tests_pass_in_a_clone_with_nothing_beside_it(
    tmp_path: Path,
) -> None:
    clone = tmp_path / "alone" / "repo"
    for name in clone_files():
        source, target = REPO / name, clone / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    assert sorted(p.name for p in (tmp_path / "alone").iterdir()) == ["repo"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("COSTMODEL_")}
    env["PYTHONPATH"] = str(clone)  # the clone's package, not this checkout's
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *DATA_TESTS],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    assert " passed" in ran.stdout and "skipped" not in ran.stdout, ran.stdout[-2000:]
    # The code that ran was the clone's.
    where = subprocess.run(
        [sys.executable, "-c", "import xla_costmodel; print(xla_costmodel.__file__)"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
    )
    assert where.stdout.strip().startswith(str(clone)), where.stdout
