"""``costmodel featurize FILE.hlo.txt --out FILE.npz``: the file-level entry point.

Only the command line imports this module (it needs typer); library users call
``xla_costmodel.tpugraphs.hlo.featurize_hlo``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import typer

from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.hlo.featurize import featurize_hlo


def featurize_file(
    hlo_path: Path, out: Path, configurable: list[str] | None
) -> dict[str, Any]:
    """Featurize an HLO text file into a TpuGraphs npz and summarise it.

    ``configurable`` names the layout-configurable instructions; None applies the
    default rule (every convolution, dot and reshape). The npz holds the graph keys
    of a real layout file (``node_splits`` as [1,S], like the dataset) but no configs
    or runtimes. Raises HloParseError / GraphFormatError on bad input and OSError on
    unreadable paths.
    """
    started = time.perf_counter()
    # XLA text is ASCII outside strings; replacing undecodable bytes keeps a stray
    # byte in metadata from failing the whole file.
    text = Path(hlo_path).read_bytes().decode("utf-8", errors="replace")
    graph = featurize_hlo(text, "default" if configurable is None else configurable)
    config_ids = graph.node_config_ids
    assert config_ids is not None  # a configurable rule was given
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as f:  # a file object keeps numpy from appending ".npz"
        np.savez_compressed(
            f,
            node_feat=graph.node_feat,
            node_opcode=graph.node_opcode,
            edge_index=graph.edge_index,
            node_splits=graph.node_splits.reshape(1, -1),
            node_config_ids=config_ids,
        )
    return {
        "hlo": str(hlo_path),
        "out": str(out),
        "nodes": graph.num_nodes,
        "edges": int(graph.edge_index.shape[0]),
        "configurable": int(config_ids.shape[0]),
        "splits": graph.node_splits.tolist(),
        "seconds": round(time.perf_counter() - started, 4),
    }


def featurize(
    hlo: Path = typer.Argument(..., help="HLO text file (XLA's printed form)."),
    out: Path = typer.Option(..., "--out", help="Where to write the TpuGraphs npz."),
    configurable: list[str] | None = typer.Option(
        None,
        "--configurable",
        help="Name a layout-configurable instruction (repeatable); default: every "
        "convolution, dot and reshape.",
    ),
) -> None:
    """Featurize HLO text into a TpuGraphs npz (node_feat, node_opcode, edge_index, ...)."""
    try:
        summary = featurize_file(hlo, out, configurable or None)
    except (GraphFormatError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(summary))
