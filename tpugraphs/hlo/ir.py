"""The parsed form of an HLO module: computations of instructions, names unresolved.

Only what the TpuGraphs features need is kept; attribute values stay raw text and are
interpreted on demand by ``xla_costmodel.tpugraphs.hlo.attributes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xla_costmodel.tpugraphs.hlo.shapes import Shape


@dataclass(slots=True)
class HloInstruction:
    name: str
    opcode: str
    shape: Shape
    operands: list[str]  # operand names in order; may repeat
    attrs: dict[str, str]  # attribute name -> raw value text
    line: int  # 1-based line of the instruction in the text
    is_root: bool = False  # printed with ROOT
    parameter_number: int = 0


@dataclass(slots=True)
class HloComputation:
    name: str
    line: int
    is_entry: bool = False
    instructions: list[HloInstruction] = field(default_factory=list)


@dataclass(slots=True)
class HloModule:
    name: str
    computations: list[HloComputation]
