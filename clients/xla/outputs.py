"""Whether a config's outputs are the default's: NaN included, at the outputs' scale.

    compare(outputs, reference, rtol=1e-3) -> OutputCheck(ok, worst, reason)

One check for every place that runs a candidate beside XLA's default: the tuner's
bench, ``costmodel collect``'s probe and ``jit``'s verification of a fleet decision.
The two output pytrees must have the same structure, shapes and dtypes. Integer,
bool and other non-float leaves must be equal. Float leaves (complex ones as their
real and imaginary parts) must have the same NaN, +inf and -inf positions: a NaN
where the default has a number fails, and so does the reverse. Their finite values
are compared leaf by leaf, relative to the leaf's magnitude but never to less than a
floor set by the largest magnitude of that dtype anywhere in the output:

    scale(leaf) = max(max|ref_leaf|, sqrt(eps(dtype)) * max|ref over every leaf of that dtype|)
    worst = max over float leaves of max|out - ref| / scale(leaf);  ok: worst <= rtol

A leaf that is zero in exact arithmetic (a gradient that cancels) holds only rounding
noise, a few ulps of the terms it summed; relative to itself that noise is 100 %,
relative to the floor (for float32, 3.5e-4 of the outputs' largest value) it is
nothing. A leaf at least that large is judged relative to itself, as before, so a
3 % change of a state vector fails at any sensible ``rtol``. A mismatch of
structure, masks or exact values makes ``worst`` infinite.

The check the tuner used before, ``max(worst, max|a - b| / max|ref|)`` per leaf, was
blind to NaN: ``max(0.0, nan) == 0.0``, so an output that became NaN passed.
jax is imported by ``compare`` (to flatten the pytrees), never at import.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]
DEFAULT_RTOL = 1e-3


@dataclass(frozen=True, kw_only=True)
class OutputCheck:
    """``ok``: the outputs match; ``worst``: the largest scaled difference of a
    finite value (``inf`` for a structure, NaN/inf-mask or exact mismatch, 0.0 when
    nothing was compared); ``reason``: the first mismatch, or "" when ok."""

    ok: bool
    worst: float
    reason: str = ""


def compare(outputs: Any, reference: Any, *, rtol: float = DEFAULT_RTOL) -> OutputCheck:
    """``outputs`` (a candidate's result pytree) against ``reference`` (the
    default's), within ``rtol`` at the scale the module docstring gives."""
    import jax

    got, tree = jax.tree_util.tree_flatten_with_path(outputs)
    want, ref_tree = jax.tree_util.tree_flatten_with_path(reference)
    if str(tree) != str(ref_tree):  # a PyTreeDef prints its whole structure
        return _fail(f"output structure {tree} is not the default's {ref_tree}")
    names = [jax.tree_util.keystr(path) or "output" for path, _ in want]
    return compare_leaves(
        [np.asarray(x) for _, x in got],
        [np.asarray(x) for _, x in want],
        names=names,
        rtol=rtol,
    )


def compare_leaves(
    outputs: Sequence[Array],
    reference: Sequence[Array],
    *,
    names: Sequence[str] | None = None,
    rtol: float = DEFAULT_RTOL,
) -> OutputCheck:
    """``compare`` of two already flattened lists of leaves (numpy only)."""
    names = names or [f"output {k}" for k in range(len(reference))]
    if len(outputs) != len(reference):
        return _fail(f"{len(outputs)} output leaves, the default has {len(reference)}")
    floats: list[tuple[str, Array, Array, float]] = []
    for name, a, b in zip(names, outputs, reference, strict=True):
        if a.shape != b.shape or a.dtype != b.dtype:
            return _fail(f"{name}: {_kind(a)}, the default's is {_kind(b)}")
        eps = _float_eps(b.dtype)
        if eps is None:
            if not np.array_equal(a, b):
                bad = int(np.count_nonzero(a != b)) if a.shape else 1
                return _fail(f"{name} ({_kind(b)}): {bad} of {b.size} values differ")
            continue
        a64, b64 = _as_float64(a), _as_float64(b)
        masks = _masks_differ(name, _kind(b), a64, b64)
        if masks:
            return _fail(masks)
        floats.append((name, a64, b64, eps))
    return _finite_check(floats, rtol)


def _finite_check(
    floats: list[tuple[str, Array, Array, float]], rtol: float
) -> OutputCheck:
    """The finite values, each leaf at ``scale(leaf)``; masks already match."""
    largest: dict[float, float] = {}  # by dtype (its eps): max |ref|
    for _, _, b, eps in floats:
        largest[eps] = max(largest.get(eps, 0.0), _max_abs(b))
    worst, where = 0.0, ""
    for name, a, b, eps in floats:
        finite = np.isfinite(b)
        diff = _max_abs(a[finite] - b[finite])
        scale = max(_max_abs(b), math.sqrt(eps) * largest[eps], 1e-300)
        if diff / scale > worst:
            worst, where = diff / scale, name
    if not worst <= rtol:
        return OutputCheck(
            ok=False,
            worst=worst,
            reason=f"{where}: differs by {worst:.3g} of its scale (more than {rtol:g})",
        )
    return OutputCheck(ok=True, worst=worst)


def _masks_differ(name: str, kind: str, a: Array, b: Array) -> str:
    """Where ``a`` has NaN/+inf/-inf and ``b`` does not, or the reverse ("" if same)."""
    for what, test in (
        ("NaN", np.isnan),
        ("+inf", lambda x: x == np.inf),
        ("-inf", lambda x: x == -np.inf),
    ):
        ma, mb = test(a), test(b)
        if not np.array_equal(ma, mb):
            extra = int(np.count_nonzero(ma & ~mb))
            missing = int(np.count_nonzero(mb & ~ma))
            return (
                f"{name} ({kind}): {what} at {extra} value(s) where the default has "
                f"a number, a number at {missing} where it has {what}"
            )
    return ""


def _as_float64(x: Array) -> Array:
    """Complex as [real, imag] stacked; any float dtype (bfloat16 too) as float64."""
    if x.dtype.kind == "c":
        return np.stack([x.real, x.imag]).astype(np.float64)
    return x.astype(np.float64)


def _float_eps(dtype: np.dtype[Any]) -> float | None:
    """Machine epsilon of a float or complex dtype (ml_dtypes' too); None otherwise."""
    if dtype.kind in "fc":
        return float(np.finfo(dtype).eps)
    if dtype.kind == "V":  # bfloat16, float8_*: ml_dtypes, installed with jax
        try:
            import ml_dtypes

            return float(ml_dtypes.finfo(dtype).eps)  # type: ignore[no-untyped-call]
        except (ImportError, ValueError, TypeError):
            return None
    return None


def _max_abs(x: Array) -> float:
    finite = x[np.isfinite(x)]
    return float(np.max(np.abs(finite))) if finite.size else 0.0


def _kind(x: Array) -> str:
    return f"{x.dtype}{list(x.shape)}"


def _fail(reason: str) -> OutputCheck:
    return OutputCheck(ok=False, worst=math.inf, reason=reason)


__all__ = ["DEFAULT_RTOL", "OutputCheck", "compare", "compare_leaves"]
