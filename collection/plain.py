"""Plain-JAX programs of the zoo: factories returning zero-argument builders.

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


def _init(shapes: Mapping[str, tuple[int, ...]]) -> Params:
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.key(0), len(shapes))
    out: Params = {}
    for key, (name, shape) in zip(keys, shapes.items(), strict=True):
        fan_in = max(1, math.prod(shape[:-1]))
        out[name] = jax.random.normal(key, shape, jnp.float32) / fan_in**0.5
    return out


def _finish(
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


def _x(shape: tuple[int, ...]) -> Any:
    import jax

    return jax.random.normal(jax.random.key(1), shape)


def _conv(x: Any, w: Any, stride: int = 1, groups: int = 1, dilation: int = 1) -> Any:
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


def _pool(x: Any) -> Any:
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

        return _finish(forward, _init(shapes), _x((batch, d_in)), train)

    return build


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
                x = _pool(jax.nn.relu(_conv(x, p[f"c{i}"])))
            return x.mean(axis=(1, 2)) @ p["head"]

        return _finish(forward, _init(shapes), _x((batch, hw, hw, 3)), train)

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
            x = jax.nn.relu6(_conv(x, p["stem"]))
            for i in range(len(widths)):
                x = jax.nn.relu6(_conv(x, p[f"dw{i}"], stride=2, groups=x.shape[-1]))
                x = jax.nn.relu6(_conv(x, p[f"pw{i}"]))
            return x.mean(axis=(1, 2)) @ p["head"]

        return _finish(forward, _init(shapes), _x((batch, hw, hw, 3)), False)

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
            h = _conv(x, p["in"])
            for i in range(layers):
                h = h + jax.nn.gelu(
                    _conv(h, p[f"c{i}"], dilation=2**i if dilated else 1)
                )
            return h @ p["out"]

        return _finish(forward, _init(shapes), _x((batch, length, 8)), train)

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

        return _finish(forward, _init(shapes), _x((batch, seq, d)), train)

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
            else _x((batch, seq, d))
        )
        return _finish(forward, _init(shapes), x, train)

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

        return _finish(forward, _init(shapes), _x((steps, batch, d_in)), train)

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

        return _finish(forward, _init(shapes), _x((batch, d)), False)

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
            h = _conv(x, p["stem"])
            for i in range(layers):
                h = h + act(norm(_conv(h, p[f"c{i}"])))
            return h.mean((1, 2))

        return _finish(forward, _init(shapes), _x((batch, hw, hw, 3)), False)

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
                x = jax.nn.relu(_conv(x, p[f"down{i}"]))
                skips.append(x)
                if i < len(widths) - 1:
                    x = _pool(x)
            for i in range(len(widths) - 1, 0, -1):
                x = jnp.repeat(jnp.repeat(x, 2, 1), 2, 2)
                x = jax.nn.relu(
                    _conv(jnp.concatenate([x, skips[i - 1]], -1), p[f"up{i}"])
                )
            return _conv(x, p["out"])

        return _finish(forward, _init(shapes), _x((batch, hw, hw, 3)), train)

    return build


# Shape-varied templates (families ``g_*``): many small programs along the axes real
# programs vary in and the hand-written zoo barely covers (kernel sizes and strides,
# channel counts from 1 up, 1-D signals laid out as 2-D convolutions, grouped and
# depthwise convolutions, matmul shapes from skinny to square, batch 1 to 1024,
# inference and training). A cross-program model learns what a CPU rewards from them.


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
                x = jax.nn.relu(_conv(x, p[f"c{i}"], stride=stride))
            return x.mean(axis=(1, 2)) @ p["head"]

        return _finish(forward, _init(shapes), _x((batch, hw, hw, cin)), train)

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
            h = _conv(x, p["stem"])
            for i in range(layers):
                y = jax.nn.relu(_conv(h, p[f"g{i}"], groups=groups))
                h = h + _conv(y, p[f"p{i}"])
            return h.mean(axis=(1, 2)) @ p["head"]

        return _finish(forward, _init(shapes), _x((batch, hw, hw, 3)), train)

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
            h = jax.nn.relu(_conv(x, p["in"]))
            for i in range(layers):
                h = h + jax.nn.tanh(_conv(h, p[f"c{i}"]))
            return h.mean(axis=(1, 2)) @ p["out"]

        return _finish(forward, _init(shapes), _x((batch, 1, length, 1)), train)

    return build


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

        return _finish(forward, _init(shapes), _x((m, k)), train)

    return build
