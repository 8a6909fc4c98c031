"""The memory figures behind ``CostmodelMemoryNearLimit``: this process's RSS and the
limit it runs under (a cgroup's, else the machine's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from xla_costmodel.service import process_memory
from xla_costmodel.service.process_memory import (
    machine_bytes,
    memory_limit_bytes,
    resident_bytes,
)


def test_resident_memory_is_this_process_and_below_the_machine() -> None:
    before = resident_bytes()
    block = bytearray(64 << 20)  # touched: resident
    assert resident_bytes() - before >= 60 << 20
    assert 0 < resident_bytes() < machine_bytes()
    del block


@pytest.mark.parametrize(
    ("v2", "v1", "expected_gib"),
    [
        ("max\n", None, None),  # cgroup v2, no limit: the machine's RAM
        ("1073741824\n", None, 1),  # a pod's limits.memory: 1Gi
        (None, "9223372036854771712\n", None),  # cgroup v1's "no limit"
        (None, "2147483648\n", 2),
    ],
)
def test_the_limit_is_the_cgroups_else_the_machines(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    v2: str | None,
    v1: str | None,
    expected_gib: int | None,
) -> None:
    files = (tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes")
    for path, text in zip(files, (v2, v1), strict=True):
        if text is not None:
            path.write_text(text)
    monkeypatch.setattr(process_memory, "CGROUP_LIMITS", files)
    expected = machine_bytes() if expected_gib is None else expected_gib << 30
    assert memory_limit_bytes() == expected
