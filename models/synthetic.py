"""Synthetic TpuGraphs files in the exact real format, of any size (numpy only).

Arrays follow datasets/tpugraphs/FORMAT.md: the real keys in the real order and dtypes,
edges ``[u, v]`` with u > v sorted lexicographically without duplicates, valid opcode
ids, ``node_splits`` of shape [1,S], tile normalisers = the runtime of config 0 (the
"default" config). Everything is vectorised: 50,000 nodes and 100,000 configs take
well under a second.

Planted signal (``signal=True``): runtimes are a deterministic function of config
features and graph features, times ``exp(noise * N(0,1))``.

* tile: each kernel has a preferred log2 tile size per dimension, a function of the
  widest output dim of its nodes in that dimension; runtime grows with the squared
  log2 distance of the config's ``output_bounds`` from it.
* layout: each configurable node prefers its default most-minor dim (node feature 134);
  a config pays, per node and weighted by the node's log element count,
  ``|output_layout[0] - preferred|`` (1.5 when the compiler chooses, -1).
* xla_cpu: configs are ``xla_cpu2.sample`` rows (distinct, config 0 the default, whose
  runtime is the normaliser, as the collector writes them); each program prefers one
  option set, drawn with its seed, and runtime grows with the share of option bits a
  config sets otherwise. ``config_spec`` names the encoding.

With ``signal=False`` runtimes are random. ``make_*_arrays`` return arrays in memory
(benchmarks use them); ``write_npz``/``write_tree`` write files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from xla_costmodel.tpugraphs import xla_cpu2
from xla_costmodel.tpugraphs.collections import (
    LAYOUT,
    TILE,
    XLA_CPU,
    CollectionSpec,
    get,
)
from xla_costmodel.tpugraphs.spec import CONFIG_SPEC_KEY

Arrays = dict[str, npt.NDArray[np.generic]]
# Opcode ids from the official table (FORMAT.md): common ops, and the configurable ones.
COMMON_OPS = np.array([2, 13, 24, 25, 27, 41, 45, 57, 59, 70, 75, 92, 95, 98, 100])
PARAMETER, CONVOLUTION, DOT, RESHAPE = 63, 26, 34, 75
F32_TYPE_COL = 2 + 11  # one-hot column of f32 in features 2-20


def _edges(rng: np.random.Generator, n: int, window: int = 8) -> npt.NDArray[np.int64]:
    """1-3 operands per node, drawn from the ``window`` nodes before it (so u > v)."""
    fan_in = rng.integers(1, 4, n)
    fan_in[0] = 0
    users = np.repeat(np.arange(n), fan_in)
    lo = np.maximum(0, users - window)
    operands = lo + (rng.random(users.size) * (users - lo)).astype(np.int64)
    return (
        np.unique(np.stack([users, operands], 1), axis=0)
        .astype(np.int64)
        .reshape(-1, 2)
    )


def _graph(rng: np.random.Generator, n: int) -> tuple[Arrays, npt.NDArray[np.int64]]:
    """Node features, opcodes and edges; also the [N,6] output dims."""
    edge_index = _edges(rng, n)
    opcode = rng.choice(COMMON_OPS, n).astype(np.uint8)
    has_operand = np.zeros(n, bool)
    has_operand[edge_index[:, 0]] = True
    opcode[~has_operand] = PARAMETER
    rank = rng.integers(1, 5, n)
    dims = np.where(np.arange(6) < rank[:, None], 2 ** rng.integers(0, 9, (n, 6)), 0)
    feat = np.zeros((n, 140), np.float32)
    feat[n - 1, 0] = 1.0  # the root
    feat[:, F32_TYPE_COL] = 1.0
    feat[:, 21:27] = dims
    feat[:, 27] = dims.sum(1)
    feat[:, 28] = np.where(dims > 0, dims, 1).prod(1)
    params = np.flatnonzero(opcode == PARAMETER)
    feat[params, 30] = np.arange(params.size)
    # minor_to_major of a default layout: rank-1, ..., 0
    feat[:, 134:140] = np.where(
        np.arange(6) < rank[:, None], rank[:, None] - 1 - np.arange(6), 0
    )
    return {"node_feat": feat, "node_opcode": opcode, "edge_index": edge_index}, dims


def _runtimes(
    cost: npt.NDArray[np.float64], base: float, noise: float, rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    rt = base * cost * np.exp(noise * rng.standard_normal(cost.shape))
    return np.maximum(np.round(rt), 2).astype(np.int64)


def make_tile_arrays(
    num_nodes: int = 30,
    num_configs: int = 100,
    seed: int = 0,
    signal: bool = True,
    noise: float = 0.01,
) -> Arrays:
    rng = np.random.default_rng(seed)
    graph, dims = _graph(rng, num_nodes)
    tile_rank = int(rng.integers(2, 5))
    widest = np.log2(np.maximum(dims.max(0)[:tile_rank], 1))  # per dim, over all nodes
    target = 0.6 * widest + 1.0  # preferred log2 tile size per dimension
    log_tile = rng.integers(0, 9, (num_configs, 6)) * (np.arange(6) < tile_rank)
    out_bounds = np.where(np.arange(6) < tile_rank, 2.0**log_tile, 0.0)
    config = np.zeros((num_configs, 24), np.float32)
    config[:, 8:14] = out_bounds
    config[:, 14] = out_bounds.sum(1)
    config[:, 15] = np.where(out_bounds > 0, out_bounds, 1).prod(1)
    if signal:
        miss = np.square(log_tile[:, :tile_rank] - target).mean(1)
        cost = 1.0 + 0.3 * miss
    else:
        cost = rng.uniform(1.0, 3.0, num_configs)
    base = 1e3 * (1 + np.log2(graph["node_feat"][:, 28].sum()))
    runtime = _runtimes(cost, base, noise, rng)
    return {
        **graph,
        "config_feat": config,
        "config_runtime": runtime,
        "config_runtime_normalizers": np.full(num_configs, runtime[0], np.int64),
    }


def make_layout_arrays(
    num_nodes: int = 60,
    num_configs: int = 100,
    num_configurable: int = 8,
    seed: int = 0,
    signal: bool = True,
    noise: float = 0.001,
) -> Arrays:
    rng = np.random.default_rng(seed)
    graph, dims = _graph(rng, num_nodes)
    nc = min(num_configurable, num_nodes)
    ids = np.sort(rng.choice(num_nodes, nc, replace=False)).astype(np.int64)
    graph["node_opcode"][ids] = rng.choice([CONVOLUTION, DOT, RESHAPE], nc)
    rank = np.count_nonzero(dims[ids], axis=1)  # [NC]
    # Each tensor's layout: a random permutation of its dims (minor first), -1 padded.
    used = np.arange(6) < rank[:, None, None]  # [NC,1,6]
    keys = np.where(used, rng.random((num_configs, nc, 3, 6)), np.inf)
    perm = np.argsort(keys, axis=-1)
    layout = np.where(used, perm, -1)
    free = rng.random((num_configs, nc, 3)) < 0.2  # "the compiler chooses"
    layout[free] = -1
    layout[
        :, graph["node_opcode"][ids] != CONVOLUTION, 2
    ] = -1  # kernel: convolutions only
    node_config_feat = layout.reshape(num_configs, nc, 18).astype(np.float32)
    if signal:
        preferred = graph["node_feat"][ids, 134]  # [NC]: the default layout's minor dim
        minor = layout[:, :, 0, 0]
        per_node = np.where(minor >= 0, np.abs(minor - preferred), 1.5)
        weight = np.log2(graph["node_feat"][ids, 28] + 1.0)
        cost = 1.0 + 0.05 * (per_node * weight).sum(1) / max(weight.sum(), 1e-9)
    else:
        cost = rng.uniform(1.0, 1.05, num_configs)
    runtime = _runtimes(cost, 1e8, noise, rng)
    inner = np.sort(
        rng.choice(np.arange(1, num_nodes), min(2, num_nodes - 1), replace=False)
    )
    splits = np.concatenate([[0], inner, [num_nodes]]).astype(np.int64)[None, :]
    return {
        **graph,
        "node_config_feat": node_config_feat,
        "node_config_ids": ids,
        "config_runtime": runtime,
        "node_splits": splits,
    }


def make_xla_cpu_arrays(
    num_nodes: int = 30,
    num_configs: int = 100,
    seed: int = 0,
    signal: bool = True,
    noise: float = 0.01,
) -> Arrays:
    rng = np.random.default_rng(seed)
    graph, _ = _graph(rng, num_nodes)
    config = xla_cpu2.sample(num_configs, seed)  # distinct rows, row 0 the default
    if signal:
        preferred = xla_cpu2.sample(4, int(rng.integers(2**31)))[3]
        cost = 1.0 + 0.5 * (config != preferred).mean(1)
    else:
        cost = rng.uniform(1.0, 3.0, num_configs)
    base = 1e4 * (1 + np.log2(graph["node_feat"][:, 28].sum()))
    runtime = _runtimes(cost, base, noise, rng)
    return {
        **graph,
        "config_feat": config,
        "config_runtime": runtime,
        "config_runtime_normalizers": np.full(num_configs, runtime[0], np.int64),
        CONFIG_SPEC_KEY: np.array(xla_cpu2.SPEC),
    }


# Per declared collection, its array maker (the registry's spec is the key: a new
# collection adds its maker here; its folder is declared, ``dataset_dir``).
MAKERS: dict[CollectionSpec, Callable[..., Arrays]] = {
    TILE: make_tile_arrays,
    LAYOUT: make_layout_arrays,
    XLA_CPU: make_xla_cpu_arrays,
}


def make_arrays(collection: str, **kwargs: object) -> Arrays:
    """A synthetic file's arrays for ``collection`` (its maker's keyword arguments)."""
    return MAKERS[get(collection)](**kwargs)


def write_npz(path: Path, arrays: Arrays) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # keyword order = key order in the file; numpy's stub types **kwds loosely
    np.savez_compressed(path, **arrays)  # type: ignore[arg-type]
    return path


def write_tree(
    root: Path,
    collection: str,
    split: str,
    num_graphs: int,
    seed: int = 0,
    **kwargs: object,
) -> list[Path]:
    """``num_graphs`` files under ``root/npz/<folder>/<split>/``, the collection's
    declared ``dataset_dir`` (``tile/xla``, ``layout/xla/default``, ``xla_cpu``)."""
    spec = get(collection)
    make, sub = MAKERS[spec], spec.dataset_dir
    out = []
    for i in range(num_graphs):
        arrays = make(seed=seed * 100_003 + i, **kwargs)
        out.append(
            write_npz(
                root / "npz" / sub / split / f"synthetic_{split}_{i:04d}.npz", arrays
            )
        )
    return out


def main() -> None:
    """``python -m xla_costmodel.models.synthetic OUT_ROOT``: a small train/valid tree
    of every collection."""
    import sys

    root = Path(sys.argv[1])
    for spec in MAKERS:
        collection = spec.name
        for split, n in (("train", 16), ("valid", 4)):
            seed = 0 if split == "train" else 1
            print(
                len(write_tree(root, collection, split, n, seed)),
                collection,
                split,
                "files",
            )


if __name__ == "__main__":
    main()
