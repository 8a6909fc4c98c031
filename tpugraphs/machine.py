"""What machine a measurement was taken on: CPU model, ISA flags, cores, affinity, load.

Standard library only (``/proc/cpuinfo``, ``os``), so data sidecars, datasheets and
benchmarks describe their machine the same way.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

# The ISA extensions that decide which kernels XLA:CPU and its libraries can emit.
ISA_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512dq",
    "avx512bw",
    "avx512vl",
    "avx512cd",
    "avx512_vnni",
    "avx512_bf16",
    "avx512ifma",
    "avx512vbmi",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)


def cpuinfo(path: str | Path = "/proc/cpuinfo") -> dict[str, str]:
    """The first processor block of ``/proc/cpuinfo`` as key -> value ({} if absent)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def cpu_model(info: dict[str, str] | None = None) -> str:
    info = cpuinfo() if info is None else info
    return info.get("model name") or platform.processor() or "unknown"


def isa_flags(info: dict[str, str] | None = None) -> list[str]:
    """The ``ISA_FLAGS`` this CPU has, in ``ISA_FLAGS`` order."""
    info = cpuinfo() if info is None else info
    have = set(info.get("flags", "").split())
    return [f for f in ISA_FLAGS if f in have]


def affinity() -> list[int]:
    """CPUs this process may run on (all CPUs where affinity is unsupported)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def describe() -> dict[str, Any]:
    """The machine as a JSON-ready dict, for a sidecar or a datasheet."""
    info = cpuinfo()
    return {
        "cpu_model": cpu_model(info),
        "isa_flags": isa_flags(info),
        "cpu_family": info.get("cpu family"),
        "cpu_model_id": info.get("model"),
        "cores": os.cpu_count(),
        "affinity": affinity(),
        "load_average": load_average(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def isa_level(flags: list[str]) -> str:
    """The coarse ISA tier XLA:CPU's code generation depends on most."""
    have = set(flags)
    if "avx512f" in have:
        return "avx512"
    if "avx2" in have:
        return "avx2"
    return "avx" if "avx" in have else "sse"


def target(info: dict[str, str] | None = None) -> str:
    """The hardware name measurements of this CPU are stored under (the service's
    ``target``): ``cpu-<vendor>-<family>.<model>-<isa tier>``, e.g.
    ``cpu-amd-25.17-avx512``. Runtimes of different targets are never mixed, so two
    machines of one kind with different CPUs get different names."""
    info = cpuinfo() if info is None else info
    vendor = info.get("vendor_id", "unknown").lower().replace("authentic", "")
    vendor = {"amd": "amd", "genuineintel": "intel"}.get(vendor, vendor) or "unknown"
    family, model = info.get("cpu family", "0"), info.get("model", "0")
    return f"cpu-{vendor}-{family}.{model}-{isa_level(isa_flags(info))}"


def compiler() -> str | None:
    """The XLA a measurement here is compiled by, as ``"jaxlib 0.10.2"`` (None when
    jaxlib is not installed): what a decision or a runtime is only valid for. Read
    from the installed distribution's metadata, so jax is never imported."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"jaxlib {version('jaxlib')}"
    except PackageNotFoundError:
        return None
