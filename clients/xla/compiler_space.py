"""The part of a config spec the installed jaxlib accepts, probed once per process.

A spec's columns name compiler options, and jaxlibs differ:
``xla_cpu_use_fusion_emitters`` (``xla_cpu/1``) is gone from jaxlib 0.11.1, where
naming it fails the compile. So
callers never sample, rank, tune, decide or apply a row that sets a column this
jaxlib rejects: ``supported(spec)`` is the set of columns it accepts,
``restrict(rows, spec)`` keeps the rows that set no other column,
``applicable(row, spec)`` / ``why_not(row, spec)`` judge one row (a stored decision
whose row sets a rejected column is stale, never a crash).

Each column is probed by compiling a tiny while-loop program (``compile_with``)
under the smallest valid change of the spec's default row that sets it:

- a top-level option must compile: an unknown one raises "No such compile option",
  an unknown enum value raises too (both seen on jaxlib 0.10.2);
- an ``xla_backend_extra_options`` key must also be *known*: XLA silently ignores an
  unknown key in that map, so compiling a good value proves nothing. A known key
  with an unparsable value fails ("Failed to parse value for: KEY"), an unknown one
  compiles: that test depends only on XLA reading the key, whereas "does the
  optimized HLO change" depends on the probe program exercising the option and
  would call a real option unsupported wherever it happens not to bite. (Its
  limit: a string-valued map option would accept the bad value and read as
  unsupported; ``xla_cpu/2``'s map options are numbers.) Probing through
  ``compile_with`` also checks the route end to end: a jax on which the map
  silently failed to reach XLA would show its keys as unknown, not as applied.

Each column is probed at most once per process and only when asked about
(``functools.cache``): judging one row compiles only for the columns it sets, so
``jit``'s first lookup costs a compile or two, not the whole spec's ~2 s; a rejected
column is logged once, when first met.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Hashable, Mapping
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from xla_costmodel.clients.xla.compile_options import CompileOptionsError, compile_with
from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2
from xla_costmodel.tpugraphs.xla_cpu import F32, OptionValue
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions

log = logging.getLogger(__name__)
BAD_VALUE = "not_a_value_for_probing"


class Spec(Hashable, Protocol):
    """What probing needs of a spec; the ``tpugraphs.xla_cpu*`` modules are ones."""

    @property
    def SPEC(self) -> str: ...

    @property
    def COLUMNS(self) -> tuple[str, ...]: ...

    def default_row(self) -> F32: ...

    def to_options(
        self, row: npt.ArrayLike
    ) -> CompilerOptions | Mapping[str, OptionValue]: ...


SPECS: dict[str, Spec] = {xla_cpu.SPEC: xla_cpu, xla_cpu2.SPEC: xla_cpu2}


def supported(spec: str | Spec) -> frozenset[str]:
    """The columns of ``spec`` this jaxlib accepts (ValueError: unknown spec name)."""
    return frozenset(c for c, why in rejected(spec).items() if why is None)


def rejected(spec: str | Spec) -> Mapping[str, str | None]:
    """column -> why this jaxlib rejects it, or None when it is accepted."""
    return _probe(_resolve(spec))


def why_not(row: npt.ArrayLike, spec: str | Spec) -> str | None:
    """Why ``row`` cannot be applied with this jaxlib, or None; never raises."""
    try:
        resolved = _resolve(spec)
    except ValueError as exc:
        return str(exc)
    try:
        arr = np.asarray(row, dtype=np.float32)
        resolved.to_options(arr)  # validates the row
    except (ValueError, TypeError) as exc:
        return f"invalid {resolved.SPEC} row: {exc}"
    # Only the columns this row sets are probed (each once per process): jit's first
    # lookup pays a compile or two, not the whole spec's ~2 s.
    default = resolved.default_row()
    stale = [
        f"{c} ({why})"
        for k, c in enumerate(resolved.COLUMNS)
        if arr[k] != default[k] and (why := _column(resolved, k)) is not None
    ]
    if stale:
        return f"stale: this jaxlib rejects {'; '.join(stale)}"
    return None


def applicable(row: npt.ArrayLike, spec: str | Spec) -> bool:
    """Whether ``row`` sets only columns this jaxlib accepts (see ``why_not``)."""
    return why_not(row, spec) is None


def restrict(rows: npt.ArrayLike, spec: str | Spec) -> F32:
    """The rows [m, W] of ``rows`` [n, W] that ``applicable`` keeps, in order."""
    arr = np.asarray(rows, dtype=np.float32)
    keep = [k for k in range(len(arr)) if applicable(arr[k], spec)]
    return arr[keep]


def _resolve(spec: str | Spec) -> Spec:
    if not isinstance(spec, str):
        return spec
    if spec not in SPECS:
        raise ValueError(f"unknown spec {spec!r} (known: {', '.join(SPECS)})")
    return SPECS[spec]


@functools.cache
def _probe(spec: Spec) -> Mapping[str, str | None]:
    return {column: _column(spec, k) for k, column in enumerate(spec.COLUMNS)}


@functools.cache
def _column(spec: Spec, k: int) -> str | None:
    """Why this jaxlib rejects column ``k`` of ``spec``, or None; a rejection is
    logged here, so once per column and process."""
    row = _setting(spec, spec.default_row(), k)
    why = None if row is None else _accepts(_options(spec.to_options(row)))
    if why is not None:
        log.warning(
            "%s: skipping option %s, jaxlib %s rejects it: %s",
            spec.SPEC,
            spec.COLUMNS[k],
            _jaxlib_version(),
            why,
        )
    return why


def _setting(spec: Spec, default: F32, k: int) -> F32 | None:
    """The smallest valid change of ``default`` that flips column ``k``, or None
    (the default level of a one-hot group: choosing it sets nothing)."""
    row = default.copy()
    row[k] = 1.0 - row[k]
    for j in [None, *np.flatnonzero(default)]:  # a one-hot group drops its default
        candidate = row.copy()
        if j is not None:
            if j == k:
                continue
            candidate[j] = 0.0
        try:
            spec.to_options(candidate)
        except ValueError:
            continue
        return candidate
    return None


def _options(options: CompilerOptions | Mapping[str, OptionValue]) -> CompilerOptions:
    if isinstance(options, CompilerOptions):
        return options
    return CompilerOptions(compiler_options=options)


def accepts(options: CompilerOptions) -> str | None:
    """Why this jaxlib rejects ``options`` (one compile of a tiny program, cached per
    distinct options), or None when it compiles them and knows every map key."""
    return _accepts(options)


def _accepts(options: CompilerOptions) -> str | None:
    top = tuple(sorted(options.compiler_options.items()))
    extra = tuple(sorted(options.extra_options.items()))
    return _accepts_cached(top, extra)


@functools.cache
def _accepts_cached(
    top: tuple[tuple[str, OptionValue], ...], extra: tuple[tuple[str, str], ...]
) -> str | None:
    error = _compile_error(
        CompilerOptions(compiler_options=dict(top), extra_options=dict(extra))
    )
    if error is not None:
        return error
    unknown = [key for key, _ in extra if not _known_extra_key(key)]
    if unknown:
        return f"{xla_cpu2.EXTRA_KEY} key {', '.join(unknown)} unknown (ignored)"
    return None


@functools.cache
def _known_extra_key(key: str) -> bool:
    """XLA reads a known key's value (a bad one fails); it ignores an unknown key."""
    return _compile_error(CompilerOptions(extra_options={key: BAD_VALUE})) is not None


def _compile_error(options: CompilerOptions) -> str | None:
    try:
        compile_with(_probe_program(), options)
    except CompileOptionsError as exc:
        return str(exc)
    except Exception as exc:  # XLA raises its own types; any one means rejected
        lines = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {lines[0][:200] if lines else ''}"
    return None


@functools.cache
def _probe_program() -> Any:
    """A jitted while loop over 4 KB of state, lowered once (no dot: hoistable)."""
    import jax
    import jax.numpy as jnp

    def loop(x: Any) -> Any:
        return jax.lax.fori_loop(0, 8, lambda i, s: jnp.sin(s) + 0.5 * s, x)

    return jax.jit(loop).lower(jnp.ones((1024,), jnp.float32))


def _jaxlib_version() -> str:
    import jaxlib

    return str(getattr(jaxlib, "__version__", "?"))
