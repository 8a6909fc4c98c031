"""``compile_with``: one config's options, top-level and map, reach exactly one real
XLA compile; the default and other jitted functions beside it are untouched."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax.extend.backend import get_compile_options

from xla_costmodel.clients.xla.compile_options import (
    OptionConflict,
    RouteUnavailable,
    compile_with,
    jax_compiler_options,
    read_extra_options,
    with_extra_options,
)
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions

KEY = "xla_cpu_small_while_loop_byte_threshold"
DEFAULT = CompilerOptions()
HOIST = CompilerOptions(extra_options={KEY: "65536"})
# Two sets, each with a top-level part and a map part that both change the HLO.
A = CompilerOptions(
    compiler_options={"xla_disable_hlo_passes": "fusion"}, extra_options={KEY: "65536"}
)
B = CompilerOptions(
    compiler_options={"xla_cpu_use_fusion_emitters": False},
    extra_options={KEY: "1000000000"},
)


def loop(x: Any) -> Any:
    """4 KB of loop state: over XLA's 1 KB default threshold, under 64 KB; no dot."""
    return jax.lax.fori_loop(0, 16, lambda i, s: jnp.sin(s) * 0.5 + jnp.cos(s), x)


X = jnp.linspace(0.0, 1.0, 1024, dtype=jnp.float32)


@pytest.fixture(scope="module")
def lowered() -> Any:
    return jax.jit(loop).lower(X)


def hlo(lowered: Any, options: CompilerOptions) -> str:
    return str(compile_with(lowered, options).as_text())


def test_the_threshold_changes_the_hlo_and_the_default_beside_it_does_not(
    lowered: Any,
) -> None:
    before = hlo(lowered, DEFAULT)
    hoisted = hlo(lowered, HOIST)
    after = hlo(lowered, DEFAULT)
    assert hoisted != before  # the map entry reached XLA
    assert after == before  # the default compiled next is still XLA's default
    assert hlo(lowered, HOIST) == hoisted
    # a fresh lowering of the same function: no executable cached under the default
    assert jax.jit(loop).lower(X).compile().as_text() == before


def test_two_option_sets_apply_both_parts_and_do_not_leak(lowered: Any) -> None:
    texts = {}
    for name, options in [("A", A), ("B", B), ("A2", A), ("B2", B)]:
        texts[name] = hlo(lowered, options)
    assert texts["A"] == texts["A2"] and texts["B"] == texts["B2"]
    assert texts["A"] != texts["B"]
    for options in (A, B):
        top_only = CompilerOptions(compiler_options=options.compiler_options)
        map_only = CompilerOptions(extra_options=options.extra_options)
        both = hlo(lowered, options)
        assert both != hlo(lowered, top_only)  # the map part took effect
        assert both != hlo(lowered, map_only)  # the top-level part took effect


def test_functions_jitted_normally_before_and_after_are_unaffected(
    lowered: Any,
) -> None:
    plain = jax.jit(loop)
    result = plain(X)
    text = plain.lower(X).compile().as_text()
    hoisted = compile_with(lowered, HOIST)
    assert plain.lower(X).compile().as_text() == text
    assert bool(jnp.all(plain(X) == result))
    assert bool(jnp.all(hoisted(X) == result))  # same outputs, other executable
    other = jax.jit(lambda x: loop(x) + 1.0)
    assert hlo(other.lower(X), DEFAULT) != hlo(other.lower(X), HOIST)
    assert other.lower(X).compile().as_text() == hlo(other.lower(X), DEFAULT)


def test_jax_jit_takes_the_same_options_for_a_drop_in_jit(lowered: Any) -> None:
    tuned = jax.jit(loop, compiler_options=jax_compiler_options(A))
    assert tuned.lower(X).compile().as_text() == hlo(lowered, A)
    assert jax_compiler_options(A) == {
        "xla_disable_hlo_passes": "fusion",
        "xla_backend_extra_options": f"{KEY}=65536",
    }
    assert jax_compiler_options(DEFAULT) == {}


def test_xla_rejects_bad_values_and_ignores_unknown_map_keys(lowered: Any) -> None:
    with pytest.raises(Exception, match="Failed to parse value"):
        hlo(lowered, CompilerOptions(extra_options={KEY: "many"}))
    ignored = CompilerOptions(extra_options={"xla_cpu_no_such_key_for_test": "1"})
    assert hlo(lowered, ignored) == hlo(lowered, DEFAULT)
    with pytest.raises(Exception, match="No such compile option"):
        hlo(lowered, CompilerOptions(compiler_options={"xla_cpu_no_such_option": 1}))


def test_map_entries_merge_and_never_overwrite_one_another() -> None:
    base = get_compile_options(num_replicas=1, num_partitions=1)
    one = with_extra_options(base, {"k1": "1"})
    two = with_extra_options(one, {"k2": "2", "k1": "1"})
    assert read_extra_options(base.SerializeAsString()) == {}
    assert read_extra_options(two.SerializeAsString()) == {"k1": "1", "k2": "2"}
    with pytest.raises(OptionConflict, match="k1=1"):
        with_extra_options(two, {"k1": "3"})
    for field in ("num_replicas", "num_partitions", "profile_version"):
        assert getattr(two, field) == getattr(base, field)
    assert str(two.device_assignment) == str(base.device_assignment)
    # jax's persistent cache key hashes a deepcopy's serialization: the map is in it
    assert read_extra_options(copy.deepcopy(two).SerializeAsString()) == {
        "k1": "1",
        "k2": "2",
    }
    assert with_extra_options(base, {}) is base


def test_a_compile_options_without_a_proto_round_trip_is_refused_clearly() -> None:
    with pytest.raises(RouteUnavailable, match="per compile"):
        with_extra_options(object(), {"k": "1"})


def test_entries_from_xla_flags_are_kept_and_a_conflicting_one_is_refused() -> None:
    """XLA_FLAGS reaches the proto's map: compile_with merges into it."""
    code = textwrap.dedent(f"""
        import jax, jax.numpy as jnp
        from xla_costmodel.clients.xla import compile_options as co
        from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions
        low = jax.jit(lambda x: x + 1).lower(jnp.ones(4))
        co.compile_with(low, CompilerOptions(extra_options={{"{KEY}": "65536"}}))
        try:
            co.compile_with(low, CompilerOptions(extra_options={{"{KEY}": "1000"}}))
        except co.OptionConflict as exc:
            print("conflict:", exc)
    """)
    flags = f"--xla_backend_extra_options={KEY}=65536,xla_cpu_made_up_for_test=1"
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (
        f"conflict: xla_backend_extra_options already sets {KEY}=65536" in done.stdout
    )
