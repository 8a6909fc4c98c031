"""Read a network's parameters back from its exported ONNX files, for an artifact
that has no PyTorch checkpoint beside it (``xla_costmodel.models.finetune``).

The exporter lifts every parameter as an initializer named after it, but its optimiser
then folds constants: some parameters survive only in derived form, and which ones
depends on tensor sizes (the shipped tile model keeps ``gnn.node_in.linear.weight``; a
16-wide one has it folded). Seen so far: a Linear weight stored pre-transposed for a
MatMul, and a ``NormLinear``'s weight and bias with the normalisation folded in
(``weight * inv_std``, ``bias - weight @ mean``). So names alone do not recover the
network: a parameter missing by name is filled from the unnamed initializers of its
shape (or its transposed shape), and every combination is checked by the caller's
``gap`` against the file itself. A folded ``NormLinear`` comes back re-expressed (mean 0,
inv_std 1 on the columns it reads): the same function under other parameters.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import Tensor, nn

from xla_costmodel.models.network import NormLinear

MAX_COMBINATIONS = 256  # ways to fill the folded parameters of one file


class Unrecoverable(Exception):
    """No way to fill the module from the file reproduces it (why, in one line)."""


def restore(module: nn.Module, path: Path, gap: Callable[[], str | None]) -> None:
    """Load ``module`` (the encoder or scorer exported as ``path``) from the file's
    initializers: names first, then each way to fill the rest from unnamed ones, until
    ``gap()`` (one line on how the module differs from the file, or None) is None."""
    graph = onnx.load(str(path)).graph
    inits = {
        i.name: numpy_helper.to_array(i)
        for i in graph.initializer
        if i.data_type == onnx.TensorProto.FLOAT
    }
    state = module.state_dict()
    known = set(state) | {name for name, _ in module.named_buffers()}
    spare = [a for n, a in inits.items() if n not in known and a.ndim > 0]
    exact = {
        k: torch.from_numpy(inits[k].copy())
        for k, v in state.items()
        if k in inits and inits[k].shape == tuple(v.shape)
    }
    missing = [k for k in state if k not in exact]
    choices: list[tuple[str, list[dict[str, Tensor]]]] = []
    for prefix, norm in _norm_linears(module):
        group = [
            prefix + s for s in ("mean", "inv_std", "linear.weight", "linear.bias")
        ]
        if any(k in missing for k in group):
            choices.append((prefix + "linear", _folded(norm, prefix, spare)))
            missing = [k for k in missing if k not in group]
    choices += [
        (k, [{k: t} for t in _shaped(spare, tuple(state[k].shape))]) for k in missing
    ]
    if lacking := [name for name, options in choices if not options]:
        raise Unrecoverable(f"{path.name} has no initializer for {', '.join(lacking)}")
    ways = math.prod(len(options) for _, options in choices)
    if ways > MAX_COMBINATIONS:
        raise Unrecoverable(f"{path.name}: {ways} ways to fill its folded parameters")
    last = f"{path.name}: nothing to try"
    for combo in itertools.product(*(options for _, options in choices)):
        module.load_state_dict({**exact, **{k: v for c in combo for k, v in c.items()}})
        found = gap()
        if found is None:
            return
        last = found
    raise Unrecoverable(last)


def _norm_linears(module: nn.Module) -> list[tuple[str, NormLinear]]:
    return [
        (f"{name}." if name else "", m)
        for name, m in module.named_modules()
        if isinstance(m, NormLinear)
    ]


def _shaped(arrays: list[np.ndarray], shape: tuple[int, ...]) -> list[Tensor]:
    """The arrays that fit ``shape`` as they are, or transposed (a Linear's weight)."""
    out = [a for a in arrays if a.shape == shape]
    out += [a.T for a in arrays if a.ndim == 2 and a.T.shape == shape]
    return [torch.from_numpy(np.array(a, dtype=np.float32, order="C")) for a in out]


def _folded(
    norm: NormLinear, prefix: str, spare: list[np.ndarray]
) -> list[dict[str, Tensor]]:
    """A folded NormLinear re-expressed: weight * inv_std as the weight, bias - weight @
    mean as the bias, no shift, and the columns it reads (nonzero ones) unscaled."""
    out_dim, in_dim = norm.linear.weight.shape
    return [
        {
            prefix + "linear.weight": w,
            prefix + "linear.bias": b,
            prefix + "mean": torch.zeros(in_dim),
            prefix + "inv_std": (w != 0).any(dim=0).float(),
        }
        for w in _shaped(spare, (out_dim, in_dim))
        for b in _shaped(spare, (out_dim,))
    ]
