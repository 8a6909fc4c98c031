"""HLO shapes as printed in text: ``bf16[2,<=8]{1,0:T(8,128)}`` and nested tuples."""

from __future__ import annotations

import re
from dataclasses import dataclass

from xla_costmodel.tpugraphs.hlo.scan import Statement

# Element type, dims, then an optional layout printed right after the dims.
_ARRAY = re.compile(r"([A-Za-z][A-Za-z0-9_]*)\[([^\]\n]*)\](?:\{([^}\n]*)\})?")
# Sizes are capped at 18 digits so int() stays exact and cheap on hostile input.
_DIM = re.compile(r"\s*(?:<=)?\s*(\d{1,18}|\?)\s*")
_LAYOUT = re.compile(r"\s*\d{1,18}\s*(?:,\s*\d{1,18}\s*)*")
_SPACE = re.compile(r"(?:\s|/\*.*?\*/)*")
# Deep enough for any real program; the limit turns hostile input into an error
# instead of a RecursionError.
MAX_TUPLE_DEPTH = 64


@dataclass(frozen=True, slots=True)
class Shape:
    """An array or tuple shape. ``element_type`` is "tuple" for tuples and is kept
    verbatim when unknown (the featurizer gives those an all-zero one-hot)."""

    element_type: str
    dims: tuple[int, ...] = ()
    minor_to_major: tuple[int, ...] = ()
    tuple_size: int = 0

    @property
    def rank(self) -> int:
        return len(self.dims)


def parse_shape(stmt: Statement, pos: int, depth: int = 0) -> tuple[Shape, int]:
    """Parse the shape at ``pos``; return it and the index just past it."""
    text = stmt.text
    if text.startswith("(", pos):
        return _parse_tuple(stmt, pos + 1, depth)
    m = _ARRAY.match(text, pos)
    if m is None:
        raise stmt.error(pos, "a shape such as f32[2,3]{1,0}")
    dims = _parse_dims(stmt, m.start(2), m.group(2))
    layout = m.group(3)
    minor_to_major = () if layout is None else _parse_layout(stmt, m.start(3), layout)
    return Shape(m.group(1), dims, minor_to_major), m.end()


def _parse_tuple(stmt: Statement, pos: int, depth: int) -> tuple[Shape, int]:
    if depth >= MAX_TUPLE_DEPTH:
        raise stmt.error(pos, f"tuples nested at most {MAX_TUPLE_DEPTH} deep")
    text = stmt.text
    count = 0
    pos = _skip_space(text, pos)
    if text.startswith(")", pos):
        return Shape("tuple"), pos + 1
    while True:
        _, pos = parse_shape(stmt, pos, depth + 1)
        count += 1
        pos = _skip_space(text, pos)
        if text.startswith(")", pos):
            return Shape("tuple", tuple_size=count), pos + 1
        if not text.startswith(",", pos):
            raise stmt.error(pos, "',' or ')' in a tuple shape")
        pos = _skip_space(text, pos + 1)


def _parse_dims(stmt: Statement, at: int, text: str) -> tuple[int, ...]:
    if not text.strip():
        return ()
    dims = []
    for piece in text.split(","):
        m = _DIM.fullmatch(piece)
        if m is None:
            raise stmt.error(at, "a dimension size (N, <=N or ?)")
        # "<=N" is a bounded dynamic dim (size N, as in the proto); "?" is unbounded
        # and has no size to record, so it is dropped.
        if m.group(1) != "?":
            dims.append(int(m.group(1)))
        at += len(piece) + 1
    return tuple(dims)


def _parse_layout(stmt: Statement, at: int, text: str) -> tuple[int, ...]:
    # Tiling and memory space follow ':' and are not features.
    minor_to_major = text.split(":", 1)[0]
    if not minor_to_major.strip():
        return ()
    if _LAYOUT.fullmatch(minor_to_major) is None:
        raise stmt.error(at, "a layout such as {1,0}")
    return tuple(int(d) for d in minor_to_major.split(","))


def _skip_space(text: str, pos: int) -> int:
    m = _SPACE.match(text, pos)
    return pos if m is None else m.end()
