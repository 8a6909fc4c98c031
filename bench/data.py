"""The inputs every phase uses: real TpuGraphs graphs and realistic config batches.

Tile graphs are the real kernels converted from the official test data; a batch of N
tile configs is made by sampling a kernel's real config rows and rescaling their tile
sizes by powers of two (sums and products recomputed), so values stay realistic. The
layout phase uses the real 21,918-node nlp test graph and its 1,001 real configs.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from xla_costmodel import paths
from xla_costmodel.tpugraphs.arrays import Graph, Sample
from xla_costmodel.tpugraphs.reader import load_npz
from xla_costmodel.tpugraphs.spec import TILE_CONFIG_DIM

TILE_SUBDIR = "pb/official_testdata/op_tuning_data.converted"
NLP_GRAPH = "npz/layout/nlp/default/test/3a0c5517a87df8d82fd637b83298a3ba.npz"
SMALL_LAYOUT_GRAPH = "npz/layout/xla/default/test/cd708819d3f5103afd6460b15e74eaf3.npz"
F32 = npt.NDArray[np.float32]


def tpugraphs_root() -> Path:
    """``$COSTMODEL_TPUGRAPHS_DATA``, else ``datasets/tpugraphs`` from the working
    directory (the repository root under ``make``)."""
    root = Path(os.environ.get("COSTMODEL_TPUGRAPHS_DATA", paths.TPUGRAPHS))
    if not root.is_dir():
        raise FileNotFoundError(
            f"real TpuGraphs data not found at {root}: run from the repository root "
            "or set COSTMODEL_TPUGRAPHS_DATA"
        )
    return root


def tile_samples(root: Path | None = None) -> list[Sample]:
    """The converted real tile kernels, the one with most real configs first (the main
    benchmark graph: its synthetic configs are drawn from the most varied rows)."""
    paths = sorted((root or tpugraphs_root()).joinpath(TILE_SUBDIR).glob("*.npz"))
    samples = [load_npz(p, "tile") for p in paths]
    if not samples:
        raise FileNotFoundError(f"no tile kernels under {TILE_SUBDIR}")
    return sorted(samples, key=lambda s: (-s.num_configs, s.name))


def layout_sample(relpath: str = NLP_GRAPH, root: Path | None = None) -> Sample:
    return load_npz((root or tpugraphs_root()) / relpath, "layout")


def fresh_copy(graph: Graph, k: int) -> Graph:
    """The same graph under a new graph id, for a genuinely cold request.

    Only ``node_feat[0, 1]`` changes; FORMAT.md: column 1 (element_size_in_bits) is
    always 0 in the dataset, so training gives it zero weight and the encoder does the
    same work with the same result. The service has never seen this id.
    """
    feat = graph.node_feat.copy()
    feat[0, 1] = float(k + 1)
    return dataclasses.replace(graph, node_feat=feat)


def synth_tile_configs(real: F32, n: int, rng: np.random.Generator) -> F32:
    """``n`` config rows drawn from ``real`` with tile sizes scaled by 1/2, 1 or 2.

    Each of the three bounds lists (kernel, output, input) is 6 dims + sum + product;
    a list that is all zero (empty) stays empty, so its product stays 0.
    """
    rows = real[rng.integers(0, real.shape[0], size=n)].astype(np.float32)
    for start in range(0, TILE_CONFIG_DIM, 8):
        dims = rows[:, start : start + 6]
        scale = np.exp2(rng.integers(-1, 2, size=dims.shape)).astype(np.float32)
        dims[:] = np.where(dims > 0, np.maximum(1.0, np.round(dims * scale)), dims)
        present = dims > 0
        rows[:, start + 6] = dims.sum(axis=1)
        product = np.where(present, dims, 1.0).prod(axis=1)
        rows[:, start + 7] = np.where(present.any(axis=1), product, 0.0)
    return np.ascontiguousarray(rows)


@dataclass(frozen=True)
class TileWorkload:
    """The tile graphs of a run and a pool of synthetic configs for each."""

    samples: list[Sample]
    configs: list[F32]  # configs[i] belongs to samples[i]

    @property
    def main(self) -> Sample:
        return self.samples[0]

    @property
    def main_configs(self) -> F32:
        return self.configs[0]


def tile_workload(pool: int, seed: int = 0, root: Path | None = None) -> TileWorkload:
    """Every real tile kernel with ``pool`` synthetic configs (fixed seed: repeatable)."""
    rng = np.random.default_rng(seed)
    samples = tile_samples(root)
    configs = [synth_tile_configs(s.configs, pool, rng) for s in samples]
    return TileWorkload(samples, configs)
