"""Plain-JAX programs of the zoo: factories returning zero-argument builders, and the
building blocks they share with the convolutional ones (``plain_conv``).

Every builder imports jax when called and returns ``(fn, args)`` with the parameters
among ``args`` (so XLA sees them as inputs, not constants). ``train=True`` returns an
SGD step: ``jax.value_and_grad`` of a loss, then the parameter update.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

Built = tuple[Callable[..., Any], tuple[Any, ...]]
Builder = Callable[[], Built]
Params = dict[str, Any]
Shapes = dict[str, tuple[int, ...]]


def init_params(shapes: Mapping[str, tuple[int, ...]]) -> Params:
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.key(0), len(shapes))
    out: Params = {}
    for key, (name, shape) in zip(keys, shapes.items(), strict=True):
        fan_in = max(1, math.prod(shape[:-1]))
        out[name] = jax.random.normal(key, shape, jnp.float32) / fan_in**0.5
    return out


def finish(
    forward: Callable[[Params, Any], Any], params: Params, x: Any, train: bool
) -> Built:
    """Inference ``forward(params, x)``, or an SGD step on its mean square."""
    import jax
    import jax.numpy as jnp

    if not train:
        return forward, (params, x)

    def loss(p: Params, x: Any) -> Any:
        return jnp.mean(jnp.square(forward(p, x)))

    def step(p: Params, x: Any) -> Any:
        value, grads = jax.value_and_grad(loss)(p, x)
        return value, jax.tree.map(lambda a, g: a - 0.01 * g, p, grads)

    return step, (params, x)


def example(shape: tuple[int, ...]) -> Any:
    import jax

    return jax.random.normal(jax.random.key(1), shape)


def conv(x: Any, w: Any, stride: int = 1, groups: int = 1, dilation: int = 1) -> Any:
    import jax

    nd = x.ndim - 2
    spec = ("NHWC", "HWIO", "NHWC") if nd == 2 else ("NWC", "WIO", "NWC")
    return jax.lax.conv_general_dilated(
        x,
        w,
        (stride,) * nd,
        "SAME",
        rhs_dilation=(dilation,) * nd,
        dimension_numbers=spec,
        feature_group_count=groups,
    )


def max_pool(x: Any) -> Any:
    import jax

    return jax.lax.reduce_window(
        x, -jax.numpy.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"
    )


def mlp(
    batch: int, d_in: int, hidden: int, layers: int, d_out: int, train: bool
) -> Builder:
    def build() -> Built:
        import jax

        dims = [d_in] + [hidden] * layers + [d_out]
        shapes: Shapes = {
            f"w{i}": (a, b) for i, (a, b) in enumerate(itertools.pairwise(dims))
        }
        shapes |= {f"b{i}": (b,) for i, b in enumerate(dims[1:])}

        def forward(p: Params, x: Any) -> Any:
            for i in range(len(dims) - 1):
                x = x @ p[f"w{i}"] + p[f"b{i}"]
                if i < len(dims) - 2:
                    x = jax.nn.relu(x)
            return jax.nn.log_softmax(x)

        return finish(forward, init_params(shapes), example((batch, d_in)), train)

    return build


def _mha(p: Params, x: Any, heads: int, causal: bool, pre: str = "") -> Any:
    import jax
    import jax.numpy as jnp

    b, s, d = x.shape
    q, k, v = (
        (x @ p[f"{pre}w{n}"]).reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)
        for n in "qkv"
    )
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / (d // heads) ** 0.5
    if causal:
        scores = jnp.where(jnp.tril(jnp.ones((s, s), bool)), scores, -1e9)
    out = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, -1), v)
    return out.transpose(0, 2, 1, 3).reshape(b, s, d) @ p[f"{pre}wo"]


def attention(
    batch: int, seq: int, d: int, heads: int, causal: bool, train: bool = False
) -> Builder:
    def build() -> Built:
        shapes = {f"w{n}": (d, d) for n in "qkvo"}

        def forward(p: Params, x: Any) -> Any:
            return _mha(p, x, heads, causal)

        return finish(forward, init_params(shapes), example((batch, seq, d)), train)

    return build


def _layer_norm(x: Any, eps: float = 1e-5) -> Any:
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / ((x - mean) ** 2 + eps).mean(-1, keepdims=True) ** 0.5


def transformer(
    batch: int,
    seq: int,
    d: int,
    heads: int,
    blocks: int,
    causal: bool,
    train: bool,
    vocab: int = 0,
) -> Builder:
    def build() -> Built:
        import jax
        import jax.numpy as jnp

        shapes: dict[str, tuple[int, ...]] = {}
        for i in range(blocks):
            shapes |= {f"{i}w{n}": (d, d) for n in "qkvo"}
            shapes |= {f"{i}up": (d, 4 * d), f"{i}down": (4 * d, d)}
        if vocab:
            shapes |= {"embed": (vocab, d), "unembed": (d, vocab)}

        def forward(p: Params, x: Any) -> Any:
            h = p["embed"][x] if vocab else x
            for i in range(blocks):
                h = h + _mha(p, _layer_norm(h), heads, causal, pre=str(i))
                h = h + jax.nn.gelu(_layer_norm(h) @ p[f"{i}up"]) @ p[f"{i}down"]
            h = _layer_norm(h)
            return jax.nn.log_softmax(h @ p["unembed"]) if vocab else h

        x = (
            jax.random.randint(jax.random.key(1), (batch, seq), 0, vocab, jnp.int32)
            if vocab
            else example((batch, seq, d))
        )
        return finish(forward, init_params(shapes), x, train)

    return build


def rnn(
    cell: str, batch: int, steps: int, d_in: int, hidden: int, train: bool
) -> Builder:
    gates = {"tanh": 1, "lstm": 4, "gru": 3}[cell]

    def build() -> Built:
        import jax
        import jax.numpy as jnp

        shapes = {
            "w": (d_in, gates * hidden),
            "u": (hidden, gates * hidden),
            "b": (gates * hidden,),
        }

        def step(p: Params, carry: Any, x: Any) -> Any:
            h, c = carry
            z = x @ p["w"] + p["b"]
            if cell == "tanh":
                h = jnp.tanh(z + h @ p["u"])
            elif cell == "lstm":
                i, f, g, o = jnp.split(z + h @ p["u"], 4, -1)
                c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
                h = jax.nn.sigmoid(o) * jnp.tanh(c)
            else:
                zr, zu, zn = jnp.split(z, 3, -1)
                hr, hu, hn = jnp.split(h @ p["u"], 3, -1)
                r, u = jax.nn.sigmoid(zr + hr), jax.nn.sigmoid(zu + hu)
                h = (1 - u) * jnp.tanh(zn + r * hn) + u * h
            return (h, c), h

        def forward(p: Params, xs: Any) -> Any:
            zeros = jnp.zeros((batch, hidden))
            _, hs = jax.lax.scan(lambda carry, x: step(p, carry, x), (zeros, zeros), xs)
            return hs

        return finish(
            forward, init_params(shapes), example((steps, batch, d_in)), train
        )

    return build


def norm_net(kind: str, batch: int, d: int, layers: int) -> Builder:
    def build() -> Built:
        import jax

        shapes = {f"w{i}": (d, d) for i in range(layers)} | {
            f"g{i}": (d,) for i in range(layers)
        }

        def forward(p: Params, x: Any) -> Any:
            for i in range(layers):
                h = x @ p[f"w{i}"]
                if kind == "layer":
                    x = x + jax.nn.gelu(_layer_norm(h) * p[f"g{i}"])
                else:
                    rms = (h * h).mean(-1, keepdims=True) + 1e-6
                    x = x + jax.nn.silu(h / rms**0.5 * p[f"g{i}"])
            return jax.nn.softmax(x, -1)

        return finish(forward, init_params(shapes), example((batch, d)), False)

    return build


# Shape-varied templates (families ``g_*``): many small programs along the axes real
# programs vary in and the hand-written zoo barely covers (kernel sizes and strides,
# channel counts from 1 up, 1-D signals laid out as 2-D convolutions, grouped and
# depthwise convolutions, matmul shapes from skinny to square, batch 1 to 1024,
# inference and training). A cross-program model learns what a CPU rewards from them.


def matmul_chain(m: int, k: int, n: int, layers: int, train: bool) -> Builder:
    """``[m, k] @ [k, n] @ [n, k] ...``: ``layers`` matmuls with a nonlinearity."""

    def build() -> Built:
        import jax

        dims = [k] + [n if i % 2 == 0 else k for i in range(layers)]
        shapes: Shapes = {
            f"w{i}": (a, b) for i, (a, b) in enumerate(itertools.pairwise(dims))
        }

        def forward(p: Params, x: Any) -> Any:
            for i in range(layers):
                x = jax.nn.silu(x @ p[f"w{i}"])
            return x

        return finish(forward, init_params(shapes), example((m, k)), train)

    return build
