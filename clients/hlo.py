"""HLO text as a graph input, featurized on the client (``xla_costmodel.tpugraphs.hlo``, numpy only).

A graph given as HLO text becomes the same arrays, and so the same graph_id, that the
service computes for the same text; ranking then takes the usual binary path. HLO
text is recognised as:

- ``Hlo(text, configurable=...)``, the explicit form;
- a ``str`` that starts with ``HloModule`` (no path does);
- a path (``str`` or ``PathLike``) ending in ``.hlo.txt`` or ``.hlo``.

``configurable`` chooses the configurable nodes, which is part of the graph:
``None`` for a model configured by one row (tile, xla_cpu), ``"default"`` (every
convolution, dot and reshape) or a list of instruction names for a layout model, and
``"auto"`` (the default) to let the model decide: ``None`` for a collection
configured by one row, ``"default"`` for a per-node one (layout); where the model is
not known (``prepare_graph(hlo, configs)``), the form of the configs decides.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from xla_costmodel.clients.errors import InvalidRequest
from xla_costmodel.clients.raw_configs import configs_per_node
from xla_costmodel.tpugraphs.collections import CollectionSpec
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.hlo import HloGraph, HloParseError, featurize_hlo

AUTO = "auto"
HLO_SUFFIXES = (".hlo.txt", ".hlo")
HloConfigurable = Literal["auto", "default"] | Sequence[str] | None


@dataclass(frozen=True)
class Hlo:
    """An HLO module as text (what XLA prints, or JAX's ``compile().as_text()``)."""

    text: str
    configurable: HloConfigurable = AUTO

    @classmethod
    def read(
        cls, path: str | os.PathLike[str], configurable: HloConfigurable = AUTO
    ) -> Hlo:
        # XLA text is ASCII outside strings; a stray byte in metadata is replaced.
        try:
            text = Path(path).read_bytes().decode("utf-8", errors="replace")
        except OSError as exc:
            raise InvalidRequest(f"cannot read {path}: {exc}", field="graph") from None
        return cls(text, configurable)


def as_hlo(value: object) -> Hlo | None:
    """``value`` as ``Hlo`` if it is HLO text or an HLO file, else None."""
    if isinstance(value, Hlo):
        return value
    if isinstance(value, str) and value.lstrip().startswith("HloModule"):
        return Hlo(value)
    if isinstance(value, str | os.PathLike) and os.fspath(value).endswith(HLO_SUFFIXES):
        return Hlo.read(value)
    return None


def resolve(hlo: Hlo, configs: Any, collection: CollectionSpec | None = None) -> Hlo:
    """``configurable="auto"`` made concrete by the model's ``collection``, else by
    the kind of ``configs``."""
    if not (isinstance(hlo.configurable, str) and hlo.configurable == AUTO):
        return hlo
    per_node = collection.per_node if collection is not None else None
    if per_node is None and configs is not None:
        per_node = configs_per_node(configs)
    if per_node is None:
        raise InvalidRequest(
            "cannot tell a tile from a layout graph without configs: give "
            "Hlo(text, configurable=None) for a tile model, or configurable='default' "
            "(or instruction names) for a layout model",
            field="configurable",
        )
    return replace(hlo, configurable="default" if per_node else None)


def featurize(hlo: Hlo) -> HloGraph:
    """The module's TpuGraphs arrays; ``InvalidRequest`` names the line or the name."""
    if isinstance(hlo.configurable, str) and hlo.configurable == AUTO:
        raise InvalidRequest(
            "configurable='auto' is resolved by rank(); say None (tile) or 'default'",
            field="configurable",
        )
    try:
        return featurize_hlo(hlo.text, hlo.configurable)
    except HloParseError as exc:
        raise InvalidRequest(f"not valid HLO text: {exc}", field="hlo") from None
    except GraphFormatError as exc:
        raise InvalidRequest(str(exc), field=exc.key) from None
