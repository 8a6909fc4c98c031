"""Twelve small JAX programs that are not in the zoo, for the fleet runs in docs/xla-cpu.md.

``costmodel tune examples/fleet_programs.py:NAME --budget 8`` tunes one; ``NAMES``
lists them in the order that run tuned them, one after another against one
service. Convolutional, recurrent, MLP and attention programs, inference and
training steps, at shapes no zoo program has. Each function returns ``(fn, args)``.
"""

from __future__ import annotations

from typing import Any

from xla_costmodel.collection import plain, plain_conv

Built = tuple[Any, tuple[Any, ...]]


def conv_strided() -> Built:
    """Two 3x3 stride-2 convolutions, 48x48 RGB, batch 16, inference."""
    return plain_conv.conv_stack(16, 48, 3, (24, 48), 3, 2, False)()


def resnet_train() -> Built:
    """A residual CNN (grouped 3x3 + 1x1 blocks), 16x16, batch 4, training step."""
    return plain_conv.grouped_conv(4, 16, 24, 2, 3, 2, True)()


def mobile_block() -> Built:
    """Depthwise 3x3 + pointwise blocks, 40 channels, 48x48, batch 4, inference."""
    return plain_conv.grouped_conv(4, 48, 40, 40, 3, 2, False)()


def audio_conv() -> Built:
    """A 1-D signal of 6,000 samples as a 1 x 6000 image, (1, 11) kernels, batch 2."""
    return plain_conv.signal2d(2, 6000, 12, 11, 2, False)()


def lstm_infer() -> Built:
    """LSTM, 48 steps, hidden 192, batch 16, inference."""
    return plain.rnn("lstm", 16, 48, 96, 192, False)()


def gru_train() -> Built:
    """GRU, 24 steps, hidden 128, batch 8, training step (BPTT)."""
    return plain.rnn("gru", 8, 24, 64, 128, True)()


def mlp_mnist() -> Built:
    """MLP 784-512x2-10, batch 128, inference."""
    return plain.mlp(128, 784, 512, 2, 10, False)()


def mlp_train() -> Built:
    """MLP 256-1536x3-64, batch 24, training step."""
    return plain.mlp(24, 256, 1536, 3, 64, True)()


def attention() -> Built:
    """Multi-head attention, sequence 96, width 192, 6 heads, batch 8."""
    return plain.attention(8, 96, 192, 6, False)()


def transformer_train() -> Built:
    """One causal transformer block, sequence 64, width 128, batch 4, training step."""
    return plain.transformer(4, 64, 128, 4, 1, True, True)()


def lenet() -> Built:
    """5x5 convolutions on 28x28 single-channel images, batch 64, inference."""
    return plain_conv.conv_stack(64, 28, 1, (6, 16), 5, 1, False)()


def unet_small() -> Built:
    """A 2-level U-Net, 48x48, batch 2, inference."""
    return plain_conv.unet(2, 48, (12, 24), False)()


NAMES = (
    "conv_strided",
    "lstm_infer",
    "mlp_mnist",
    "attention",
    "resnet_train",
    "audio_conv",
    "gru_train",
    "mlp_train",
    "mobile_block",
    "transformer_train",
    "lenet",
    "unet_small",
)
