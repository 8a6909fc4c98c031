"""The 140 TpuGraphs node features of one HLO instruction (FORMAT.md's table).

Integers are copied as floats, categories are one-hot, and lists keep their first k
entries followed (where the table says so) by their sum and product. The product of
an empty list is 1, so every op without a window or slice has 1 in those slots.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xla_costmodel.tpugraphs.hlo import attributes as attr
from xla_costmodel.tpugraphs.hlo.ir import HloInstruction
from xla_costmodel.tpugraphs.spec import NODE_FEAT_DIM

ELEMENT_TYPES = (
    "invalid",
    "pred",
    "s8",
    "s16",
    "s32",
    "s64",
    "u8",
    "u16",
    "u32",
    "u64",
    "f16",
    "f32",
    "f64",
    "bf16",
    "c64",
    "c128",
    "tuple",
    "opaque",
    "token",
)
_TYPE_COLUMN = {name: 2 + i for i, name in enumerate(ELEMENT_TYPES)}

# Column where each "first k, sum, product" group starts, with its k.
_DIMS, _WINDOW, _SLICE, _DYNAMIC_SLICE, _PAD = 21, 37, 109, 121, 125
_EMPTY_PRODUCT_COLUMNS = (28, 44, 52, 60, 68, 76, 84, 112, 116, 120, 124, 128, 132)
_TEMPLATE = [0.0] * NODE_FEAT_DIM
for _col in _EMPTY_PRODUCT_COLUMNS:
    _TEMPLATE[_col] = 1.0

# These opcodes' ToProto always sets the group counts, so they read 1 when unprinted;
# every other opcode leaves the proto fields at 0.
_GROUP_COUNT_OPCODES = frozenset({"convolution", "custom-call"})


def node_features(inst: HloInstruction, is_root: bool) -> list[float]:
    """One row of ``node_feat``."""
    row = _TEMPLATE.copy()
    row[0] = float(is_root)
    shape = inst.shape
    type_column = _TYPE_COLUMN.get(shape.element_type)
    if type_column is not None:
        row[type_column] = 1.0
    _first_sum_product(row, _DIMS, shape.dims, 6)
    row[29] = float(shape.tuple_size)
    row[30] = float(inst.parameter_number)
    _first(row, 31, attr.dimensions(inst), 6)
    _window_features(row, inst)
    _conv_features(row, inst)
    _slice_features(row, inst)
    if inst.opcode == "pad":
        _pad_features(row, inst)
    row[133] = float(inst.attrs.get("is_stable") == "true")
    _first(row, 134, shape.minor_to_major, 6)
    return row


def _first(row: list[float], at: int, values: Sequence[int], k: int) -> None:
    for j, value in enumerate(values[:k]):
        row[at + j] = float(value)


def _first_sum_product(
    row: list[float], at: int, values: Sequence[int], k: int
) -> None:
    _first(row, at, values, k)
    row[at + k] = float(sum(values))
    row[at + k + 1] = _to_float(math.prod(values))


def _to_float(value: int) -> float:
    # A product of hostile sizes can exceed float range; make_graph then rejects the
    # infinite feature instead of float() raising OverflowError here.
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _window_features(row: list[float], inst: HloInstruction) -> None:
    window = attr.window(inst)
    if window is None:
        return
    groups = (
        window.size,
        window.stride,
        window.pad_low,
        window.pad_high,
        window.window_dilation,
        window.base_dilation,
    )
    for g, values in enumerate(groups):
        _first_sum_product(row, _WINDOW + 8 * g, values, 6)
    _first(row, 85, [int(r) for r in window.reversal], 6)
    row[91] = float(sum(window.reversal))
    row[92] = float(len(window.reversal) - sum(window.reversal))


def _conv_features(row: list[float], inst: HloInstruction) -> None:
    dims = attr.conv_dims(inst)
    if dims is not None:
        row[93], row[94] = float(dims.input_batch), float(dims.input_feature)
        _first(row, 95, dims.input_spatial, 4)
        row[99] = float(dims.kernel_input_feature)
        row[100] = float(dims.kernel_output_feature)
        _first(row, 101, dims.kernel_spatial, 4)
        row[105], row[106] = float(dims.output_batch), float(dims.output_feature)
    default = 1 if inst.opcode in _GROUP_COUNT_OPCODES else 0
    feature_groups = attr.int_value(inst, "feature_group_count")
    batch_groups = attr.int_value(inst, "batch_group_count")
    row[107] = float(default if feature_groups is None else feature_groups)
    row[108] = float(default if batch_groups is None else batch_groups)


def _slice_features(row: list[float], inst: HloInstruction) -> None:
    slices = attr.slices(inst)
    if slices is not None:
        starts, limits, strides = slices
        _first_sum_product(row, _SLICE, starts, 2)
        _first_sum_product(row, _SLICE + 4, strides, 2)
        _first_sum_product(row, _SLICE + 8, limits, 2)
    sizes = attr.int_list(inst, "dynamic_slice_sizes")
    if sizes is not None:
        _first_sum_product(row, _DYNAMIC_SLICE, sizes, 2)


def _pad_features(row: list[float], inst: HloInstruction) -> None:
    pads = attr.padding(inst)
    if pads is not None:
        _first_sum_product(row, _PAD, pads[0], 2)
        _first_sum_product(row, _PAD + 4, pads[1], 2)
