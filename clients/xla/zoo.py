"""The program zoo: real JAX and keras programs for XLA:CPU measurements.

Each ``Program`` has a name, an architecture ``family`` (evaluation holds out whole
families) and a zero-argument builder returning ``(fn, args)``; the collector lowers
``jax.jit(fn).lower(*args)``. jax and keras are imported inside the builders, so
importing this module (and ``xla_costmodel.clients``) stays light. Keras models are
``keras.applications`` architectures on the JAX backend with ``weights=None``
(nothing downloaded), run through ``stateless_call``; training steps take
``jax.value_and_grad`` of a cross-entropy over it and apply an SGD update. Sizes are
chosen so one run takes roughly 5-50 ms on one core of this machine's CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from xla_costmodel.clients.xla import plain

Builder = Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]


@dataclass(frozen=True)
class Program:
    name: str
    family: str
    build: Builder
    description: str


def _keras(app: str, hw: int, batch: int, train: bool, **kwargs: Any) -> Builder:
    def build() -> tuple[Callable[..., Any], tuple[Any, ...]]:
        import os

        os.environ.setdefault("KERAS_BACKEND", "jax")
        import jax
        import jax.numpy as jnp
        import keras

        keras.backend.clear_session()
        keras.utils.set_random_seed(0)
        model = getattr(keras.applications, app)(
            weights=None, input_shape=(hw, hw, 3), classes=10,
            classifier_activation=None, **kwargs,
        )  # fmt: skip
        tv = [v.value for v in model.trainable_variables]
        ntv = [v.value for v in model.non_trainable_variables]
        x = jax.random.normal(jax.random.key(0), (batch, hw, hw, 3), jnp.float32)
        if not train:

            def infer(tv: Any, ntv: Any, x: Any) -> Any:
                return model.stateless_call(tv, ntv, x, training=False)[0]

            return infer, (tv, ntv, x)
        y = jnp.arange(batch, dtype=jnp.int32) % 10

        def loss(tv: Any, ntv: Any, x: Any, y: Any) -> Any:
            logits, new_ntv = model.stateless_call(tv, ntv, x, training=True)
            logp = jax.nn.log_softmax(logits)
            return -jnp.take_along_axis(logp, y[:, None], 1).mean(), new_ntv

        def step(tv: Any, ntv: Any, x: Any, y: Any) -> Any:
            (value, new_ntv), grads = jax.value_and_grad(loss, has_aux=True)(
                tv, ntv, x, y
            )
            return (
                value,
                [p - 0.01 * g for p, g in zip(tv, grads, strict=True)],
                new_ntv,
            )

        return step, (tv, ntv, x, y)

    return build


def _k(
    name: str, family: str, app: str, hw: int, batch: int, train: bool, **kw: Any
) -> Program:
    mode = "training step" if train else "inference"
    desc = f"keras.applications.{app} {hw}x{hw}x3, batch {batch}, {mode}"
    return Program(name, family, _keras(app, hw, batch, train, **kw), desc)


def _p(name: str, family: str, build: Builder, description: str) -> Program:
    return Program(name, family, build, description)


PROGRAMS: tuple[Program, ...] = (
    # keras ResNets: residual CNNs with batch norm
    _k("keras_resnet50_32_b1", "keras_resnet", "ResNet50", 32, 1, False),
    _k("keras_resnet50_32_b2", "keras_resnet", "ResNet50", 32, 2, False),
    _k("keras_resnet50v2_32_b1", "keras_resnet", "ResNet50V2", 32, 1, False),
    _k("keras_resnet50v2_32_b2", "keras_resnet", "ResNet50V2", 32, 2, False),
    # keras mobile nets: depthwise-separable convolutions
    _k("keras_mobilenetv2_32_b2", "keras_mobile", "MobileNetV2", 32, 2, False),
    _k("keras_mobilenetv2_64_b1", "keras_mobile", "MobileNetV2", 64, 1, False),
    _k("keras_mobilenet_32_b4", "keras_mobile", "MobileNet", 32, 4, False),
    _k(
        "keras_mobilenetv3small_32_b8", "keras_mobile", "MobileNetV3Small", 32, 8, False
    ),
    _k("keras_efficientnetb0_32_b2", "keras_mobile", "EfficientNetB0", 32, 2, False),
    # keras plain deep CNNs
    _k("keras_vgg16_32_b2", "keras_vgg", "VGG16", 32, 2, False),
    _k("keras_vgg19_32_b1", "keras_vgg", "VGG19", 32, 1, False),
    _k("keras_vgg16_train_32_b1", "keras_vgg", "VGG16", 32, 1, True),
    # MLPs
    _p(
        "mlp_3x1024_b256",
        "mlp",
        plain.mlp(256, 512, 1024, 3, 10, False),
        "MLP 512-1024x3-10, batch 256, inference",
    ),
    _p(
        "mlp_4x2048_b32",
        "mlp",
        plain.mlp(32, 1024, 2048, 4, 100, False),
        "MLP 1024-2048x4-100, batch 32, inference",
    ),
    _p(
        "mlp_6x512_b1024",
        "mlp",
        plain.mlp(1024, 256, 512, 6, 10, False),
        "MLP 256-512x6-10, batch 1024, inference",
    ),
    _p(
        "mlp_train_3x1024_b64",
        "mlp",
        plain.mlp(64, 512, 1024, 3, 10, True),
        "MLP training step, batch 64",
    ),
    _p(
        "mlp_train_6x512_b128",
        "mlp",
        plain.mlp(128, 256, 512, 6, 10, True),
        "MLP training step, batch 128",
    ),
    _p(
        "mlp_2x2048_b16",
        "mlp",
        plain.mlp(16, 1024, 2048, 2, 10, False),
        "MLP 1024-2048x2-10, batch 16, inference",
    ),
    _p(
        "mlp_train_4x1024_b16",
        "mlp",
        plain.mlp(16, 512, 1024, 4, 10, True),
        "MLP training step, 4 x 1024, batch 16",
    ),
    # small 2-D CNNs
    _p(
        "cnn_small_32_b32",
        "cnn",
        plain.cnn(32, 32, (32, 64, 128), False),
        "3-stage conv/relu/pool CNN 32x32, batch 32",
    ),
    _p(
        "cnn_wide_32_b16",
        "cnn",
        plain.cnn(16, 32, (64, 128, 256), False),
        "wide 3-stage CNN 32x32, batch 16",
    ),
    _p(
        "cnn_deep_128_b4",
        "cnn",
        plain.cnn(4, 128, (16, 32, 64, 128), False),
        "4-stage CNN 128x128, batch 4",
    ),
    _p(
        "cnn_train_32_b8",
        "cnn",
        plain.cnn(8, 32, (32, 64, 128), True),
        "3-stage CNN training step, batch 8",
    ),
    _p(
        "cnn_dwsep_32_b32",
        "cnn",
        plain.dwsep_cnn(32, 32, (32, 64, 128)),
        "depthwise-separable CNN 32x32, batch 32",
    ),
    _p(
        "cnn_small_64_b8",
        "cnn",
        plain.cnn(8, 64, (32, 64, 128), False),
        "3-stage conv/relu/pool CNN 64x64, batch 8",
    ),
    # 1-D convolutions over sequences
    _p(
        "conv1d_256_b32",
        "conv1d",
        plain.conv1d(32, 256, 64, 4, False),
        "4-layer conv1d, length 256, 64 ch, batch 32",
    ),
    _p(
        "conv1d_1024_b4",
        "conv1d",
        plain.conv1d(4, 1024, 128, 4, False),
        "4-layer conv1d, length 1024, 128 ch, batch 4",
    ),
    _p(
        "conv1d_dilated_512_b8",
        "conv1d",
        plain.conv1d(8, 512, 96, 6, False, dilated=True),
        "dilated (WaveNet-like) conv1d, length 512, batch 8",
    ),
    _p(
        "conv1d_train_256_b8",
        "conv1d",
        plain.conv1d(8, 256, 64, 4, True),
        "conv1d training step, batch 8",
    ),
    _p(
        "conv1d_512_b16",
        "conv1d",
        plain.conv1d(16, 512, 64, 4, False),
        "4-layer conv1d, length 512, 64 ch, batch 16",
    ),
    # attention kernels alone
    _p(
        "attn_mha_128_b16",
        "attention",
        plain.attention(16, 128, 256, 8, causal=False),
        "multi-head attention, seq 128, d 256, 8 heads, batch 16",
    ),
    _p(
        "attn_causal_256_b8",
        "attention",
        plain.attention(8, 256, 256, 4, causal=True),
        "causal attention, seq 256, d 256, 4 heads, batch 8",
    ),
    _p(
        "attn_long_512_b4",
        "attention",
        plain.attention(4, 512, 128, 2, causal=False),
        "attention, seq 512, d 128, 2 heads, batch 4",
    ),
    _p(
        "attn_train_128_b4",
        "attention",
        plain.attention(4, 128, 256, 8, causal=True, train=True),
        "causal attention gradient, batch 4",
    ),
    _p(
        "attn_mha_64_b16",
        "attention",
        plain.attention(16, 64, 256, 8, causal=False),
        "multi-head attention, seq 64, d 256, 8 heads, batch 16",
    ),
    # transformer blocks (attention + MLP + layer norm)
    _p(
        "xfmr_enc_128_b4",
        "transformer",
        plain.transformer(4, 128, 256, 4, 2, False, False),
        "2 encoder blocks, seq 128, d 256, batch 4",
    ),
    _p(
        "xfmr_dec_256_b2",
        "transformer",
        plain.transformer(2, 256, 256, 4, 2, True, False),
        "2 causal decoder blocks, seq 256, batch 2",
    ),
    _p(
        "xfmr_enc_64_b16",
        "transformer",
        plain.transformer(16, 64, 128, 4, 4, False, False),
        "4 small encoder blocks, seq 64, d 128, batch 16",
    ),
    _p(
        "xfmr_train_128_b2",
        "transformer",
        plain.transformer(2, 128, 256, 4, 2, True, True),
        "decoder training step, seq 128, batch 2",
    ),
    _p(
        "xfmr_lm_64_b4",
        "transformer",
        plain.transformer(4, 64, 256, 8, 2, True, False, vocab=2048),
        "tiny LM: embed + 2 blocks + vocab 2048 head",
    ),
    _p(
        "xfmr_enc_256_b1",
        "transformer",
        plain.transformer(1, 256, 256, 4, 2, False, False),
        "2 encoder blocks, seq 256, d 256, batch 1",
    ),
    # recurrent nets via lax.scan
    _p(
        "rnn_tanh_128_b32",
        "rnn",
        plain.rnn("tanh", 32, 128, 128, 512, False),
        "tanh RNN, 128 steps, hidden 512, batch 32",
    ),
    _p(
        "rnn_lstm_64_b32",
        "rnn",
        plain.rnn("lstm", 32, 64, 128, 256, False),
        "LSTM, 64 steps, hidden 256, batch 32",
    ),
    _p(
        "rnn_gru_128_b32",
        "rnn",
        plain.rnn("gru", 32, 128, 64, 256, False),
        "GRU, 128 steps, hidden 256, batch 32",
    ),
    _p(
        "rnn_lstm_train_32_b16",
        "rnn",
        plain.rnn("lstm", 16, 32, 64, 256, True),
        "LSTM training step (BPTT), 32 steps",
    ),
    _p(
        "rnn_gru_64_b32",
        "rnn",
        plain.rnn("gru", 32, 64, 64, 256, False),
        "GRU, 64 steps, hidden 256, batch 32",
    ),
    # normalisation-heavy nets
    _p(
        "norm_layernorm_mlp_b256",
        "norm",
        plain.norm_net("layer", 256, 512, 6),
        "6 x (dense + layer norm + gelu), batch 256",
    ),
    _p(
        "norm_rmsnorm_mlp_b1024",
        "norm",
        plain.norm_net("rms", 1024, 256, 8),
        "8 x (dense + RMS norm + silu), batch 1024",
    ),
    _p(
        "norm_batchnorm_cnn_b8",
        "norm",
        plain.norm_cnn("batch", 8, 32, 64, 4),
        "4 x (conv + batch norm + relu) 32x32, batch 8",
    ),
    _p(
        "norm_groupnorm_cnn_b4",
        "norm",
        plain.norm_cnn("group", 4, 32, 64, 4),
        "4 x (conv + group norm + silu) 32x32, batch 4",
    ),
    _p(
        "norm_layernorm_mlp_b64",
        "norm",
        plain.norm_net("layer", 64, 1024, 4),
        "4 x (dense 1024 + layer norm + gelu), batch 64",
    ),
    # U-Net-like encoder/decoders
    _p(
        "unet_64_b8",
        "unet",
        plain.unet(8, 64, (16, 32, 64), False),
        "3-level U-Net 64x64, batch 8",
    ),
    _p(
        "unet_32_b8",
        "unet",
        plain.unet(8, 32, (32, 64, 128), False),
        "3-level U-Net 32x32, batch 8",
    ),
    _p(
        "unet_128_b4",
        "unet",
        plain.unet(4, 128, (8, 16, 32, 64), False),
        "4-level U-Net 128x128, batch 4",
    ),
    _p(
        "unet_train_32_b4",
        "unet",
        plain.unet(4, 32, (16, 32, 64), True),
        "3-level U-Net training step, batch 4",
    ),
    _p(
        "unet_64_b2",
        "unet",
        plain.unet(2, 64, (16, 32, 64), False),
        "3-level U-Net 64x64, batch 2",
    ),
)


def families() -> dict[str, list[str]]:
    """family -> program names, in zoo order."""
    out: dict[str, list[str]] = {}
    for p in PROGRAMS:
        out.setdefault(p.family, []).append(p.name)
    return out


def select(names: Sequence[str] | None) -> list[Program]:
    """Programs by name or family (all when ``names`` is empty); ValueError on unknown."""
    if not names:
        return list(PROGRAMS)
    fams = families()
    chosen: dict[str, Program] = {}
    by_name = {p.name: p for p in PROGRAMS}
    for name in names:
        if name in by_name:
            chosen[name] = by_name[name]
        elif name in fams:
            chosen.update((n, by_name[n]) for n in fams[name])
        else:
            raise ValueError(
                f"unknown program or family {name!r} (families: {', '.join(fams)})"
            )
    return list(chosen.values())
