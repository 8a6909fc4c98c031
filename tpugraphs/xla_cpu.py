"""The ``xla_cpu/1`` config spec: XLA:CPU compiler options <-> one float32 row.

One config per program (like the tile collection): a row of ``WIDTH`` = 17 values,
each 0 or 1, so a model reads every option as a bit. ``to_options(row)`` gives the
``compiler_options`` dict for ``jax.jit(f).lower(...).compile(compiler_options=...)``
(only options that differ from XLA's defaults, so the default row gives ``{}``);
``from_options`` is its inverse. numpy only: the service and the client use it too.

    col  name                          option (value when the bit is 1)
    0    ynn_dot                       xla_cpu_experimental_ynn_fusion_type has
    1    ynn_eltwise                     LIBRARY_FUSION_TYPE_<NAME> (comma-separated
    2    ynn_reduce                      full enum names); XLA's default set is
    3    ynn_individual_dot              {REDUCE, INDIVIDUAL_DOT,
    4    ynn_individual_convolution      INDIVIDUAL_CONVOLUTION} (jaxlib 0.10.2)
    5    disable_fusion                xla_disable_hlo_passes has "fusion"
    6    disable_dot_library_rewriter    ... "dot-library-rewriter"
    7    disable_algsimp                 ... "algsimp"
    8    disable_cpu_parallel_task_assigner ... "cpu-parallel-task-assigner"
    9    disable_transpose_folding       ... "transpose-folding"
    10   disable_reshape_mover           ... "reshape-mover"
    11   disable_cse                     ... "cse"
    12   scheduler_default             xla_cpu_scheduler_type one-hot: exactly one of
    13   scheduler_memory_optimized      12..14 is 1; CPU_SCHEDULER_TYPE_DEFAULT is
    14   scheduler_concurrency_optimized XLA's default
    15   use_fusion_emitters           xla_cpu_use_fusion_emitters (default true)
    16   copy_insertion_region_analysis  xla_cpu_copy_insertion_use_region_analysis
                                       (default false)

The default set of ``ynn_*`` was found by compiling programs under every subset and
comparing the optimized HLO with the default compile's (identical for the set above;
``LIBRARY_FUSION_TYPE_DOT`` changed nothing while INDIVIDUAL_DOT was set). Options
that changed neither the optimized HLO nor the runtime in our probes
(``xla_cpu_max_isa``, ``xla_cpu_prefer_vector_width``, ``xla_cpu_use_xnnpack``, the
xnn fusion options) are left out, and so is ``xla_cpu_enable_fast_math``, which
changes numerics. ``sample(n, seed)`` draws n distinct rows, row 0 the default; it
never draws ``ynn_eltwise`` together with ``disable_algsimp``: with jaxlib 0.10.2 that
pair made XLA:CPU segfault (compiling or running) on 3 of 10 such configs for keras
ResNet50, which a tuner could not use anyway. ``to_options`` still encodes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import numpy as np
import numpy.typing as npt

SPEC: Final = "xla_cpu/1"
F32 = npt.NDArray[np.float32]
OptionValue = str | bool | int

YNN_KEY: Final = "xla_cpu_experimental_ynn_fusion_type"
PASSES_KEY: Final = "xla_disable_hlo_passes"
SCHEDULER_KEY: Final = "xla_cpu_scheduler_type"
EMITTERS_KEY: Final = "xla_cpu_use_fusion_emitters"
REGION_KEY: Final = "xla_cpu_copy_insertion_use_region_analysis"

YNN_TYPES: Final = (
    "DOT",
    "ELTWISE",
    "REDUCE",
    "INDIVIDUAL_DOT",
    "INDIVIDUAL_CONVOLUTION",
)
YNN_DEFAULT: Final = frozenset({"REDUCE", "INDIVIDUAL_DOT", "INDIVIDUAL_CONVOLUTION"})
YNN_PREFIX: Final = "LIBRARY_FUSION_TYPE_"
PASSES: Final = (
    "fusion",
    "dot-library-rewriter",
    "algsimp",
    "cpu-parallel-task-assigner",
    "transpose-folding",
    "reshape-mover",
    "cse",
)
SCHEDULERS: Final = ("DEFAULT", "MEMORY_OPTIMIZED", "CONCURRENCY_OPTIMIZED")
SCHEDULER_PREFIX: Final = "CPU_SCHEDULER_TYPE_"

COLUMNS: Final[tuple[str, ...]] = (
    *(f"ynn_{t.lower()}" for t in YNN_TYPES),
    *(f"disable_{p.replace('-', '_')}" for p in PASSES),
    *(f"scheduler_{s.lower()}" for s in SCHEDULERS),
    "use_fusion_emitters",
    "copy_insertion_region_analysis",
)
WIDTH: Final = len(COLUMNS)
_YNN = slice(0, 5)
_PASSES = slice(5, 12)
_SCHED = slice(12, 15)
_EMITTERS = 15
_ELTWISE = 1
_ALGSIMP = 7
_REGION = 16
KNOWN_KEYS: Final = frozenset(
    {YNN_KEY, PASSES_KEY, SCHEDULER_KEY, EMITTERS_KEY, REGION_KEY}
)


def default_row() -> F32:
    """XLA's own defaults: ``to_options(default_row()) == {}``."""
    row = np.zeros(WIDTH, np.float32)
    for k, t in enumerate(YNN_TYPES):
        row[k] = t in YNN_DEFAULT
    row[_SCHED.start] = 1.0
    row[_EMITTERS] = 1.0
    return row


def validate(row: npt.ArrayLike) -> F32:
    """``row`` as a float32 [WIDTH] of 0/1 values with one scheduler bit; else ValueError."""
    arr = np.asarray(row, dtype=np.float32)
    if arr.shape != (WIDTH,):
        raise ValueError(f"an {SPEC} row has shape ({WIDTH},), got {arr.shape}")
    bad = [COLUMNS[k] for k in range(WIDTH) if arr[k] not in (0.0, 1.0)]
    if bad:
        raise ValueError(f"{SPEC} columns must be 0 or 1: {', '.join(bad)}")
    if arr[_SCHED].sum() != 1.0:
        raise ValueError(
            f"exactly one of {', '.join(COLUMNS[_SCHED])} must be 1, got "
            f"{arr[_SCHED].tolist()}"
        )
    return arr


def excluded(row: npt.ArrayLike) -> str | None:
    """Why a valid row is outside what ``sample`` draws (None: it is inside): the
    pair that made XLA:CPU segfault (module docstring). The service refuses such a
    row as a decision: no tuner could have measured it."""
    arr = validate(row)
    if arr[_ELTWISE] and arr[_ALGSIMP]:
        return (
            f"{COLUMNS[_ELTWISE]} with {COLUMNS[_ALGSIMP]} crashes XLA:CPU "
            f"(jaxlib 0.10.2); {SPEC} never samples it"
        )
    return None


def to_options(row: npt.ArrayLike) -> dict[str, OptionValue]:
    """The non-default ``compiler_options`` of one row (ValueError on a bad row)."""
    arr = validate(row)
    options: dict[str, OptionValue] = {}
    ynn = {t for t, bit in zip(YNN_TYPES, arr[_YNN], strict=True) if bit}
    if ynn != YNN_DEFAULT:
        options[YNN_KEY] = ",".join(YNN_PREFIX + t for t in YNN_TYPES if t in ynn)
    passes = [p for p, bit in zip(PASSES, arr[_PASSES], strict=True) if bit]
    if passes:
        options[PASSES_KEY] = ",".join(passes)
    scheduler = SCHEDULERS[int(np.argmax(arr[_SCHED]))]
    if scheduler != SCHEDULERS[0]:
        options[SCHEDULER_KEY] = SCHEDULER_PREFIX + scheduler
    if not arr[_EMITTERS]:
        options[EMITTERS_KEY] = False
    if arr[_REGION]:
        options[REGION_KEY] = True
    return options


def from_options(options: Mapping[str, OptionValue]) -> F32:
    """The row of a ``compiler_options`` dict; ValueError names the bad key or value."""
    unknown = sorted(set(options) - KNOWN_KEYS)
    if unknown:
        raise ValueError(f"options outside {SPEC}: {', '.join(unknown)}")
    row = default_row()
    if YNN_KEY in options:
        row[_YNN] = 0.0
        for name in _split(options[YNN_KEY], YNN_KEY):
            t = name.removeprefix(YNN_PREFIX)
            if not name.startswith(YNN_PREFIX) or t not in YNN_TYPES:
                raise ValueError(f"{YNN_KEY}: unknown fusion type {name!r}")
            row[YNN_TYPES.index(t)] = 1.0
    for name in _split(options.get(PASSES_KEY, ""), PASSES_KEY):
        if name not in PASSES:
            raise ValueError(f"{PASSES_KEY}: pass {name!r} is not in {SPEC}")
        row[_PASSES.start + PASSES.index(name)] = 1.0
    if SCHEDULER_KEY in options:
        value = options[SCHEDULER_KEY]
        s = value.removeprefix(SCHEDULER_PREFIX) if isinstance(value, str) else ""
        if (
            not isinstance(value, str)
            or not value.startswith(SCHEDULER_PREFIX)
            or s not in SCHEDULERS
        ):
            raise ValueError(f"{SCHEDULER_KEY}: unknown scheduler {value!r}")
        row[_SCHED] = 0.0
        row[_SCHED.start + SCHEDULERS.index(s)] = 1.0
    row[_EMITTERS] = _bool(options, EMITTERS_KEY, True)
    row[_REGION] = _bool(options, REGION_KEY, False)
    return row


def sample(n: int, seed: int) -> F32:
    """``n`` distinct rows [n, WIDTH], row 0 the default, the same for the same seed.

    Bits are drawn so typical configs stay compilable and near the default: each
    ynn type with p=0.5, each pass disabled with p=0.2, the scheduler uniformly,
    fusion emitters off with p=0.25, region analysis on with p=0.3.
    """
    space = 2**5 * 2**7 * 3 * 2 * 2 * 3 // 4  # less the eltwise + no-algsimp quarter
    if not 1 <= n <= space:
        raise ValueError(f"n must be in [1, {space}], got {n}")
    rng = np.random.default_rng(seed)
    rows = [default_row()]
    seen = {rows[0].tobytes()}
    while len(rows) < n:
        row = np.zeros(WIDTH, np.float32)
        row[_YNN] = rng.random(5) < 0.5
        row[_PASSES] = rng.random(7) < 0.2
        row[_SCHED.start + int(rng.integers(3))] = 1.0
        row[_EMITTERS] = rng.random() >= 0.25
        row[_REGION] = rng.random() < 0.3
        if row[_ELTWISE] and row[_ALGSIMP]:
            continue  # segfaults XLA:CPU on some programs (see the module docstring)
        if row.tobytes() not in seen:
            seen.add(row.tobytes())
            rows.append(row)
    return np.stack(rows)


def _split(value: OptionValue, key: str) -> list[str]:
    if not isinstance(value, str):
        raise ValueError(f"{key}: expected a comma-separated string, got {value!r}")
    return [part.strip() for part in value.split(",") if part.strip()]


def _bool(options: Mapping[str, OptionValue], key: str, default: bool) -> float:
    value = options.get(key, default)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        value = value.lower() == "true"
    if not isinstance(value, bool):
        raise ValueError(f"{key}: expected a bool, got {value!r}")
    return float(value)
