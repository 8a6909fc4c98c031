"""The output check (``clients/xla/outputs.py``) shared by the tuner's bench,
``collect``'s probe and ``jit``'s verification: numpy cases first (rounding noise on
a zero leaf passes, a 3 % change, a NaN and an exact mismatch fail), then real XLA
compiles (a fast-math NaN, an SDE solve under region analysis, a training step whose
gradient holds a zero leaf under option sets that change its HLO), then the bench."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from xla_costmodel.clients.xla.compile_options import compile_with
from xla_costmodel.clients.xla.outputs import compare, compare_leaves
from xla_costmodel.clients.xla.tune_config import TuneConfig
from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions

F32 = np.float32
RTOL = TuneConfig().max_rel_diff  # the tuner's default tolerance, 1e-3


def _old_rel_diff(leaves: list[Any], reference: list[Any]) -> float:
    """The check ``probe.py`` used before issue 34, verbatim: per leaf
    max|a - b| / max|ref|, the worst over leaves."""
    worst = 0.0
    for a, b in zip(leaves, reference, strict=True):
        b64 = np.asarray(b).astype(np.float64)
        scale = float(np.max(np.abs(b64))) if b64.size else 0.0
        diff = (
            float(np.max(np.abs(np.asarray(a).astype(np.float64) - b64)))
            if b64.size
            else 0.0
        )
        worst = max(worst, diff / max(scale, 1e-30))
    return worst if np.isfinite(worst) else float("inf")


def _training_outputs() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "loss": np.array(1.4994171, F32),
        "grads": {
            "w1": rng.normal(0, 0.3, (64, 128)).astype(F32),
            "shift": np.zeros(1, F32),  # zero in exact arithmetic
            "w2": rng.normal(0, 0.5, (128, 16)).astype(F32),
        },
    }


# -- numpy cases ---------------------------------------------------------------


def test_rounding_noise_on_a_leaf_that_is_zero_in_exact_arithmetic_passes() -> None:
    ref = _training_outputs()
    out = {**ref, "grads": {**ref["grads"], "shift": np.array([-2.97e-8], F32)}}
    check = compare(out, ref, rtol=RTOL)
    assert check.ok and check.reason == ""
    # noise / (sqrt(eps32) * max|ref|): far below the tolerance
    assert 0 < check.worst < RTOL / 10
    # The old per-leaf check called it a 3e22 relative change: every option set
    # that changed a transformer's HLO failed it (issue 34).
    assert _old_rel_diff(_leaves(out), _leaves(ref)) > 1e20


def test_a_bit_identical_output_passes_with_zero_difference() -> None:
    ref = _training_outputs()
    copy = {"loss": ref["loss"].copy(), "grads": dict(ref["grads"])}
    assert compare(copy, ref) == compare(ref, ref)
    assert compare(copy, ref).ok and compare(copy, ref).worst == 0.0


def test_a_three_percent_change_of_a_state_vector_fails() -> None:
    state = np.linspace(-3.0, 12.0, 64).astype(F32)
    ref = (state, np.float32(0.25))
    check = compare((state * F32(1.03), ref[1]), ref, rtol=RTOL)
    assert not check.ok and check.worst == pytest.approx(0.03, rel=1e-3)
    assert "[0]" in check.reason and "0.03" in check.reason
    # ... and so does one of a small leaf beside large ones (judged by itself).
    small = (np.full(8, 2e-2, F32), np.full(8, 50.0, F32))
    assert not compare((small[0] * F32(1.03), small[1]), small, rtol=RTOL).ok
    # A change within the tolerance passes.
    assert compare((state * F32(1 + 1e-5), ref[1]), ref, rtol=RTOL).ok


@pytest.mark.parametrize(
    ("value", "reference", "what"),
    [
        (np.nan, 7.85, "NaN at 1 value(s) where the default has a number"),
        (7.85, np.nan, "a number at 1 where it has NaN"),
        (np.inf, 7.85, "+inf at 1 value(s)"),
        (-np.inf, np.inf, "+inf"),
    ],
)
def test_nan_or_inf_against_a_number_fails(
    value: float, reference: float, what: str
) -> None:
    ref = np.array([1.0, reference, 2.5], F32)
    out = np.array([1.0, value, 2.5], F32)
    check = compare(out, ref)
    assert not check.ok and math.isinf(check.worst)
    assert what in check.reason, check.reason


def test_the_old_check_was_blind_to_nan() -> None:
    ref, out = [np.array([7.85], F32)], [np.array([np.nan], F32)]
    assert max(0.0, math.nan) == 0.0  # why: NaN loses every comparison
    assert _old_rel_diff(out, ref) == 0.0  # a NaN output "matched" the default
    assert not compare_leaves(out, ref).ok


def test_the_same_nan_and_inf_positions_pass() -> None:
    ref = np.array([np.nan, np.inf, -np.inf, 3.0], F32)
    assert compare(ref.copy(), ref).ok


@pytest.mark.parametrize(
    ("out", "ref"),
    [
        (np.array([1, 2, 4], np.int32), np.array([1, 2, 3], np.int32)),
        (np.array([True, False]), np.array([True, True])),
        (np.array(2**40 + 1, np.int64), np.array(2**40, np.int64)),
    ],
)
def test_integer_and_bool_leaves_compare_exactly(out: Any, ref: Any) -> None:
    check = compare(out, ref, rtol=0.5)  # no tolerance applies to them
    assert not check.ok and "differ" in check.reason
    assert compare(ref.copy(), ref, rtol=0.5).ok


@pytest.mark.parametrize(
    ("out", "ref", "what"),
    [
        (np.zeros(3, F32), np.zeros(4, F32), "float32[3]"),
        (np.zeros(3, np.float64), np.zeros(3, F32), "float64[3]"),
        ((np.zeros(3, F32),), [np.zeros(3, F32)], "structure"),
    ],
)
def test_another_structure_shape_or_dtype_fails(out: Any, ref: Any, what: str) -> None:
    check = compare(out, ref)
    assert not check.ok and what in check.reason and math.isinf(check.worst)


def test_bfloat16_and_complex_leaves_are_floats() -> None:
    import ml_dtypes

    b = np.linspace(1, 2, 16).astype(ml_dtypes.bfloat16)
    assert compare(b.copy(), b).ok
    assert not compare((b.astype(F32) * 1.05).astype(ml_dtypes.bfloat16), b).ok
    c = np.array([1 + 2j, 3 - 1j], np.complex64)
    assert compare(c.copy(), c).ok
    assert not compare(np.array([1 + 2j, np.nan], np.complex64), c).ok


# -- real XLA ------------------------------------------------------------------


def test_fast_math_turns_a_nan_guarded_sum_into_nan_and_the_check_fails() -> None:
    """The issue's attack: fast math without NaN semantics compiles the guard away
    (7.85 under the default, NaN here); the old check passed it."""
    import jax
    import jax.numpy as jnp

    def guarded(x: Any) -> Any:
        return jnp.where(jnp.isnan(x), 0.0, x).sum()

    x = jnp.array([1.0, jnp.nan, 2.5, 4.35, jnp.nan], jnp.float32)
    lowered = jax.jit(guarded).lower(x)
    ref = lowered.compile()(x)
    fast = lowered.compile(compiler_options=FAST_MATH)(x)
    assert float(ref) == pytest.approx(7.85) and math.isnan(float(fast))
    check = compare(fast, ref, rtol=RTOL)
    assert not check.ok and "NaN" in check.reason
    assert _old_rel_diff([fast], [ref]) == 0.0


FAST_MATH: dict[str, Any] = {
    "xla_cpu_enable_fast_math": True,
    "xla_cpu_fast_math_honor_nans": False,
}


def _sde(x0: Any, noise: Any, theta: Any) -> Any:
    """Euler-Maruyama for a stochastic Lorenz system, as a ``lax.scan``."""
    import jax.numpy as jnp
    from jax import lax

    def step(x: Any, dw: Any) -> tuple[Any, Any]:
        drift = jnp.stack(
            [
                theta[0] * (x[1] - x[0]),
                x[0] * (theta[1] - x[2]) - x[1],
                x[0] * x[1] - theta[2] * x[2],
            ]
        )
        x = x + 0.01 * drift + 0.05 * dw
        return x, x[0]

    return lax.scan(step, x0, noise)


def test_an_sde_solve_under_region_analysis_is_checked_against_the_default() -> None:
    """Issue 34 saw ``copy_insertion_region_analysis`` change an SDE's final state
    by up to 3 %. This solve is bit-identical under it on jaxlib 0.10.2 (so the
    check passes it); a 3 % change of the same state fails."""
    import jax
    import jax.numpy as jnp

    args = (
        jnp.ones(3, jnp.float32),
        jax.random.normal(jax.random.key(0), (2000, 3), jnp.float32),
        jnp.array([10.0, 28.0, 8 / 3], jnp.float32),
    )
    lowered = jax.jit(_sde).lower(*args)
    ref = lowered.compile()(*args)
    region = lowered.compile(compiler_options={xla_cpu.REGION_KEY: True})(*args)
    identical = all(
        np.array_equal(a, b)
        for a, b in zip(jax.tree.leaves(region), jax.tree.leaves(ref), strict=True)
    )
    check = compare(region, ref, rtol=RTOL)
    assert (check.worst == 0.0) == identical  # identical here; any change is scored
    assert check.ok == (check.worst <= RTOL)
    state, path = ref
    off = compare((state * 1.03, path), ref, rtol=RTOL)
    assert not off.ok and off.worst == pytest.approx(0.03, rel=1e-3)


def _step(p: Any, x: Any, y: Any) -> Any:
    """A 2-layer MLP's training step; ``shift`` is added to every feature before a
    layer norm, so its gradient is zero in exact arithmetic."""
    import jax
    import jax.numpy as jnp

    def loss(p: Any) -> Any:
        h = x @ p["w1"] + p["shift"]
        m = h.mean(-1, keepdims=True)
        h = (h - m) / jnp.sqrt(((h - m) ** 2).mean(-1, keepdims=True) + 1e-5)
        return jnp.mean((jax.nn.gelu(h) @ p["w2"] - y) ** 2)

    value, grads = jax.value_and_grad(loss)(p)
    return value, grads, jax.tree.map(lambda a, g: a - 0.1 * g, p, grads)


def test_a_training_step_passes_under_option_sets_that_change_its_hlo() -> None:
    import jax
    import jax.numpy as jnp

    k = jax.random.split(jax.random.key(0), 4)
    params = {
        "w1": jax.random.normal(k[0], (64, 128)) / 8,
        "shift": jnp.full((1,), 0.3),
        "w2": jax.random.normal(k[1], (128, 16)) / 11,
    }
    args = (
        params,
        jax.random.normal(k[2], (256, 64)),
        jax.random.normal(k[3], (256, 16)),
    )
    lowered = jax.jit(_step).lower(*args)
    ref = lowered.compile()(*args)
    assert float(ref[1]["shift"][0]) == 0.0
    noisy = 0
    # The tuner's candidates (xla_cpu/2: the loop threshold alone, then the
    # xla_cpu/1 draws with a threshold each), compiled as the tuner compiles them.
    for row in xla_cpu2.sample(14, 0)[1:]:
        options = xla_cpu2.to_options(row)
        out = compile_with(lowered, options)(*args)
        check = compare(out, ref, rtol=RTOL)
        assert check.ok, (options, check)
        if float(out[1]["shift"][0]) != 0.0:  # rounding noise on the zero leaf
            noisy += 1
            assert _old_rel_diff(jax.tree.leaves(out), jax.tree.leaves(ref)) > 1.0
    assert noisy >= 3  # the case is real: those option sets changed the numerics


def test_the_bench_refuses_a_config_whose_output_is_nan(tmp_path: Path) -> None:
    """``Bench.compile`` (the tuner) and ``probe`` (``collect``) go through
    ``compare``: the NaN is a failed config, the reason in its error."""
    import jax
    import jax.numpy as jnp

    from xla_costmodel.clients.xla.tune_bench import Bench

    def guarded(x: Any) -> Any:
        return jnp.where(jnp.isnan(x), 0.0, x).sum()

    x = jnp.array([1.0, jnp.nan, 2.5, 4.35, jnp.nan], jnp.float32)
    lowered = jax.jit(guarded).lower(x)
    bench = Bench(lowered, (x,), TuneConfig(), tmp_path, tmp_path / "crash.journal")
    fast, plain = bench.compile(
        [1, 2],
        [
            CompilerOptions(compiler_options=FAST_MATH),
            CompilerOptions(compiler_options={xla_cpu.REGION_KEY: True}),
        ],
    )
    assert fast.executable is None and fast.error is not None
    assert "NaN" in fast.error and fast.max_rel_diff == math.inf
    assert plain.executable is not None and plain.max_rel_diff == 0.0


def _leaves(tree: Any) -> list[Any]:
    import jax

    return list(jax.tree.leaves(tree))
