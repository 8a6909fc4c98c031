"""Read TpuGraphs npz files, one at a time, from files or directory trees."""

from __future__ import annotations

import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from xla_costmodel.tpugraphs.arrays import Sample, sample_from_arrays
from xla_costmodel.tpugraphs.collections import infer
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.graph_id import graph_id
from xla_costmodel.tpugraphs.spec import Collection


def load_npz(path: str | Path, collection: Collection | None = None) -> Sample:
    """Load and validate one file; its collection (``collections.infer``: from its
    keys) must be ``collection`` when one is given."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise GraphFormatError("file", f"cannot read npz ({exc})", str(path)) from None
    inferred = infer(arrays).name
    if collection is not None and collection != inferred:
        raise GraphFormatError(
            "collection",
            f"expected a {collection} file, found {inferred} keys",
            str(path),
        )
    return sample_from_arrays(arrays, str(path), inferred)


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given, directories walked recursively for ``*.npz`` (sorted, stable)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(p.rglob("*.npz")))
        elif p.is_file():
            out.append(p)
        else:
            raise GraphFormatError("path", "no such file or directory", str(p))
    return out


def iter_samples(
    paths: Iterable[str | Path],
    collection: Collection | None = None,
    labelled_only: bool = False,
) -> Iterator[Sample]:
    """Stream samples one file at a time, so a dataset tree never sits in memory whole.

    With a collection given, files of the other collection are skipped (a tree such as
    ``npz/`` holds both); with ``labelled_only``, test files (all-zero runtimes) are too.
    """
    for path in expand_paths(paths):
        if collection is not None and file_collection(path) != collection:
            continue
        sample = load_npz(path, collection)
        if labelled_only and not sample.labelled:
            continue
        yield sample


def file_collection(path: str | Path) -> Collection:
    """The file's collection by its keys (``collections.infer``; reads only the npz
    directory, not the arrays); an unreadable file is a ``GraphFormatError``."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return infer(data.files).name
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise GraphFormatError("file", f"cannot read npz ({exc})", str(path)) from None


def file_graph(path: str | Path) -> tuple[str, bool]:
    """(graph id, labelled) of one file, reading only the graph arrays and the runtimes
    (not the configs, most of a layout file). Copies of one program (a layout graph
    under ``default/`` and ``random/``, a converted file) share the id."""
    try:
        with np.load(path, allow_pickle=False) as data:
            ids = data["node_config_ids"] if "node_config_ids" in data.files else None
            gid = graph_id(
                data["node_feat"], data["node_opcode"], data["edge_index"], ids
            )
            return gid, bool(np.any(data["config_runtime"] > 0))
    except KeyError as exc:
        raise GraphFormatError("file", f"missing array {exc}", str(path)) from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise GraphFormatError("file", f"cannot read npz ({exc})", str(path)) from None
