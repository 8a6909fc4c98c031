"""How much memory this process holds, and how much it may hold before it is killed.

    resident_bytes()       this process's RSS (Linux ``/proc/self/statm``)
    memory_limit_bytes()   the cgroup's memory limit (v2 or v1), else the machine's RAM

The service's own view, so that "memory near its limit" can be alerted on wherever it
runs, with no cAdvisor or node exporter beside it: in a pod the cgroup limit is the
container's ``resources.limits.memory``, under Docker Compose ``mem_limit``, and on a
bare machine the kernel's OOM killer acts at the machine's RAM.
"""

from __future__ import annotations

import os
from pathlib import Path

CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),  # cgroup v2
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),  # cgroup v1
)
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def resident_bytes() -> float:
    """RSS of this process in bytes (0 where ``/proc`` is not there)."""
    try:
        return float(int(Path("/proc/self/statm").read_text().split()[1]) * PAGE_BYTES)
    except (OSError, IndexError, ValueError):
        return 0.0


def machine_bytes() -> float:
    return float(os.sysconf("SC_PHYS_PAGES") * PAGE_BYTES)


def memory_limit_bytes() -> float:
    """The smaller of the cgroup's limit and the machine's RAM (v1 reports "no
    limit" as a huge number, v2 as ``max``)."""
    limit = machine_bytes()
    for path in CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            limit = min(limit, float(text))
    return limit
