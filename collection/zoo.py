"""The program zoo: real JAX and keras programs for XLA:CPU measurements.

Each ``Program`` has a name, an architecture ``family`` (evaluation holds out whole
families) and a zero-argument builder returning ``(fn, args)``; the collector lowers
``jax.jit(fn).lower(*args)``. jax and keras are imported inside the builders, so
importing this module stays light. Keras models are
``keras.applications`` architectures on the JAX backend with ``weights=None``
(nothing downloaded), run through ``stateless_call``; training steps take
``jax.value_and_grad`` of a cross-entropy over it and apply an SGD update. Sizes are
chosen so one run takes roughly 5-50 ms on one core of this machine's CPU.

Over 400 lines on purpose: the module is a data table (``PROGRAMS``, one entry per
program, ~530 of its ~650 lines); splitting it would scatter one list across files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from xla_costmodel.collection import plain, plain_conv, plain_loops

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
            weights=None,
            input_shape=(hw, hw, 3),
            classes=10,
            classifier_activation=None,
            **kwargs,
        )
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
        plain_conv.cnn(32, 32, (32, 64, 128), False),
        "3-stage conv/relu/pool CNN 32x32, batch 32",
    ),
    _p(
        "cnn_wide_32_b16",
        "cnn",
        plain_conv.cnn(16, 32, (64, 128, 256), False),
        "wide 3-stage CNN 32x32, batch 16",
    ),
    _p(
        "cnn_deep_128_b4",
        "cnn",
        plain_conv.cnn(4, 128, (16, 32, 64, 128), False),
        "4-stage CNN 128x128, batch 4",
    ),
    _p(
        "cnn_train_32_b8",
        "cnn",
        plain_conv.cnn(8, 32, (32, 64, 128), True),
        "3-stage CNN training step, batch 8",
    ),
    _p(
        "cnn_dwsep_32_b32",
        "cnn",
        plain_conv.dwsep_cnn(32, 32, (32, 64, 128)),
        "depthwise-separable CNN 32x32, batch 32",
    ),
    _p(
        "cnn_small_64_b8",
        "cnn",
        plain_conv.cnn(8, 64, (32, 64, 128), False),
        "3-stage conv/relu/pool CNN 64x64, batch 8",
    ),
    # 1-D convolutions over sequences
    _p(
        "conv1d_256_b32",
        "conv1d",
        plain_conv.conv1d(32, 256, 64, 4, False),
        "4-layer conv1d, length 256, 64 ch, batch 32",
    ),
    _p(
        "conv1d_1024_b4",
        "conv1d",
        plain_conv.conv1d(4, 1024, 128, 4, False),
        "4-layer conv1d, length 1024, 128 ch, batch 4",
    ),
    _p(
        "conv1d_dilated_512_b8",
        "conv1d",
        plain_conv.conv1d(8, 512, 96, 6, False, dilated=True),
        "dilated (WaveNet-like) conv1d, length 512, batch 8",
    ),
    _p(
        "conv1d_train_256_b8",
        "conv1d",
        plain_conv.conv1d(8, 256, 64, 4, True),
        "conv1d training step, batch 8",
    ),
    _p(
        "conv1d_512_b16",
        "conv1d",
        plain_conv.conv1d(16, 512, 64, 4, False),
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
        plain_conv.norm_cnn("batch", 8, 32, 64, 4),
        "4 x (conv + batch norm + relu) 32x32, batch 8",
    ),
    _p(
        "norm_groupnorm_cnn_b4",
        "norm",
        plain_conv.norm_cnn("group", 4, 32, 64, 4),
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
        plain_conv.unet(8, 64, (16, 32, 64), False),
        "3-level U-Net 64x64, batch 8",
    ),
    _p(
        "unet_32_b8",
        "unet",
        plain_conv.unet(8, 32, (32, 64, 128), False),
        "3-level U-Net 32x32, batch 8",
    ),
    _p(
        "unet_128_b4",
        "unet",
        plain_conv.unet(4, 128, (8, 16, 32, 64), False),
        "4-level U-Net 128x128, batch 4",
    ),
    _p(
        "unet_train_32_b4",
        "unet",
        plain_conv.unet(4, 32, (16, 32, 64), True),
        "3-level U-Net training step, batch 4",
    ),
    _p(
        "unet_64_b2",
        "unet",
        plain_conv.unet(2, 64, (16, 32, 64), False),
        "3-level U-Net 64x64, batch 2",
    ),
    # shape-varied templates (plain.py): one family per template
    _p(
        "gconv_k3s1_c3x16-32_32_b8",
        "g_conv",
        plain_conv.conv_stack(8, 32, 3, (16, 32), 3, 1, False),
        "2 conv(s) 3x3 stride 1, 3->16-32 ch, 32x32, batch 8",
    ),
    _p(
        "gconv_k5s2_c1x8-16_64_b4",
        "g_conv",
        plain_conv.conv_stack(4, 64, 1, (8, 16), 5, 2, False),
        "2 conv(s) 5x5 stride 2, 1->8-16 ch, 64x64, batch 4",
    ),
    _p(
        "gconv_k7s2_c3x32_32_b16",
        "g_conv",
        plain_conv.conv_stack(16, 32, 3, (32,), 7, 2, False),
        "1 conv(s) 7x7 stride 2, 3->32 ch, 32x32, batch 16",
    ),
    _p(
        "gconv_k3s2_c3x16-32-64_64_b8",
        "g_conv",
        plain_conv.conv_stack(8, 64, 3, (16, 32, 64), 3, 2, False),
        "3 conv(s) 3x3 stride 2, 3->16-32-64 ch, 64x64, batch 8",
    ),
    _p(
        "gconv_k1s1_c16x32-32_16_b32",
        "g_conv",
        plain_conv.conv_stack(32, 16, 16, (32, 32), 1, 1, False),
        "2 conv(s) 1x1 stride 1, 16->32-32 ch, 16x16, batch 32",
    ),
    _p(
        "gconv_k5s1_c3x8-16_96_b2",
        "g_conv",
        plain_conv.conv_stack(2, 96, 3, (8, 16), 5, 1, False),
        "2 conv(s) 5x5 stride 1, 3->8-16 ch, 96x96, batch 2",
    ),
    _p(
        "gconv_train_k3s1_c3x16-32_32_b8",
        "g_conv",
        plain_conv.conv_stack(8, 32, 3, (16, 32), 3, 1, True),
        "2 conv(s) 3x3 stride 1, 3->16-32 ch, 32x32, batch 8, training step",
    ),
    _p(
        "gconv_train_k3s1_c1x8-8_32_b4",
        "g_conv",
        plain_conv.conv_stack(4, 32, 1, (8, 8), 3, 1, True),
        "2 conv(s) 3x3 stride 1, 1->8-8 ch, 32x32, batch 4, training step",
    ),
    _p(
        "gconv_k3s1_c32x64_8_b64",
        "g_conv",
        plain_conv.conv_stack(64, 8, 32, (64,), 3, 1, False),
        "1 conv(s) 3x3 stride 1, 32->64 ch, 8x8, batch 64",
    ),
    _p(
        "ggroup_g32k3_c32_32_b8",
        "g_group",
        plain_conv.grouped_conv(8, 32, 32, 32, 3, 2, False),
        "2 x (depthwise 3x3 + 1x1) residual, 32 ch, 32x32, batch 8",
    ),
    _p(
        "ggroup_g64k5_c64_32_b4",
        "g_group",
        plain_conv.grouped_conv(4, 32, 64, 64, 5, 2, False),
        "2 x (depthwise 5x5 + 1x1) residual, 64 ch, 32x32, batch 4",
    ),
    _p(
        "ggroup_g4k3_c32_16_b16",
        "g_group",
        plain_conv.grouped_conv(16, 16, 32, 4, 3, 3, False),
        "3 x (4-group 3x3 + 1x1) residual, 32 ch, 16x16, batch 16",
    ),
    _p(
        "ggroup_g16k3_c16_64_b2",
        "g_group",
        plain_conv.grouped_conv(2, 64, 16, 16, 3, 2, False),
        "2 x (depthwise 3x3 + 1x1) residual, 16 ch, 64x64, batch 2",
    ),
    _p(
        "ggroup_train_g8k3_c32_16_b2",
        "g_group",
        plain_conv.grouped_conv(2, 16, 32, 8, 3, 2, True),
        "2 x (8-group 3x3 + 1x1) residual, 32 ch, 16x16, batch 2, training step",
    ),
    _p(
        "ggroup_g48k7_c48_64_b1",
        "g_group",
        plain_conv.grouped_conv(1, 64, 48, 48, 7, 1, False),
        "1 x (depthwise 7x7 + 1x1) residual, 48 ch, 64x64, batch 1",
    ),
    _p(
        "gsig_k9_c16_1024_b16",
        "g_signal",
        plain_conv.signal2d(16, 1024, 16, 9, 2, False),
        "1-D signal of 1024 as a 1x1024 image, 2 (1,9) convs, 16 ch, batch 16",
    ),
    _p(
        "gsig_k15_c8_4096_b4",
        "g_signal",
        plain_conv.signal2d(4, 4096, 8, 15, 2, False),
        "1-D signal of 4096 as a 1x4096 image, 2 (1,15) convs, 8 ch, batch 4",
    ),
    _p(
        "gsig_k5_c32_256_b64",
        "g_signal",
        plain_conv.signal2d(64, 256, 32, 5, 3, False),
        "1-D signal of 256 as a 1x256 image, 3 (1,5) convs, 32 ch, batch 64",
    ),
    _p(
        "gsig_k3_c16_2048_b8",
        "g_signal",
        plain_conv.signal2d(8, 2048, 16, 3, 4, False),
        "1-D signal of 2048 as a 1x2048 image, 4 (1,3) convs, 16 ch, batch 8",
    ),
    _p(
        "gsig_train_k9_c16_512_b16",
        "g_signal",
        plain_conv.signal2d(16, 512, 16, 9, 2, True),
        "1-D signal of 512 as a 1x512 image, 2 (1,9) convs, 16 ch, batch 16, training step",
    ),
    _p(
        "gsig_k31_c4_16384_b1",
        "g_signal",
        plain_conv.signal2d(1, 16384, 4, 31, 1, False),
        "1-D signal of 16384 as a 1x16384 image, 1 (1,31) convs, 4 ch, batch 1",
    ),
    _p(
        "gmm_1x1024x4096_l2",
        "g_matmul",
        plain.matmul_chain(1, 1024, 4096, 2, False),
        "2 matmuls [1,1024]x[1024,4096]..., silu",
    ),
    _p(
        "gmm_1024x64x64_l4",
        "g_matmul",
        plain.matmul_chain(1024, 64, 64, 4, False),
        "4 matmuls [1024,64]x[64,64]..., silu",
    ),
    _p(
        "gmm_8x2048x512_l3",
        "g_matmul",
        plain.matmul_chain(8, 2048, 512, 3, False),
        "3 matmuls [8,2048]x[2048,512]..., silu",
    ),
    _p(
        "gmm_256x256x256_l6",
        "g_matmul",
        plain.matmul_chain(256, 256, 256, 6, False),
        "6 matmuls [256,256]x[256,256]..., silu",
    ),
    _p(
        "gmm_512x128x1024_l2",
        "g_matmul",
        plain.matmul_chain(512, 128, 1024, 2, False),
        "2 matmuls [512,128]x[128,1024]..., silu",
    ),
    _p(
        "gmm_train_32x1024x1024_l2",
        "g_matmul",
        plain.matmul_chain(32, 1024, 1024, 2, True),
        "2 matmuls [32,1024]x[1024,1024]..., silu, training step",
    ),
    _p(
        "gmm_4096x32x128_l3",
        "g_matmul",
        plain.matmul_chain(4096, 32, 128, 3, False),
        "3 matmuls [4096,32]x[32,128]..., silu",
    ),
    _p(
        "gmm_train_64x512x2048_l2",
        "g_matmul",
        plain.matmul_chain(64, 512, 2048, 2, True),
        "2 matmuls [64,512]x[512,2048]..., silu, training step",
    ),
    # loop-heavy programs (plain_loops.py): integrators, samplers, rollouts, optimizers
    _p(
        "loop_rk4_kuramoto_1024",
        "loops",
        plain_loops.rk4_kuramoto(1024, 300),
        "RK4 (lax.scan), 1024 Kuramoto oscillators, 300 steps",
    ),
    _p(
        "loop_rk4_kuramoto_128",
        "loops",
        plain_loops.rk4_kuramoto(128, 5000),
        "RK4 (lax.scan), 128 Kuramoto oscillators, 5000 steps",
    ),
    _p(
        "loop_sde_ou_1024",
        "loops",
        plain_loops.sde_ou(1024, 1000),
        "Euler-Maruyama (lax.scan), 1024 OU paths, 1000 steps",
    ),
    _p(
        "loop_rwm_banana_64x8",
        "loops",
        plain_loops.rw_metropolis(64, 8, 1000),
        "random-walk Metropolis (fori_loop), 64 chains x 8 dims, 1000 steps",
    ),
    _p(
        "loop_hmc_16x16",
        "loops",
        plain_loops.hmc(16, 16, 1000, 10),
        "HMC (nested fori_loop), 16 chains x 16 dims, 1000 x 10 leapfrog steps",
    ),
    _p(
        "loop_nbody_32",
        "loops",
        plain_loops.nbody(32, 1000),
        "leapfrog N-body rollout (fori_loop), 32 particles, 1000 steps",
    ),
    _p(
        "loop_gd_rosenbrock_512",
        "loops",
        plain_loops.gd_rosenbrock(512, 20000, 1e-5),
        "momentum GD on Rosenbrock (while_loop + tolerance), 512 dims",
    ),
    _p(
        "loop_indrnn_8x64",
        "loops",
        plain_loops.indrnn(8, 500, 32, 64),
        "LSTM-like IndRNN (lax.scan), batch 8, hidden 64, 500 steps",
    ),
    _p(
        "loop_lotka_volterra_256",
        "loops",
        plain_loops.lotka_volterra(256, 40000),
        "RK4 (fori_loop), 256 predator-prey systems, 40000 steps",
    ),
    _p(
        "loop_heat2d_32",
        "loops",
        plain_loops.heat2d(32, 20000),
        "2-D heat equation stencil (fori_loop), 32x32, 20000 steps",
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
