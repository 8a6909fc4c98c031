"""Typed readings of the instruction attributes that feed the 140 node features.

Each reader returns None (or an empty value) when the attribute is absent and raises
HloParseError at the instruction's line when it is present but malformed. Defaults
follow what XLA omits when printing (stride 1, no padding, no dilation, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from xla_costmodel.tpugraphs.hlo.errors import HloParseError
from xla_costmodel.tpugraphs.hlo.ir import HloInstruction

# Numbers are capped at 18 digits so int() stays exact and cheap on hostile input.
_INT = r"-?\d{1,18}"
_INT_RE = re.compile(_INT)
_INT_LIST = re.compile(rf"\{{\s*(?:{_INT}\s*(?:,\s*{_INT}\s*)*)?\}}")
_NAME = re.compile(r"%?([A-Za-z0-9_.\-]+)")
_WINDOW_FIELD = re.compile(
    r"(size|stride|pad|lhs_dilate|rhs_dilate|rhs_reversal)=(\S+)"
)
_DIM_LABELS = re.compile(r"([A-Za-z0-9]+)_([A-Za-z0-9]+)->([A-Za-z0-9]+)")
_SLICE_DIM = re.compile(rf"\s*\[\s*({_INT})\s*:\s*({_INT})\s*(?::\s*({_INT})\s*)?\]\s*")

# Attributes naming the computations an instruction calls (edges to their roots).
CALLED_KEYS = (
    "calls",
    "to_apply",
    "body",
    "condition",
    "select",
    "scatter",
    "true_computation",
    "false_computation",
    "branch_computations",
    "called_computations",
)


@dataclass(frozen=True, slots=True)
class Window:
    size: tuple[int, ...]
    stride: tuple[int, ...]
    pad_low: tuple[int, ...]
    pad_high: tuple[int, ...]
    window_dilation: tuple[int, ...]  # rhs_dilate
    base_dilation: tuple[int, ...]  # lhs_dilate
    reversal: tuple[bool, ...]


@dataclass(frozen=True, slots=True)
class ConvDims:
    """ConvolutionDimensionNumbers as far as the features use them."""

    input_batch: int
    input_feature: int
    input_spatial: tuple[int, ...]
    kernel_input_feature: int
    kernel_output_feature: int
    kernel_spatial: tuple[int, ...]
    output_batch: int
    output_feature: int


def _bad(inst: HloInstruction, what: str, raw: str) -> HloParseError:
    got = repr(raw if len(raw) <= 30 else raw[:27] + "...")
    return HloParseError.expected(inst.line, what, got)


def int_value(inst: HloInstruction, key: str) -> int | None:
    raw = inst.attrs.get(key)
    if raw is None:
        return None
    if _INT_RE.fullmatch(raw) is None:
        raise _bad(inst, f"{key}=<integer>", raw)
    return int(raw)


def int_list(inst: HloInstruction, key: str) -> tuple[int, ...] | None:
    raw = inst.attrs.get(key)
    if raw is None:
        return None
    if _INT_LIST.fullmatch(raw) is None:
        raise _bad(inst, f"{key}={{integers}}", raw)
    inner = raw[1:-1]
    return tuple(int(x) for x in inner.split(",")) if inner.strip() else ()


def dimensions(inst: HloInstruction) -> tuple[int, ...]:
    """The proto's ``dimensions`` field; iota stores its one dimension there too."""
    if inst.opcode == "iota":
        dim = int_value(inst, "iota_dimension")
        return () if dim is None else (dim,)
    return int_list(inst, "dimensions") or ()


def name_list(inst: HloInstruction, key: str) -> list[str]:
    """``key=%a`` or ``key={%a, %b}`` as plain names; [] when absent."""
    raw = inst.attrs.get(key)
    if raw is None:
        return []
    inner = raw[1:-1] if raw.startswith("{") and raw.endswith("}") else raw
    names = []
    for item in inner.split(","):
        m = _NAME.fullmatch(item.strip())
        if m is None:
            if item.strip() or inner.strip():
                raise _bad(inst, f"{key}=%name or {key}={{%name, ...}}", raw)
            continue
        names.append(m.group(1))
    return names


def called_computations(inst: HloInstruction) -> list[str]:
    return [name for key in CALLED_KEYS for name in name_list(inst, key)]


def window(inst: HloInstruction) -> Window | None:
    raw = inst.attrs.get("window")
    if raw is None:
        return None
    if not (raw.startswith("{") and raw.endswith("}")):
        raise _bad(inst, "window={...}", raw)
    fields: dict[str, list[str]] = {}
    for item in raw[1:-1].split():
        m = _WINDOW_FIELD.fullmatch(item)
        if m is None:
            raise _bad(
                inst,
                "a window field (size, stride, pad, lhs/rhs_dilate, rhs_reversal)",
                item,
            )
        fields[m.group(1)] = m.group(2).split("x")
    size = _window_ints(inst, fields, "size", None)
    n = len(size)
    pads = [_pair(inst, p) for p in fields.get("pad", ["0_0"] * n)]
    if len(pads) != n:
        raise _bad(inst, f"{n} window pads", raw)
    return Window(
        size=size,
        stride=_window_ints(inst, fields, "stride", n),
        pad_low=tuple(p[0] for p in pads),
        pad_high=tuple(p[1] for p in pads),
        window_dilation=_window_ints(inst, fields, "rhs_dilate", n),
        base_dilation=_window_ints(inst, fields, "lhs_dilate", n),
        reversal=tuple(
            r != 0 for r in _window_ints(inst, fields, "rhs_reversal", n, 0)
        ),
    )


def _window_ints(
    inst: HloInstruction,
    fields: dict[str, list[str]],
    key: str,
    n: int | None,
    default: int = 1,
) -> tuple[int, ...]:
    if key not in fields:
        return () if n is None else (default,) * n
    values = fields[key]
    if any(_INT_RE.fullmatch(v) is None for v in values) or n not in (
        None,
        len(values),
    ):
        raise _bad(inst, f"{n} window {key} values such as 1x2", "x".join(values))
    return tuple(int(v) for v in values)


def _pair(inst: HloInstruction, text: str) -> tuple[int, int]:
    parts = text.split("_")
    if len(parts) != 2 or any(_INT_RE.fullmatch(p) is None for p in parts):
        raise _bad(inst, "a padding pair low_high", text)
    return int(parts[0]), int(parts[1])


def conv_dims(inst: HloInstruction) -> ConvDims | None:
    raw = inst.attrs.get("dim_labels")
    if raw is None:
        return None
    m = _DIM_LABELS.fullmatch(raw)
    if m is None:
        raise _bad(inst, "dim_labels=<lhs>_<rhs>-><out>", raw)
    lhs = _labels(inst, m.group(1), "bf", raw)
    rhs = _labels(inst, m.group(2), "io", raw)
    out = _labels(inst, m.group(3), "bf", raw)
    if not len(lhs[2]) == len(rhs[2]) == len(out[2]):
        raise _bad(inst, "dim_labels with the same spatial dims on each side", raw)
    return ConvDims(lhs[0], lhs[1], lhs[2], rhs[0], rhs[1], rhs[2], out[0], out[1])


def _labels(
    inst: HloInstruction, labels: str, letters: str, raw: str
) -> tuple[int, int, tuple[int, ...]]:
    """Positions of the two letters and of spatial dims 0, 1, ... in one side."""
    digits = sorted((c, p) for p, c in enumerate(labels) if c.isdigit())
    expected = sorted(letters + "".join(str(k) for k in range(len(digits))))
    if sorted(labels) != expected:
        raise _bad(
            inst, f"dim_labels where each side has '{letters}' and spatial 0..k-1", raw
        )
    return (
        labels.index(letters[0]),
        labels.index(letters[1]),
        tuple(p for _, p in digits),
    )


def slices(inst: HloInstruction) -> tuple[list[int], list[int], list[int]] | None:
    """(starts, limits, strides) of ``slice={[a:b], [a:b:s]}``; the stride defaults to 1."""
    raw = inst.attrs.get("slice")
    if raw is None:
        return None
    if not (raw.startswith("{") and raw.endswith("}")):
        raise _bad(inst, "slice={[start:limit:stride], ...}", raw)
    starts, limits, strides = [], [], []
    inner = raw[1:-1]
    for item in inner.split(",") if inner.strip() else []:
        m = _SLICE_DIM.fullmatch(item)
        if m is None:
            raise _bad(
                inst, "a slice dimension [start:limit] or [start:limit:stride]", item
            )
        starts.append(int(m.group(1)))
        limits.append(int(m.group(2)))
        strides.append(int(m.group(3) or 1))
    return starts, limits, strides


def padding(inst: HloInstruction) -> tuple[list[int], list[int]] | None:
    """(edge_padding_low, edge_padding_high) of a pad's ``padding=lo_hi[_interior]x...``."""
    raw = inst.attrs.get("padding")
    if raw is None:
        return None
    lows, highs = [], []
    for item in raw.split("x") if raw else []:
        parts = item.split("_")
        if len(parts) not in (2, 3) or any(_INT_RE.fullmatch(p) is None for p in parts):
            raise _bad(inst, "padding=low_high[_interior]x...", raw)
        lows.append(int(parts[0]))
        highs.append(int(parts[1]))
    return lows, highs
