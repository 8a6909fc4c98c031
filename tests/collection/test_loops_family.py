"""The zoo's ``loops`` family: loop-heavy plain-JAX programs that build, run, and
whose optimized HLO the loop threshold of ``xla_cpu/2`` changes."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest

from xla_costmodel.clients.xla.compile_options import compile_with
from xla_costmodel.collection.zoo import Program, select
from xla_costmodel.tpugraphs import xla_cpu2

LOOPS = select(["loops"])
HOIST = xla_cpu2.to_options(xla_cpu2.sample(2, seed=0)[1])  # the threshold at 65536


def _leaves(tree: Any) -> list[np.ndarray]:
    return [np.asarray(x, np.float64) for x in jax.tree.leaves(tree)]


def test_the_family_has_eight_or_more_distinct_programs() -> None:
    assert HOIST.extra_options == {"xla_cpu_small_while_loop_byte_threshold": "65536"}
    assert len(LOOPS) >= 8
    assert len({p.name for p in LOOPS}) == len(LOOPS)
    assert all(p.name.startswith("loop_") and p.description for p in LOOPS)


@pytest.fixture(scope="module")
def hoisted() -> dict[str, bool]:
    """program -> whether the threshold at 65536 changed its optimized HLO; each
    program built, run once under both compiles, outputs compared."""
    changed = {}
    for program in LOOPS:
        changed[program.name] = _check(program)
    return changed


def _check(program: Program) -> bool:
    fn, args = program.build()
    lowered = jax.jit(fn).lower(*args)
    assert "stablehlo.while" in lowered.as_text(), program.name
    default = compile_with(lowered, xla_cpu2.CompilerOptions())
    loop = compile_with(lowered, HOIST)
    want, got = _leaves(default(*args)), _leaves(loop(*args))
    for a, b in zip(want, got, strict=True):
        assert np.isfinite(a).all(), program.name
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=program.name)
    return bool(default.as_text() != loop.as_text())


def test_each_program_runs_and_the_threshold_keeps_its_outputs(
    hoisted: dict[str, bool],
) -> None:
    assert set(hoisted) == {p.name for p in LOOPS}


def test_the_threshold_changes_the_hlo_of_at_least_half(
    hoisted: dict[str, bool],
) -> None:
    assert sum(hoisted.values()) * 2 >= len(hoisted), hoisted
