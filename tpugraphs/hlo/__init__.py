"""HLO text -> TpuGraphs arrays, without XLA.

featurize_hlo(text, configurable="default") -> HloGraph
parse_hlo(text) -> HloModule
HloParseError(GraphFormatError)  malformed text, with ``line``
"""

from __future__ import annotations

from xla_costmodel.tpugraphs.hlo.errors import HloParseError
from xla_costmodel.tpugraphs.hlo.featurize import HloGraph, featurize_hlo, opcode_id
from xla_costmodel.tpugraphs.hlo.parser import parse_hlo

__all__ = ["HloGraph", "HloParseError", "featurize_hlo", "opcode_id", "parse_hlo"]
