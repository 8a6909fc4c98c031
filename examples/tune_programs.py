"""Programs for ``costmodel tune examples/tune_programs.py:NAME``.

Each function takes no argument and returns ``(fn, args)``: the program to tune and
arguments of the shapes and dtypes it will run on. ``my_program`` is written out in
plain JAX, as a user would; the others reuse the program zoo the xla_cpu dataset was
collected on (``xla_costmodel.collection.zoo``).
"""

from __future__ import annotations

from typing import Any


def my_program() -> tuple[Any, tuple[Any, ...]]:
    """A small two-layer convolutional net on a batch of 8 images, inference."""
    import jax
    import jax.numpy as jnp

    k1, k2, k3, kx = jax.random.split(jax.random.key(0), 4)
    w1 = jax.random.normal(k1, (3, 3, 3, 32), jnp.float32) * 0.1
    w2 = jax.random.normal(k2, (3, 3, 32, 64), jnp.float32) * 0.1
    w3 = jax.random.normal(k3, (64, 10), jnp.float32) * 0.1
    x = jax.random.normal(kx, (8, 64, 64, 3), jnp.float32)

    def conv(h: Any, w: Any) -> Any:
        return jax.lax.conv_general_dilated(
            h, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )

    def fn(w1: Any, w2: Any, w3: Any, x: Any) -> Any:
        h = jax.nn.relu(conv(x, w1))
        h = jax.nn.relu(conv(h, w2))
        return jnp.mean(h, axis=(1, 2)) @ w3

    return fn, (w1, w2, w3, x)


def _zoo(name: str) -> tuple[Any, tuple[Any, ...]]:
    from xla_costmodel.collection.zoo import select

    (program,) = select([name])
    return program.build()


def resnet50() -> tuple[Any, tuple[Any, ...]]:
    """keras ResNet50 (weights=None), 32x32 inputs, batch 2, inference."""
    return _zoo("keras_resnet50_32_b2")


def transformer() -> tuple[Any, tuple[Any, ...]]:
    """The zoo's first plain-JAX transformer program."""
    from xla_costmodel.collection.zoo import families

    return _zoo(families()["transformer"][0])
