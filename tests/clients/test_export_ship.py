"""``clients.xla.export``: a program and its arguments shipped to a child process
(the tuner's confirmation, ``jit``'s tuning) come back as the same computation,
typed PRNG keys included (a sampler's usual argument: ``np.asarray`` refuses one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from xla_costmodel.clients.xla import export  # noqa: E402 -- after the jax skip


def _roundtrip(fn: Any, args: tuple[Any, ...], tmp_path: Path) -> Any:
    for name, data in export.ship(fn, args).items():
        (tmp_path / name).write_bytes(data)
    shipped, again = export.load(tmp_path)
    return jax.jit(shipped)(*again)


def test_a_typed_prng_key_travels_as_its_data_and_comes_back_a_key(
    tmp_path: Path,
) -> None:
    def walk(key: Any, x: Any) -> Any:
        return x + jax.random.normal(key, x.shape)

    args = (jax.random.key(3), jnp.arange(4.0, dtype=jnp.bfloat16).astype(jnp.float32))
    got = _roundtrip(walk, args, tmp_path)
    want = jax.jit(walk)(*args)  # the same key's draws, compiled the same way
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


def test_plain_leaves_keep_their_dtypes_and_shapes(tmp_path: Path) -> None:
    def mix(a: Any, b: Any) -> Any:
        return {"s": a.sum(), "b": b * 2}

    args = (jnp.ones((2, 3), jnp.bfloat16), jnp.arange(5, dtype=jnp.int32))
    got = _roundtrip(mix, args, tmp_path)
    assert got["s"].dtype == jnp.bfloat16 and got["b"].dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(got["b"]), np.arange(5) * 2)
