"""The ``xla_cpu/2`` config spec: ``xla_cpu/1`` plus XLA:CPU's loop-hoisting threshold.

A row of ``WIDTH`` = 20 values, each 0 or 1. Columns 0..16 are the ``xla_cpu/1``
columns in the same order with the same meaning (``tpugraphs.xla_cpu``); three more
one-hot columns choose ``xla_cpu_small_while_loop_byte_threshold``:

    col  name                        xla_cpu_small_while_loop_byte_threshold
    17   small_while_loop_default    XLA's default (1024 bytes): no map entry
    18   small_while_loop_65536      65536
    19   small_while_loop_1e9        1000000000

A while loop whose accessed bytes are under the threshold runs as one compiled call
instead of thunk by thunk (unless it holds a dot, convolution, custom call or
scatter). It lives in ``xla_backend_extra_options``, a map in XLA's DebugOptions,
which jaxlib 0.10.2 refuses through ``compile(compiler_options=...)``; so
``to_options`` returns a ``CompilerOptions`` holding the top-level options and the
map separately, and ``clients.xla.compile_options.compile_with`` applies both to
one compile. A ``xla_cpu/1`` row is the ``xla_cpu/2`` row with the threshold at its
default (``upgrade_v1``; ``downgrade`` is its inverse, None for a non-default level).

Left out on purpose (measured on jaxlib 0.10.2; docs/xla-cpu.md, "The loop threshold"):
``xla_cpu_opt_preset`` (FAST_COMPILE gained up to 1.12x on one transformer but
changed a training step's outputs by a 1.4 relative difference: a space a tuner
samples must not change results), and the LLVM options in the same map
(``xla_cpu_disable_slp_vectorizer``, ``xla_cpu_disable_loop_unrolling``,
``xla_cpu_optimize_for_size``), which mostly lost (0.31-0.73x on several programs).
The threshold's levels are the ones that won: 65536 (8.56x on an ODE solve) and 1e9
(2.81x on NUTS sampling); 0 (no hoisting) only lost (0.23x on a neuron simulation).

numpy only: the service and the client use it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from xla_costmodel.tpugraphs import xla_cpu
from xla_costmodel.tpugraphs.spec import OPCODE_IDS
from xla_costmodel.tpugraphs.xla_cpu import F32, OptionValue

SPEC: Final = "xla_cpu/2"
EXTRA_KEY: Final = "xla_backend_extra_options"
THRESHOLD_KEY: Final = "xla_cpu_small_while_loop_byte_threshold"
THRESHOLD_DEFAULT: Final = 1024
THRESHOLD_LEVELS: Final = (THRESHOLD_DEFAULT, 65536, 1_000_000_000)
THRESHOLD_NAMES: Final = ("default", "65536", "1e9")
KNOWN_EXTRA_KEYS: Final = frozenset({THRESHOLD_KEY})

COLUMNS: Final[tuple[str, ...]] = (
    *xla_cpu.COLUMNS,
    *(f"small_while_loop_{n}" for n in THRESHOLD_NAMES),
)
WIDTH: Final = len(COLUMNS)
V1_WIDTH: Final = xla_cpu.WIDTH
_V1 = slice(0, V1_WIDTH)
_THRESHOLD = slice(V1_WIDTH, V1_WIDTH + len(THRESHOLD_LEVELS))
_WHILE: Final = OPCODE_IDS["while"]
_V1_SAMPLE_SPACE: Final = 2**5 * 2**7 * 3 * 2 * 2 * 3 // 4  # xla_cpu.sample's space


@dataclass(frozen=True, kw_only=True)
class CompilerOptions:
    """One compile's options: top-level DebugOptions fields and the extra-options map.

    ``compiler_options`` goes to ``Lowered.compile(compiler_options=...)``;
    ``extra_options`` are entries of ``xla_backend_extra_options`` (key -> value,
    both strings). Both empty is XLA's default compile.
    """

    compiler_options: Mapping[str, OptionValue] = field(default_factory=dict)
    extra_options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if EXTRA_KEY in self.compiler_options:
            raise ValueError(f"{EXTRA_KEY} goes in extra_options, not compiler_options")
        for key, value in self.extra_options.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError(f"{EXTRA_KEY} entries are strings: {key!r}={value!r}")
            # "k=v,k=v" is how XLA_FLAGS spells the map: neither may hold , or =
            if not key or any(c in key + value for c in ",="):
                raise ValueError(f"{EXTRA_KEY} entry {key!r}={value!r}: no ',' or '='")

    def is_default(self) -> bool:
        return not self.compiler_options and not self.extra_options

    def flat(self) -> dict[str, OptionValue]:
        """One dict: the top-level options plus the map spelled as XLA_FLAGS spells
        it, ``{EXTRA_KEY: "k=v,k=v"}`` (keys sorted, so equal maps are equal
        strings); what jax is handed and what a wire message can carry."""
        out: dict[str, OptionValue] = dict(self.compiler_options)
        if self.extra_options:
            pairs = sorted(self.extra_options.items())
            out[EXTRA_KEY] = ",".join(f"{k}={v}" for k, v in pairs)
        return out

    @classmethod
    def from_flat(cls, options: Mapping[str, OptionValue]) -> CompilerOptions:
        """The inverse of ``flat``; ValueError on a badly spelled map."""
        top = {k: v for k, v in options.items() if k != EXTRA_KEY}
        spelled = options.get(EXTRA_KEY, "")
        if not isinstance(spelled, str):
            raise ValueError(f"{EXTRA_KEY} must be 'k=v,k=v', got {spelled!r}")
        pairs = [p.partition("=") for p in spelled.split(",") if p]
        if any(not k or not sep for k, sep, _ in pairs):
            raise ValueError(f"{EXTRA_KEY} must be 'k=v,k=v', got {spelled!r}")
        return cls(compiler_options=top, extra_options={k: v for k, _, v in pairs})


def default_row() -> F32:
    """XLA's own defaults: ``to_options(default_row())`` is empty."""
    return upgrade_v1(xla_cpu.default_row())


def validate(row: npt.ArrayLike) -> F32:
    """``row`` as a float32 [WIDTH]: a valid ``xla_cpu/1`` head and one threshold bit."""
    arr = np.asarray(row, dtype=np.float32)
    if arr.shape != (WIDTH,):
        raise ValueError(f"an {SPEC} row has shape ({WIDTH},), got {arr.shape}")
    xla_cpu.validate(arr[_V1])
    tail = arr[_THRESHOLD]
    if not np.isin(tail, (0.0, 1.0)).all() or tail.sum() != 1.0:
        raise ValueError(
            f"exactly one of {', '.join(COLUMNS[_THRESHOLD])} must be 1 (the rest "
            f"0), got {tail.tolist()}"
        )
    return arr


def excluded(row: npt.ArrayLike) -> str | None:
    """Why ``sample`` never draws this (valid) row, or None: ``xla_cpu.excluded``
    of its ``xla_cpu/1`` head (the threshold adds no exclusion)."""
    return xla_cpu.excluded(validate(row)[_V1])


def to_options(row: npt.ArrayLike) -> CompilerOptions:
    """The non-default options of one row (ValueError on a bad row)."""
    arr = validate(row)
    level = THRESHOLD_LEVELS[int(np.argmax(arr[_THRESHOLD]))]
    extra = {} if level == THRESHOLD_DEFAULT else {THRESHOLD_KEY: str(level)}
    return CompilerOptions(
        compiler_options=xla_cpu.to_options(arr[_V1]), extra_options=extra
    )


def from_options(options: CompilerOptions | Mapping[str, OptionValue]) -> F32:
    """The row of some options (a mapping is read as ``CompilerOptions.flat``
    spells them); ValueError names the bad key or value."""
    if not isinstance(options, CompilerOptions):
        options = CompilerOptions.from_flat(options)
    unknown = sorted(set(options.extra_options) - KNOWN_EXTRA_KEYS)
    if unknown:
        raise ValueError(f"{EXTRA_KEY} keys outside {SPEC}: {', '.join(unknown)}")
    row = upgrade_v1(xla_cpu.from_options(options.compiler_options))
    value = options.extra_options.get(THRESHOLD_KEY, str(THRESHOLD_DEFAULT))
    try:
        level = THRESHOLD_LEVELS.index(int(value))
    except ValueError:
        raise ValueError(
            f"{THRESHOLD_KEY}: {value!r} is not one of {THRESHOLD_LEVELS}"
        ) from None
    row[_THRESHOLD] = 0.0
    row[_THRESHOLD.start + level] = 1.0
    return row


def has_loops(node_opcode: npt.ArrayLike) -> bool:
    """Whether a program's graph (TpuGraphs opcode ids) holds a while loop: the only
    place the loop threshold acts."""
    return bool(np.isin(np.asarray(node_opcode), _WHILE).any())


def for_program(rows: npt.ArrayLike, loops: bool) -> F32:
    """The rows of ``rows`` [n, WIDTH] that can differ on a program (in order).

    Without a while loop the threshold cannot change the compile (XLA's hoisting pass
    only rewrites while loops): a row with a non-default level is the same executable
    as its default-level twin, so it is dropped rather than measured again and the
    space is ``xla_cpu/1``'s. With loops every row stays.
    """
    arr = np.asarray(rows, dtype=np.float32)
    return arr if loops else arr[arr[:, _THRESHOLD.start] == 1.0]


def sample_for_program(n: int, seed: int, loops: bool) -> F32:
    """``n`` rows of ``sample``'s sequence that can differ on a program: with loops
    ``sample(n, seed)``; without, the first ``n`` of ``for_program`` over a longer
    prefix of the same sequence (``sample`` is prefix-stable), so asking for n
    candidates gives n, as many as the program can tell apart allows."""
    if loops:
        return sample(n, seed)
    space = _V1_SAMPLE_SPACE  # the default-level rows of the whole space
    if not 1 <= n <= space:
        raise ValueError(f"n must be in [1, {space}] for a program without loops")
    drawn = n
    while True:
        rows = for_program(sample(drawn, seed), loops=False)
        if len(rows) >= n or drawn >= space:
            return rows[:n]
        drawn = min(2 * drawn, space + len(THRESHOLD_LEVELS) - 1)


def upgrade_v1(row1: npt.ArrayLike) -> F32:
    """The ``xla_cpu/2`` row of a ``xla_cpu/1`` row: the threshold at its default."""
    head = xla_cpu.validate(row1)
    tail = np.zeros(len(THRESHOLD_LEVELS), np.float32)
    tail[0] = 1.0
    return np.concatenate([head, tail])


def upgrade_v1_rows(rows1: npt.ArrayLike) -> F32:
    """``upgrade_v1`` of a batch [C, 17] -> [C, 20] (validated as ``xla_cpu/1`` rows
    by the caller's reader; this only appends the threshold's default bit)."""
    head = np.asarray(rows1, dtype=np.float32)
    if head.ndim != 2 or head.shape[1] != V1_WIDTH:
        raise ValueError(
            f"{xla_cpu.SPEC} rows have shape [C,{V1_WIDTH}], got {head.shape}"
        )
    tail = np.zeros((head.shape[0], len(THRESHOLD_LEVELS)), np.float32)
    tail[:, 0] = 1.0
    return np.concatenate([head, tail], axis=1)


def downgrade(row2: npt.ArrayLike) -> F32 | None:
    """The ``xla_cpu/1`` row of a ``xla_cpu/2`` row; None if it sets the threshold."""
    arr = validate(row2)
    return arr[_V1].copy() if arr[_THRESHOLD.start] else None


def sample(n: int, seed: int) -> F32:
    """``n`` distinct rows [n, WIDTH], the same for the same seed, never ``excluded``.

    Row 0 is the default; rows 1 and 2 (when n allows) are the default with the
    threshold at 65536 and at 1e9, so every program's data holds the option's effect
    alone. The rest are ``xla_cpu.sample(n - 2, seed)``'s rows 1.. (the same draws),
    each with a threshold level of its own stream: default with p=0.5, 65536 and 1e9
    with p=0.25 each. So about half of them are rows an ``xla_cpu/1`` collection of
    the same seed measured too: a fixed option set can be compared across programs
    collected under either spec, and the new levels are drawn often enough to learn
    how they combine with the rest.
    """
    space = _V1_SAMPLE_SPACE + len(THRESHOLD_LEVELS) - 1
    if not 1 <= n <= space:
        raise ValueError(f"n must be in [1, {space}], got {n}")
    alone = [_with_threshold(default_row(), k) for k in range(len(THRESHOLD_LEVELS))]
    v1 = xla_cpu.sample(max(1, n - len(THRESHOLD_LEVELS) + 1), seed)[1:]
    levels = np.random.default_rng([seed, len(THRESHOLD_LEVELS)]).choice(
        len(THRESHOLD_LEVELS), size=len(v1), p=(0.5, 0.25, 0.25)
    )
    rows = alone + [
        _with_threshold(upgrade_v1(r), int(k)) for r, k in zip(v1, levels, strict=True)
    ]
    return np.stack(rows[:n])


def _with_threshold(row: F32, level: int) -> F32:
    row[_THRESHOLD] = 0.0
    row[_THRESHOLD.start + level] = 1.0
    return row
