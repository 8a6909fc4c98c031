"""Stage 1: training examples from TpuGraphs files (numpy only).

* **De-duplication.** Identical config rows are merged; the merged runtime is the
  **mean** of the repeats (repeats are measurement noise around one true runtime, and
  the mean is its least noisy estimate).
* **Targets.** Where the collection has normalisers (tile, xla_cpu): runtime /
  config_runtime_normalizers (relative to the default config); layout: raw ns (only
  the order within a graph matters).
* **Ranking.** Graphs with fewer than 2 distinct configs carry no pair to rank and are
  dropped from training (``Example.rankable``).
* **Statistics** come from the training partition only: node features, and the configs
  of a collection that declares ``config_log`` (tile sizes), are compared after a log
  (``feature_log``: ``sign(x) * log1p(|x|)`` for the node columns that may be negative,
  ``log1p(max(x, 0))`` for the rest), other configs (layout's small dimension indices,
  xla_cpu's option codes) raw. Columns constant over training get std 0, which the
  network masks.
* **Streaming.** Files are read one at a time; ``ExampleStore`` keeps examples in
  memory up to a byte budget and re-reads the files each epoch beyond it.
* **Default hold-out.** Without ``--valid`` files, ``holdout_split`` groups the files by
  graph id (``xla_costmodel.tpugraphs.graph_id``: a layout program under ``default/`` and ``random/``
  is one graph) and sends the labelled graphs whose sha256(file name) sorts first (a
  fraction, at least one) to validation, every file of a graph on the same side. It is
  deterministic and does not depend on the file order.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from xla_costmodel.tpugraphs.arrays import Graph, Sample
from xla_costmodel.tpugraphs.collections import get
from xla_costmodel.tpugraphs.reader import (
    expand_paths,
    file_collection,
    file_graph,
    iter_samples,
)
from xla_costmodel.tpugraphs.spec import COLLECTION_NAMES, Collection

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Example:
    """One graph with its distinct configs and their mean targets."""

    name: str
    graph: Graph
    configs: F32  # [K,W] or [K,NC,W], distinct rows
    targets: F64  # [K]
    raw_configs: int  # configs in the file, before de-duplication

    @property
    def rankable(self) -> bool:
        return bool(self.configs.shape[0] >= 2)

    @property
    def nbytes(self) -> int:
        return self.graph.nbytes + self.configs.nbytes + self.targets.nbytes


def dedup_configs(configs: F32, targets: F64) -> tuple[F32, F64]:
    """Merge identical config rows (first-occurrence order kept); targets are averaged."""
    flat = np.ascontiguousarray(configs.reshape(configs.shape[0], -1))
    rows = flat.view(np.dtype((np.void, flat.dtype.itemsize * flat.shape[1]))).ravel()
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    sums = np.bincount(inverse, weights=targets, minlength=first.size)
    means = sums / np.bincount(inverse, minlength=first.size)
    keep = np.argsort(first, kind="stable")  # group ids in order of first occurrence
    return configs[first[keep]], means[keep]


def make_example(
    sample: Sample, max_configs: int | None = None, seed: int = 0
) -> Example:
    """De-duplicate, then keep at most ``max_configs`` configs (a seeded random subset
    that always includes the fastest, so big graphs fit in memory)."""
    configs, targets = dedup_configs(sample.configs, sample.targets())
    if max_configs is not None and configs.shape[0] > max_configs:
        rng = np.random.default_rng([seed, _name_seed(sample.name)])
        best = int(np.argmin(targets))
        rest = np.delete(np.arange(configs.shape[0]), best)
        keep = np.sort(
            np.concatenate([[best], rng.choice(rest, max_configs - 1, replace=False)])
        )
        configs, targets = configs[keep], targets[keep]
    return Example(sample.name, sample.graph, configs, targets, sample.num_configs)


def _name_seed(name: str) -> int:
    return int.from_bytes(
        hashlib.sha256(Path(name).name.encode()).digest()[:4], "little"
    )


def iter_examples(
    paths: Iterable[str | Path],
    collection: Collection,
    max_configs: int | None = None,
    seed: int = 0,
) -> Iterator[Example]:
    """Labelled examples of one collection, one file at a time."""
    for sample in iter_samples(paths, collection, labelled_only=True):
        yield make_example(sample, max_configs, seed)


class ExampleStore:
    """Re-iterable examples: cached while they fit in ``cache_bytes``, else re-streamed."""

    def __init__(
        self,
        paths: Sequence[Path],
        collection: Collection,
        max_configs: int | None = None,
        seed: int = 0,
        cache_bytes: int = 2 << 30,
    ) -> None:
        self.paths = list(paths)
        self.collection: Collection = collection
        self.max_configs = max_configs
        self.seed = seed
        self.cache_bytes = cache_bytes
        self._cache: list[Example] | None = None

    def __iter__(self) -> Iterator[Example]:
        if self._cache is not None:
            yield from self._cache
            return
        cache: list[Example] | None = []
        used = 0
        for ex in iter_examples(
            self.paths, self.collection, self.max_configs, self.seed
        ):
            if cache is not None:
                used += ex.nbytes
                if used <= self.cache_bytes:
                    cache.append(ex)
                else:
                    cache = None  # too big: stream every epoch instead
            yield ex
        self._cache = cache

    def shuffled(self, rng: np.random.Generator) -> Iterator[Example]:
        """One epoch in random order: the cache permuted, or the files re-read in a
        permuted order (one graph in memory at a time)."""
        if self._cache is not None:
            for i in rng.permutation(len(self._cache)):
                yield self._cache[i]
            return
        paths = [self.paths[i] for i in rng.permutation(len(self.paths))]
        yield from iter_examples(paths, self.collection, self.max_configs, self.seed)


@dataclass
class FeatureStats:
    """Per-column mean/std of the transformed node and config features (training only)."""

    node_mean: F64
    node_std: F64
    config_mean: F64
    config_std: F64
    graphs: int
    nodes: int
    config_rows: int

    def as_dict(self) -> dict[str, list[float]]:
        return {
            k: getattr(self, k).tolist()
            for k in ("node_mean", "node_std", "config_mean", "config_std")
        }


class _Moments:
    """Streaming column moments; exact-constant columns (min == max) get std 0."""

    def __init__(self, dim: int) -> None:
        self.n = 0
        self.total = np.zeros(dim)
        self.total_sq = np.zeros(dim)
        self.lo = np.full(dim, np.inf)
        self.hi = np.full(dim, -np.inf)

    def add(self, x: F64) -> None:
        self.n += x.shape[0]
        self.total += x.sum(0)
        self.total_sq += np.square(x).sum(0)
        self.lo = np.minimum(self.lo, x.min(0))
        self.hi = np.maximum(self.hi, x.max(0))

    def finish(self) -> tuple[F64, F64]:
        n = max(self.n, 1)
        mean = self.total / n
        std = np.sqrt(np.maximum(self.total_sq / n - mean**2, 0.0))
        std[~(self.hi > self.lo)] = 0.0
        return mean, std


# Node feature columns that can be negative in valid HLO (FORMAT.md): window padding
# low and high (dims, sum, product; XLA allows negative padding) and pad's edge padding
# low and high (first 2, sum, product). Every other node feature, and every tile config
# value, is a size, count, index or flag: never negative.
SIGNED_NODE_COLUMNS: tuple[int, ...] = (*range(53, 69), *range(125, 133))


def signed_log(x: npt.NDArray[np.floating]) -> F64:
    """numpy twin of ``network.signed_log``."""
    x64 = np.asarray(x, np.float64)
    return np.sign(x64) * np.log1p(np.abs(x64))


def feature_log(x: npt.NDArray[np.floating], signed: Sequence[int] = ()) -> F64:
    """numpy twin of a log ``network.NormLinear`` (the statistics must see what the net
    sees): ``signed_log`` on the columns ``signed``, ``log1p(max(x, 0))`` elsewhere."""
    x64 = np.asarray(x, np.float64)
    out = np.log1p(np.maximum(x64, 0.0))
    cols = list(signed)
    out[..., cols] = signed_log(x64[..., cols])
    return out


def feature_stats(examples: Iterable[Example], collection: Collection) -> FeatureStats:
    log_configs = get(collection).config_log
    first = True
    node = _Moments(0)
    config = _Moments(0)
    graphs = 0
    for ex in examples:
        if first:
            node = _Moments(ex.graph.node_feat.shape[1])
            config = _Moments(ex.configs.shape[-1])
            first = False
        graphs += 1
        node.add(feature_log(ex.graph.node_feat, SIGNED_NODE_COLUMNS))
        rows = ex.configs.reshape(-1, ex.configs.shape[-1])
        config.add(feature_log(rows) if log_configs else rows.astype(np.float64))
    if first:
        raise ValueError(
            "no labelled training graphs: cannot compute feature statistics"
        )
    node_mean, node_std = node.finish()
    config_mean, config_std = config.finish()
    return FeatureStats(
        node_mean, node_std, config_mean, config_std, graphs, node.n, config.n
    )


def name_hash(path: Path) -> str:
    """sha256 of the file name: a split key independent of the file order and machine."""
    return hashlib.sha256(path.name.encode()).hexdigest()


def holdout_split(
    paths: Sequence[Path], fraction: float = 0.2
) -> tuple[list[Path], list[Path]]:
    """(train, valid) by whole graph; see the module doc. Fewer than 2 labelled graphs:
    no validation. Unlabelled files never validate, and are dropped with their graph."""
    files = expand_paths(paths)
    info = {p: file_graph(p) for p in files}
    groups: dict[str, list[Path]] = {}
    for p in files:
        if info[p][1]:
            groups.setdefault(info[p][0], []).append(p)
    if len(groups) < 2:
        return files, []
    ranked = sorted(groups, key=lambda g: (min(map(name_hash, groups[g])), g))
    n_valid = min(len(groups) - 1, max(1, math.ceil(fraction * len(groups))))
    chosen = set(ranked[:n_valid])
    valid = [p for p in files if info[p][0] in chosen and info[p][1]]
    return [p for p in files if info[p][0] not in chosen], valid


def without_graphs_of(
    files: Sequence[Path], held: Sequence[Path]
) -> tuple[list[Path], list[Path]]:
    """(``files`` minus every file that is, or holds the same graph as, one of ``held``;
    the files removed). Paths are compared resolved, graphs by ``file_graph`` id."""
    held_paths = {p.resolve() for p in held}
    held_ids = {file_graph(p)[0] for p in held}
    kept: list[Path] = []
    dropped: list[Path] = []
    for p in files:
        same = p.resolve() in held_paths or file_graph(p)[0] in held_ids
        (dropped if same else kept).append(p)
    return kept, dropped


def collection_files(paths: Iterable[str | Path], collection: Collection) -> list[Path]:
    """The npz files of one collection under files/dirs (a dataset tree holds several)."""
    return [p for p in expand_paths(paths) if file_collection(p) == collection]


def main() -> None:
    """Summarise what training would see in some files: ``python -m xla_costmodel.models.data PATH...``."""
    import sys

    for collection in COLLECTION_NAMES:
        for ex in iter_examples(sys.argv[1:], collection):
            print(
                f"{collection} {ex.name}: {ex.graph.num_nodes} nodes, "
                f"{ex.raw_configs} configs, {ex.configs.shape[0]} distinct, "
                f"rankable={ex.rankable}"
            )


if __name__ == "__main__":
    main()
