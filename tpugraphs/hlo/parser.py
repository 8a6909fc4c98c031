"""Parse XLA HLO text (``HloModule::ToString``, JAX ``compile().as_text()``).

Accepted: ``%`` sigils or none, layouts with tiling, tuple shapes with ``/*index=N*/``
comments, any attribute (metadata, backend_config, sharding ... are kept raw and
mostly ignored), ``ENTRY``/``ROOT``, scheduled modules, and the stack-frame tables
newer JAX prints after the module header. Everything else raises HloParseError with
the 1-based line number.
"""

from __future__ import annotations

import re

from xla_costmodel.tpugraphs.hlo.errors import HloParseError
from xla_costmodel.tpugraphs.hlo.ir import HloComputation, HloInstruction, HloModule
from xla_costmodel.tpugraphs.hlo.scan import (
    Statement,
    open_depth,
    split_items,
    strip_comments,
    value_end,
)
from xla_costmodel.tpugraphs.hlo.shapes import parse_shape

_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_MODULE = re.compile(r"\s*HloModule\s+%?([^\s,]+)")
_COMPUTATION = re.compile(r"\s*(ENTRY\s+)?%?([A-Za-z0-9_.\-]+)")
_INSTRUCTION = re.compile(r"\s*(ROOT\s+)?%?([A-Za-z0-9_.\-]+)\s*=\s*")
_OPCODE = re.compile(r"\s*([A-Za-z][A-Za-z0-9_\-]*)\(")
_ATTRIBUTE = re.compile(r"\s*,\s*([A-Za-z_][A-Za-z0-9_.\-]*)\s*=")
_PARAMETER_NUMBER = re.compile(r"\s*(\d{1,9})\s*")
_END = re.compile(r"\s*\Z")
# Debug-info tables (JAX >= 0.4.3x) printed between the header and the first
# computation: a title line, then numbered rows.
_SECTIONS = frozenset({"FileNames", "FunctionNames", "FileLocations", "StackFrames"})
_SECTION_ROW = re.compile(r"\s*\d+\s")


def parse_hlo(text: str) -> HloModule:
    """Parse a whole HLO module. Raises HloParseError on malformed text."""
    # Split on newlines only: str.splitlines() would also split on characters such
    # as \x85 inside metadata strings and shift every reported line number.
    return _Parser(text.replace("\r\n", "\n").split("\n")).module()


class _Parser:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.i = 0  # index of the next unread line

    def module(self) -> HloModule:
        name = self._header()
        computations = []
        while self._skip_blank():
            line = self.lines[self.i].strip()
            if line in _SECTIONS:
                self._skip_section()
            else:
                computations.append(self._computation())
        if not computations:
            raise HloParseError.expected(
                self._end_line(), "a computation", "end of text"
            )
        return HloModule(name, computations)

    def _end_line(self) -> int:
        return max(len(self.lines), 1)  # the last line; after a final "\n" it is empty

    def _skip_blank(self) -> bool:
        while self.i < len(self.lines) and not self.lines[self.i].strip():
            self.i += 1
        return self.i < len(self.lines)

    def _header(self) -> str:
        if not self._skip_blank():
            return ""
        m = _MODULE.match(self.lines[self.i])
        if m is None:
            return ""  # a bare list of computations is fine
        self._statement()  # the header's attributes are not features
        return m.group(1)

    def _skip_section(self) -> None:
        self.i += 1
        while self.i < len(self.lines) and _SECTION_ROW.match(self.lines[self.i]):
            self.i += 1

    def _computation(self) -> HloComputation:
        line_no = self.i + 1
        stmt = Statement(self.lines[self.i], line_no)
        self.i += 1
        m = _COMPUTATION.match(stmt.text)
        if m is None or not stmt.text.rstrip().endswith("{"):
            raise stmt.error(0, "a computation header '[ENTRY] %name (...) -> shape {'")
        comp = HloComputation(m.group(2), line_no, is_entry=m.group(1) is not None)
        while True:
            if not self._skip_blank():
                raise HloParseError.expected(
                    self._end_line(),
                    f"'}}' closing computation {comp.name}",
                    "end of text",
                )
            if self.lines[self.i].strip() == "}":
                self.i += 1
                break
            comp.instructions.append(_instruction(self._statement()))
        if not comp.instructions:
            raise HloParseError.expected(line_no, f"instructions in {comp.name}", "'}'")
        return comp

    def _statement(self) -> Statement:
        """The next line, joined with the following ones while brackets stay open."""
        start = self.i
        depth = open_depth(self.lines[start])
        self.i += 1
        while (
            depth > 0
            and self.i < len(self.lines)
            and self._continues(self.lines[self.i])
        ):
            depth += open_depth(self.lines[self.i])
            self.i += 1
        return Statement("\n".join(self.lines[start : self.i]), start + 1)

    @staticmethod
    def _continues(line: str) -> bool:
        # Stop at what is clearly a new statement (an instruction, a computation's
        # end or header), so one unclosed bracket is reported at its own line rather
        # than swallowing the rest of the module.
        stripped = line.strip()
        header = line[:1].strip() != "" and stripped.endswith("{")
        return not (
            stripped == "}"
            or header
            or stripped in _SECTIONS
            or _INSTRUCTION.match(line) is not None
        )


def _instruction(stmt: Statement) -> HloInstruction:
    text = stmt.text
    head = _INSTRUCTION.match(text)
    if head is None:
        raise stmt.error(0, "an instruction '[ROOT] %name = shape opcode(operands)'")
    shape, pos = parse_shape(stmt, head.end())
    op = _OPCODE.match(text, pos)
    if op is None:
        raise stmt.error(pos, "an opcode followed by '('")
    spans, close = split_items(stmt, op.end())
    if not text.startswith(")", close):
        raise stmt.error(close, "')' closing the operand list")
    opcode = op.group(1)
    inst = HloInstruction(
        head.group(2),
        opcode,
        shape,
        [],
        _attributes(stmt, close + 1),
        stmt.line,
        is_root=head.group(1) is not None,
    )
    if opcode == "parameter":
        inst.parameter_number = _parameter_number(stmt, op.end(), close)
    elif opcode != "constant":  # a constant's parentheses hold its literal
        inst.operands = _operands(stmt, spans)
    return inst


def _parameter_number(stmt: Statement, start: int, end: int) -> int:
    m = _PARAMETER_NUMBER.fullmatch(stmt.text, start, end)
    if m is None:
        raise stmt.error(start, "a parameter number")
    return int(m.group(1))


def _operands(stmt: Statement, spans: list[tuple[int, int]]) -> list[str]:
    if (
        len(spans) == 1
        and not strip_comments(stmt.text[spans[0][0] : spans[0][1]]).strip()
    ):
        return []
    names = []
    for s, e in spans:
        item = strip_comments(stmt.text[s:e]).split()
        # Older printers put the operand's shape before its name; the name is last.
        name = item[-1].removeprefix("%") if item else ""
        if _NAME.fullmatch(name) is None:
            raise stmt.error(s, "an operand name")
        names.append(name)
    return names


def _attributes(stmt: Statement, pos: int) -> dict[str, str]:
    text = stmt.text
    attrs: dict[str, str] = {}
    while _END.match(text, pos) is None:
        m = _ATTRIBUTE.match(text, pos)
        if m is None:
            raise stmt.error(pos, "', name=value' (an attribute)")
        end = value_end(stmt, m.end())
        if end < len(text) and text[end] != ",":
            raise stmt.error(end, "',' between attributes")
        attrs[m.group(1)] = text[m.end() : end].strip()
        pos = end
    return attrs
