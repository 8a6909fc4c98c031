"""The collections of measurements a model can be trained on, each declared once.

A collection is one kind of tuning question: what a config is, how its runtimes are
labelled and how a ranking of them is scored. Code that differs by collection looks
the difference up here (``get(name).per_node``, ``.config_key``, ``.metrics``, ...)
instead of comparing names::

    name     configs                           runtimes        default config   metrics
    tile     config_feat [C,24]                / normaliser    runtime == norm  top-K slowdown
    layout   node_config_feat [C,NC,18]        raw ns          not marked       tau, slowdown@K
    xla_cpu  config_feat [C,xla_cpu2.WIDTH]    / normaliser    runtime == norm  tau, top-K slowdown

``per_node`` collections configure each configurable node of a graph (the graph has
``node_config_ids``, the encoder also returns a context per such node, a config is
[NC, width]); the others configure the whole program with one row. A file names its
collection by its keys (``infer``): ``config_spec`` (a versioned encoding, e.g.
``"xla_cpu/2"``), else ``node_config_feat`` (layout), else tile. A collection whose
spec grew (``xla_cpu/1`` -> ``xla_cpu/2``) still reads the older rows: ``older``
names each earlier spec with its width and the upgrade that gives the same configs
in today's rows, applied wherever a config batch is read (``arrays.make_configs``:
files, requests), so everything past that point sees one width. numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, get_args

import numpy as np
import numpy.typing as npt

from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2
from xla_costmodel.tpugraphs.config_json import (
    TILE_JSON_SCHEMA,
    XLA_CPU_JSON_SCHEMA,
    is_tile_json,
    is_xla_cpu_json,
    tile_rows_from_json,
    xla_cpu_rows_from_json,
)
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.metrics import (
    LAYOUT_METRICS,
    NO_LAYOUT_DEFAULT,
    TILE_METRICS,
    MetricSet,
)
from xla_costmodel.tpugraphs.spec import (
    CONFIG_SPEC_KEY,
    GRAPH_KEYS,
    LAYOUT_CONFIG_DIM,
    LAYOUT_KEYS,
    TILE_CONFIG_DIM,
    TILE_KEYS,
    XLA_CPU_KEYS,
    Collection,
)

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
NORMALIZERS: Final = "config_runtime_normalizers"


class UnknownCollection(ValueError):
    """A name that is not a declared collection."""


@dataclass(frozen=True)
class RawRows:
    """Raw configs of a one-row collection as JSON-like values -> its config rows.

    ``recognises(item)``: whether one raw config is of this kind; ``encode(items,
    path)``: the [C, width] rows, GraphFormatError keyed by ``path[c]....`` or by
    ``configs[c]....`` (the encoders' own paths); ``schema``: one raw config's JSON
    Schema, with a ``title`` naming the form.
    """

    recognises: Callable[[Any], bool]
    encode: Callable[[Sequence[Any], str], F32]
    schema: Mapping[str, Any] = field(compare=False)  # a dict: not hashed


@dataclass(frozen=True)
class OlderSpec:
    """A config spec earlier releases wrote and this one still reads: its name, its
    row width and ``upgrade`` ([C, width] -> the same configs in today's rows)."""

    name: str
    width: int
    upgrade: Callable[[F32], F32] = field(compare=False)


@dataclass(frozen=True)
class CollectionSpec:
    """What one collection declares; see the module docstring for the three."""

    name: Collection
    # The npz key of the configs, which is also the scorer's ONNX config input.
    config_key: str
    width: int  # values per config row
    # Rows per configurable node ([C,NC,width], the graph has node_config_ids), or one
    # row per config ([C,width]).
    per_node: bool
    # The file's per-config normalisers (the default config's runtime): targets are
    # runtime / normaliser. None: runtimes are ranked as they are (ns).
    normalizer_key: str | None
    # The default config is one whose runtime equals its normaliser; else files do
    # not mark it and ``no_default`` says why.
    default_is_normalizer: bool
    no_default: str | None
    metrics: MetricSet
    # Early stopping: the mean of these metrics, higher (True) or lower is better.
    select_on: tuple[str, ...]
    higher_is_better: bool
    # The config values span decades (sizes): networks and statistics see their log.
    config_log: bool
    # Config values are small integers: the client sends them as int8 when they fit.
    small_int_configs: bool
    file_keys: tuple[str, ...]  # the keys of its npz files, in file order
    # The key a file is recognised by (None: every file no other collection claims).
    marker: str | None
    # Its files' folder under a dataset's ``npz/`` (the TpuGraphs layout).
    dataset_dir: str
    # The ``config_spec`` its files carry (None: they carry none).
    config_spec: str | None = None
    raw: RawRows | None = None  # per_node raw configs have their own encoder
    # Official eval config indices exist for its files (the TpuGraphs layout task).
    eval_indices: bool = False
    # The compiler's own config as one row, where it is the same for every program
    # (xla_cpu: XLA's defaults). Tile files mark their default per kernel by its
    # runtime instead (``default_index``), and layout files not at all: None.
    default_config: tuple[float, ...] | None = None
    # What one row stands for as a tuning decision: its compiler options, derived
    # from the row alone; ValueError for a row no tuner could have measured (outside
    # the spec, or a combination the sampler never draws). None: the rows are not
    # compiler options (the row itself is the decision: tile, layout).
    decision_options: Callable[[npt.ArrayLike], Mapping[str, Any]] | None = field(
        default=None, compare=False
    )
    # Earlier specs of this collection, still read (upgraded to ``width``).
    older: tuple[OlderSpec, ...] = ()

    @property
    def config_input(self) -> str:
        """The scorer's config input name (the artifact contract: the npz key)."""
        return self.config_key

    @property
    def normalised(self) -> bool:
        return self.normalizer_key is not None

    @property
    def required_keys(self) -> tuple[str, ...]:
        """Keys a file of this collection must have, in the order they are checked."""
        keys = [*GRAPH_KEYS, "config_runtime", self.config_key]
        keys += [self.normalizer_key] if self.normalizer_key else []
        keys += ["node_config_ids"] if self.per_node else []
        keys += [CONFIG_SPEC_KEY] if self.config_spec else []
        return tuple(keys)

    def config_shape(self, configurable: int = 0) -> tuple[int, ...]:
        """One config's shape, given the graph's configurable nodes (per_node)."""
        return (configurable, self.width) if self.per_node else (self.width,)

    def config_shapes(self, configurable: int = 0) -> tuple[tuple[int, ...], ...]:
        """Every config shape this collection reads: today's, then the older specs'."""
        if self.per_node:
            return ((configurable, self.width),)
        return ((self.width,), *((o.width,) for o in self.older))

    def upgrade(self, configs: F32) -> F32:
        """A config batch in today's width (an older spec's rows upgraded)."""
        if configs.shape[-1] == self.width:
            return configs
        older = next((o for o in self.older if o.width == configs.shape[-1]), None)
        if older is None:
            raise ValueError(f"no {self.name} spec has rows of {configs.shape[-1]}")
        return older.upgrade(configs)

    def spec_width(self, name: str) -> int:
        """The row width of the config spec ``name`` (today's or an older one)."""
        if name == self.config_spec:
            return self.width
        return next(o.width for o in self.older if o.name == name)

    def shape_doc(self) -> str:
        """The config batch's shape as the docs write it: [C,24], [C,NC,18]."""
        return f"[C,NC,{self.width}]" if self.per_node else f"[C,{self.width}]"

    def default_index(self, runtimes: I64, normalizers: I64 | None) -> int | None:
        """The default config's index (the first whose runtime is its normaliser)."""
        if not self.default_is_normalizer or normalizers is None:
            return None
        hits = np.flatnonzero(runtimes == normalizers)
        return int(hits[0]) if hits.size else None

    def default_baseline(self, targets: npt.ArrayLike) -> dict[str, float]:
        """The default config ranked first, on normalised ``targets`` (the default's
        is 1); only where ``default_is_normalizer``."""
        if not self.default_is_normalizer:
            raise ValueError(f"{self.name} files do not mark a default config")
        return self.metrics.default_baseline(targets, 1.0)

    def no_default_baseline(self) -> dict[str, float | str | None]:
        """The default baseline's row where files do not mark the default: every
        metric None, and the reason."""
        return self.metrics.no_default(self.no_default or "no default config")

    def selection_score(self, metrics: Mapping[str, float | None]) -> float:
        """Higher is better; -inf when none of ``select_on`` is defined."""
        values = [v for k in self.select_on if (v := metrics.get(k)) is not None]
        if not values:
            return -math.inf
        mean = float(np.mean(values))
        return mean if self.higher_is_better else -mean

    def check_config_spec(self, value: Any) -> None:
        """A file's ``config_spec`` must be a unicode scalar naming this spec."""
        arr = np.asarray(value)
        if arr.ndim != 0 or arr.dtype.kind != "U":
            raise GraphFormatError(
                CONFIG_SPEC_KEY,
                f"expected a unicode scalar, got dtype {arr.dtype} shape {list(arr.shape)}",
            )
        known = [s for s in (self.config_spec, *(o.name for o in self.older)) if s]
        if str(arr) not in known:
            raise GraphFormatError(
                CONFIG_SPEC_KEY,
                f"unknown spec {str(arr)!r}: this reader knows {', '.join(known)}",
            )


TILE: Final = CollectionSpec(
    name="tile",
    config_key="config_feat",
    width=TILE_CONFIG_DIM,
    per_node=False,
    normalizer_key=NORMALIZERS,
    default_is_normalizer=True,
    no_default=None,
    metrics=TILE_METRICS,
    select_on=TILE_METRICS.keys,
    higher_is_better=False,
    config_log=True,
    small_int_configs=False,
    file_keys=TILE_KEYS,
    marker=None,
    dataset_dir="tile/xla",
    raw=RawRows(is_tile_json, tile_rows_from_json, TILE_JSON_SCHEMA),
)
LAYOUT: Final = CollectionSpec(
    name="layout",
    config_key="node_config_feat",
    width=LAYOUT_CONFIG_DIM,
    per_node=True,
    normalizer_key=None,
    default_is_normalizer=False,
    no_default=NO_LAYOUT_DEFAULT,
    metrics=LAYOUT_METRICS,
    select_on=("kendall_tau",),
    higher_is_better=True,
    config_log=False,
    small_int_configs=True,
    file_keys=LAYOUT_KEYS,
    marker="node_config_feat",
    dataset_dir="layout/xla/default",
    eval_indices=True,
)


def _xla_cpu_options(row: npt.ArrayLike) -> dict[str, xla_cpu.OptionValue]:
    """An ``xla_cpu/2`` decision's options (as ``CompilerOptions.flat`` spells them):
    a valid row the sampler draws."""
    why = xla_cpu2.excluded(row)  # validates first (ValueError)
    if why is not None:
        raise ValueError(why)
    return xla_cpu2.to_options(row).flat()


XLA_CPU_METRICS: Final = MetricSet(TILE_METRICS.ks, TILE_METRICS.slowdown_key, True)
XLA_CPU: Final = CollectionSpec(
    name="xla_cpu",
    config_key="config_feat",
    width=xla_cpu2.WIDTH,
    per_node=False,
    normalizer_key=NORMALIZERS,
    default_is_normalizer=True,
    no_default=None,
    metrics=XLA_CPU_METRICS,
    select_on=XLA_CPU_METRICS.slowdown_keys,
    higher_is_better=False,
    config_log=False,
    small_int_configs=True,
    file_keys=XLA_CPU_KEYS,
    marker=CONFIG_SPEC_KEY,
    dataset_dir="xla_cpu",
    config_spec=xla_cpu2.SPEC,
    raw=RawRows(is_xla_cpu_json, xla_cpu_rows_from_json, XLA_CPU_JSON_SCHEMA),
    default_config=tuple(xla_cpu2.default_row().tolist()),
    decision_options=_xla_cpu_options,
    older=(OlderSpec(xla_cpu.SPEC, xla_cpu.WIDTH, xla_cpu2.upgrade_v1_rows),),
)

COLLECTIONS: Final[Mapping[str, CollectionSpec]] = {
    c.name: c for c in (TILE, LAYOUT, XLA_CPU)
}
# The order files are recognised in: the first whose marker key the file has.
RECOGNITION: Final = (XLA_CPU, LAYOUT, TILE)

# spec.COLLECTION_NAMES (the Literal's names) and the registry agree, in order.
if tuple(COLLECTIONS) != get_args(Collection) or sorted(
    c.name for c in RECOGNITION
) != sorted(COLLECTIONS):
    raise AssertionError("spec.Collection and the registry must name the same ones")


def get(name: str) -> CollectionSpec:
    """The declared collection ``name``; ``UnknownCollection`` names the known ones."""
    found = COLLECTIONS.get(name)
    if found is None:
        known = ", ".join(COLLECTIONS)
        raise UnknownCollection(f"unknown collection {name!r} (known: {known})")
    return found


def infer(arrays: Mapping[str, Any] | Iterable[str]) -> CollectionSpec:
    """The collection of a file from its keys (an open npz's ``files`` will do)."""
    keys = set(arrays)
    return next(c for c in RECOGNITION if c.marker is None or c.marker in keys)


def config_keys() -> tuple[str, ...]:
    """Every collection's config key, once each, in declaration order."""
    return tuple(dict.fromkeys(c.config_key for c in COLLECTIONS.values()))
