"""Plain-JAX convolutional programs of the zoo: factories returning zero-argument builders.

The same conventions as ``plain`` (whose building blocks they use): every builder
imports jax when called and returns ``(fn, args)`` with the parameters among ``args``;
``train=True`` returns an SGD step.
"""

from __future__ import annotations

import itertools
from typing import Any

from xla_costmodel.collection.plain import (
    Builder,
    Built,
    Params,
    Shapes,
    conv,
    example,
    finish,
    init_params,
    max_pool,
)


def cnn(batch: int, hw: int, widths: tuple[int, ...], train: bool) -> Builder:
    def build() -> Built:
        import jax

        chans = [3, *widths]
        shapes: Shapes = {
            f"c{i}": (3, 3, a, b) for i, (a, b) in enumerate(itertools.pairwise(chans))
        }
        shapes["head"] = (widths[-1], 10)

        def forward(p: Params, x: Any) -> Any:
            for i in range(len(widths)):
                x = max_pool(jax.nn.relu(conv(x, p[f"c{i}"])))
            return x.mean(axis=(1, 2)) @ p["head"]

        return finish(forward, init_params(shapes), example((batch, hw, hw, 3)), train)

    return build


def dwsep_cnn(batch: int, hw: int, widths: tuple[int, ...]) -> Builder:
    def build() -> Built:
        import jax

        chans = [16, *widths]
        shapes: dict[str, tuple[int, ...]] = {
            "stem": (3, 3, 3, 16),
            "head": (widths[-1], 10),
        }
        for i, (a, b) in enumerate(itertools.pairwise(chans)):
            shapes[f"dw{i}"] = (3, 3, 1, a)
            shapes[f"pw{i}"] = (1, 1, a, b)

        def forward(p: Params, x: Any) -> Any:
            x = jax.nn.relu6(conv(x, p["stem"]))
            for i in range(len(widths)):
                x = jax.nn.relu6(conv(x, p[f"dw{i}"], stride=2, groups=x.shape[-1]))
                x = jax.nn.relu6(conv(x, p[f"pw{i}"]))
            return x.mean(axis=(1, 2)) @ p["head"]

        return finish(forward, init_params(shapes), example((batch, hw, hw, 3)), False)

    return build


def conv1d(
    batch: int, length: int, ch: int, layers: int, train: bool, dilated: bool = False
) -> Builder:
    def build() -> Built:
        import jax

        shapes = {
            "in": (1, 8, ch),
            **{f"c{i}": (3, ch, ch) for i in range(layers)},
            "out": (ch, 8),
        }

        def forward(p: Params, x: Any) -> Any:
            h = conv(x, p["in"])
            for i in range(layers):
                h = h + jax.nn.gelu(
                    conv(h, p[f"c{i}"], dilation=2**i if dilated else 1)
                )
            return h @ p["out"]

        return finish(forward, init_params(shapes), example((batch, length, 8)), train)

    return build


def norm_cnn(kind: str, batch: int, hw: int, ch: int, layers: int) -> Builder:
    def build() -> Built:
        import jax

        shapes = {
            "stem": (3, 3, 3, ch),
            **{f"c{i}": (3, 3, ch, ch) for i in range(layers)},
        }

        def norm(h: Any) -> Any:
            if kind == "batch":
                mean, var = h.mean((0, 1, 2)), h.var((0, 1, 2))
                return (h - mean) / (var + 1e-5) ** 0.5
            g = h.reshape(*h.shape[:-1], 8, h.shape[-1] // 8)
            mean, var = (
                g.mean((1, 2, 4), keepdims=True),
                g.var((1, 2, 4), keepdims=True),
            )
            return ((g - mean) / (var + 1e-5) ** 0.5).reshape(h.shape)

        act = jax.nn.relu if kind == "batch" else jax.nn.silu

        def forward(p: Params, x: Any) -> Any:
            h = conv(x, p["stem"])
            for i in range(layers):
                h = h + act(norm(conv(h, p[f"c{i}"])))
            return h.mean((1, 2))

        return finish(forward, init_params(shapes), example((batch, hw, hw, 3)), False)

    return build


def unet(batch: int, hw: int, widths: tuple[int, ...], train: bool) -> Builder:
    def build() -> Built:
        import jax
        import jax.numpy as jnp

        chans = [3, *widths]
        shapes: dict[str, tuple[int, ...]] = {}
        for i, (a, b) in enumerate(itertools.pairwise(chans)):
            shapes[f"down{i}"] = (3, 3, a, b)
        for i in range(len(widths) - 1, 0, -1):
            shapes[f"up{i}"] = (3, 3, widths[i] + widths[i - 1], widths[i - 1])
        shapes["out"] = (1, 1, widths[0], 1)

        def forward(p: Params, x: Any) -> Any:
            skips = []
            for i in range(len(widths)):
                x = jax.nn.relu(conv(x, p[f"down{i}"]))
                skips.append(x)
                if i < len(widths) - 1:
                    x = max_pool(x)
            for i in range(len(widths) - 1, 0, -1):
                x = jnp.repeat(jnp.repeat(x, 2, 1), 2, 2)
                x = jax.nn.relu(
                    conv(jnp.concatenate([x, skips[i - 1]], -1), p[f"up{i}"])
                )
            return conv(x, p["out"])

        return finish(forward, init_params(shapes), example((batch, hw, hw, 3)), train)

    return build


def conv_stack(
    batch: int,
    hw: int,
    cin: int,
    widths: tuple[int, ...],
    k: int,
    stride: int,
    train: bool,
) -> Builder:
    """Convolutions of kernel ``k`` and ``stride`` (no pooling), a linear head."""

    def build() -> Built:
        import jax

        chans = [cin, *widths]
        shapes: Shapes = {
            f"c{i}": (k, k, a, b) for i, (a, b) in enumerate(itertools.pairwise(chans))
        }
        shapes["head"] = (widths[-1], 10)

        def forward(p: Params, x: Any) -> Any:
            for i in range(len(widths)):
                x = jax.nn.relu(conv(x, p[f"c{i}"], stride=stride))
            return x.mean(axis=(1, 2)) @ p["head"]

        return finish(
            forward, init_params(shapes), example((batch, hw, hw, cin)), train
        )

    return build


def grouped_conv(
    batch: int, hw: int, ch: int, groups: int, k: int, layers: int, train: bool
) -> Builder:
    """``layers`` blocks of a grouped ``k``x``k`` conv (``groups == ch``: depthwise)
    and a 1x1 conv, residual."""

    def build() -> Built:
        import jax

        shapes: Shapes = {"stem": (3, 3, 3, ch), "head": (ch, 10)}
        for i in range(layers):
            shapes[f"g{i}"] = (k, k, ch // groups, ch)
            shapes[f"p{i}"] = (1, 1, ch, ch)

        def forward(p: Params, x: Any) -> Any:
            h = conv(x, p["stem"])
            for i in range(layers):
                y = jax.nn.relu(conv(h, p[f"g{i}"], groups=groups))
                h = h + conv(y, p[f"p{i}"])
            return h.mean(axis=(1, 2)) @ p["head"]

        return finish(forward, init_params(shapes), example((batch, hw, hw, 3)), train)

    return build


def signal2d(
    batch: int, length: int, ch: int, k: int, layers: int, train: bool
) -> Builder:
    """A 1-D signal as a 1 x length image: ``(1, k)`` convolutions, ``ch`` channels."""

    def build() -> Built:
        import jax

        shapes: Shapes = {"in": (1, k, 1, ch), "out": (ch, 4)}
        shapes |= {f"c{i}": (1, k, ch, ch) for i in range(layers)}

        def forward(p: Params, x: Any) -> Any:
            h = jax.nn.relu(conv(x, p["in"]))
            for i in range(layers):
                h = h + jax.nn.tanh(conv(h, p[f"c{i}"]))
            return h.mean(axis=(1, 2)) @ p["out"]

        return finish(
            forward, init_params(shapes), example((batch, 1, length, 1)), train
        )

    return build
