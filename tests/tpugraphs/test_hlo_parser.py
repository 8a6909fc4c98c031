"""Parser and feature rules on small hand-written HLO texts."""

from __future__ import annotations

import numpy as np
import pytest

from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.hlo import HloParseError, featurize_hlo, parse_hlo
from xla_costmodel.tpugraphs.spec import OPCODE_IDS

SCHEDULED = """\
HloModule m, is_scheduled=true

ENTRY %e (a: f32[], b: f32[]) -> f32[] {
  %b = f32[] parameter(1)
  %a = f32[] parameter(0)
  %n = f32[] negate(%a)
  ROOT %s = f32[] add(%n, %b)
}
"""


def _row(text: str, name: str) -> np.ndarray:
    graph = featurize_hlo(text, configurable=None)
    row: np.ndarray = graph.node_feat[graph.node_names.index(name)]
    return row


def _one(body: str) -> str:
    """A module whose entry holds ``body`` (instruction lines)."""
    return f"HloModule t\n\nENTRY %main () -> f32[] {{\n{body}\n}}\n"


def test_scheduled_text_is_put_back_in_post_order() -> None:
    graph = featurize_hlo(SCHEDULED, configurable=None)
    assert graph.node_names == ["a", "n", "b", "s"]
    assert graph.edge_index.tolist() == [[1, 0], [3, 1], [3, 2]]
    assert graph.node_feat[3, 0] == 1.0  # is_root
    assert graph.node_feat[2, 30] == 1.0  # parameter_number of b


def test_sigils_are_optional() -> None:
    plain = SCHEDULED.replace("%", "")
    a = featurize_hlo(SCHEDULED, configurable=None)
    b = featurize_hlo(plain, configurable=None)
    assert np.array_equal(a.node_feat, b.node_feat)
    assert np.array_equal(a.edge_index, b.edge_index)


def test_attributes_with_nested_braces_and_strings_are_skipped() -> None:
    text = _one(
        "  %p = f32[8]{0} parameter(0)\n"
        '  ROOT %c = f32[8]{0} custom-call(%p), custom_call_target="x,y", '
        'backend_config="{\\"k\\": [1, {\\"y\\": \\"})\\"}]}", '
        'metadata={op_name="a(b" source_file="x}y" source_line=3}, '
        'sharding={devices=[2,1]0,1}, frontend_attributes={k="v,w"}, '
        "output_to_operand_aliasing={{}: (0, {})}"
    )
    graph = featurize_hlo(text, configurable=None)
    assert graph.edge_index.tolist() == [[1, 0]]
    row = graph.node_feat[1]
    assert graph.node_opcode[1] == OPCODE_IDS["custom-call"]
    assert (row[107], row[108]) == (1.0, 1.0)  # custom-call group counts default to 1


def test_tuple_shapes_with_index_comments() -> None:
    shape = "(f32[], f32[2]{0}, s32[], pred[], u8[], /*index=5*/bf16[3,4]{1,0})"
    text = _one(
        f"  %p = {shape} parameter(0)\n"
        "  ROOT %g = bf16[3,4]{1,0} get-tuple-element(%p), index=5"
    )
    row = _row(text, "p")
    assert row[2 + 16] == 1.0  # tuple one-hot
    assert row[29] == 6.0
    assert (row[27], row[28]) == (0.0, 1.0)  # no dims: sum 0, product 1


def test_layout_tiling_and_dynamic_dims() -> None:
    text = _one("  ROOT %p = f32[<=4,?,3]{2,1,0:T(8,128)(2,1)S(1)} parameter(0)")
    row = _row(text, "p")
    assert row[21:29].tolist() == [4, 3, 0, 0, 0, 0, 7, 12]
    assert row[134:140].tolist() == [2, 1, 0, 0, 0, 0]
    assert row[2 + 11] == 1.0  # f32


def test_convolution_window_and_dim_labels() -> None:
    text = _one(
        "  %x = f32[1,9,9,4]{3,2,1,0} parameter(0)\n"
        "  %k = f32[3,3,4,8]{3,2,1,0} parameter(1)\n"
        "  ROOT %c = f32[1,5,5,8]{3,2,1,0} convolution(%x, %k), "
        "window={size=3x3 stride=2x2 pad=1_1x0_2 rhs_dilate=1x2 rhs_reversal=0x1}, "
        "dim_labels=b01f_01io->b01f, feature_group_count=2"
    )
    row = _row(text, "c")
    assert row[37:45].tolist() == [3, 3, 0, 0, 0, 0, 6, 9]  # size
    assert row[45:53].tolist() == [2, 2, 0, 0, 0, 0, 4, 4]  # stride
    assert row[53:61].tolist() == [1, 0, 0, 0, 0, 0, 1, 0]  # pad low
    assert row[61:69].tolist() == [1, 2, 0, 0, 0, 0, 3, 2]  # pad high
    assert row[69:77].tolist() == [1, 2, 0, 0, 0, 0, 3, 2]  # window (rhs) dilation
    assert row[77:85].tolist() == [1, 1, 0, 0, 0, 0, 2, 1]  # base (lhs) dilation
    assert row[85:93].tolist() == [0, 1, 0, 0, 0, 0, 1, 1]  # reversal, #true, #false
    assert row[93:107].tolist() == [0, 3, 1, 2, 0, 0, 2, 3, 0, 1, 0, 0, 0, 3]
    assert (row[107], row[108]) == (2.0, 1.0)


def test_slice_pad_dynamic_slice_sort_and_iota() -> None:
    text = _one(
        "  %x = f32[10,20]{1,0} parameter(0)\n"
        "  %s = f32[2,5]{1,0} slice(%x), slice={[1:3], [0:20:4]}\n"
        "  %z = f32[] constant(0)\n"
        "  %p = f32[5,9]{1,0} pad(%s, %z), padding=1_2x3_1_1\n"
        "  %i = s32[] constant(0)\n"
        "  %d = f32[1,4]{1,0} dynamic-slice(%p, %i, %i), dynamic_slice_sizes={1,4}\n"
        "  %o = s32[1,4]{1,0} iota(), iota_dimension=1\n"
        "  ROOT %t = (f32[1,4]{1,0}, s32[1,4]{1,0}) sort(%d, %o), dimensions={1}, "
        "is_stable=true, to_apply=%cmp"
    )
    text = text.replace(
        "ENTRY",
        "%cmp (a: f32[], b: f32[], c: s32[], d: s32[]) -> pred[] {\n"
        "  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
        "  %c = s32[] parameter(2)\n  %d2 = s32[] parameter(3)\n"
        "  ROOT %lt = pred[] compare(%a, %b), direction=LT\n}\n\nENTRY",
    )
    graph = featurize_hlo(text, configurable=None)
    row = {name: graph.node_feat[i] for i, name in enumerate(graph.node_names)}
    assert row["s"][109:121].tolist() == [1, 0, 1, 0, 1, 4, 5, 4, 3, 20, 23, 60]
    assert row["p"][125:133].tolist() == [1, 3, 4, 3, 2, 1, 3, 2]
    assert row["d"][121:125].tolist() == [1, 4, 5, 4]
    assert row["o"][31:37].tolist() == [1, 0, 0, 0, 0, 0]
    assert row["t"][31] == 1.0 and row["t"][133] == 1.0
    # sort -> root of %cmp, which is printed (and numbered) first.
    lt = graph.node_names.index("lt")
    assert [graph.node_names.index("t"), lt] in graph.edge_index.tolist()


def test_unknown_opcode_and_element_type() -> None:
    text = _one(
        "  %x = f8e4m3fn[4]{0} parameter(0)\n"
        "  %y = f32[4]{0} frobnicate(%x)\n"
        "  ROOT %d = f32[4]{0} custom-call-done(%y)"
    )
    graph = featurize_hlo(text, configurable=None)
    assert graph.node_opcode.tolist() == [63, 0, OPCODE_IDS["async-done"]]
    assert not graph.node_feat[0, 2:21].any()
    assert graph.node_feat[1, 2 + 11] == 1.0


def test_stack_frame_tables_and_while_splits() -> None:
    text = (
        'HloModule w\n\nFileNames\n1 "a.py"\n\nStackFrames\n1 {file_location_id=1}\n\n'
        "%cond (p: s32[]) -> pred[] {\n  %p = s32[] parameter(0)\n"
        "  ROOT %c = pred[] compare(%p, %p), direction=LT\n}\n\n"
        "%body (q: s32[]) -> s32[] {\n  ROOT %q = s32[] parameter(0)\n}\n\n"
        "ENTRY %e (x: s32[]) -> s32[] {\n  %x = s32[] parameter(0)\n"
        "  ROOT %w = s32[] while(%x), condition=%cond, body=%body\n}\n"
    )
    graph = featurize_hlo(text, configurable=None)
    assert graph.node_splits.tolist() == [0, 2, 5]  # after %cond; %body has no marker
    assert graph.edge_index.tolist() == [[1, 0], [4, 1], [4, 2], [4, 3]]


def test_parse_hlo_exposes_computations() -> None:
    module = parse_hlo(SCHEDULED)
    assert module.name == "m"
    (entry,) = module.computations
    assert entry.is_entry and [i.name for i in entry.instructions] == [
        "b",
        "a",
        "n",
        "s",
    ]


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        (SCHEDULED.replace("negate(%a)", "negate(%a"), 6, "expected"),
        (SCHEDULED.replace("negate(%a)", "negate(%zz)"), 6, "'zz'"),
        (SCHEDULED.replace("f32[] add", "f32[ add"), 7, "expected"),
        (SCHEDULED.replace("f32[] add", "add"), 7, "expected a shape"),
        (
            SCHEDULED.replace("  %n = f32[] negate(%a)\n", "  %n = f32[] negate(%s)\n"),
            6,
            "cycle",
        ),
        (
            SCHEDULED.replace("%b = f32[] parameter(1)", "%a = f32[] parameter(1)"),
            5,
            "unique",
        ),
        (SCHEDULED.rstrip().removesuffix("}"), 8, "'}'"),
        (SCHEDULED.replace("add(%n, %b)", "add(%n, %b), to_apply=%nope"), 7, "'nope'"),
        (
            SCHEDULED.replace("add(%n, %b)", "add(%n, %b), window={size=3 pad=1}"),
            7,
            "pad",
        ),
        (
            SCHEDULED.replace("add(%n, %b)", 'add(%n, %b), metadata={op_name="x}'),
            7,
            "'\"'",
        ),
        (SCHEDULED.replace("(%n, %b)", "(%n, , %b)"), 7, "operand name"),
        ("HloModule empty\n", 2, "a computation"),
        ("garbage here\n", 1, "computation header"),
    ],
)
def test_malformed_text_names_the_line(text: str, line: int, fragment: str) -> None:
    with pytest.raises(HloParseError) as err:
        featurize_hlo(text)
    assert err.value.line == line
    assert str(err.value).startswith(f"line {line}: expected ")
    assert fragment in str(err.value)
    assert isinstance(err.value, GraphFormatError)


def test_parse_error_keeps_its_type_with_a_source() -> None:
    err = HloParseError.expected(3, "x", "y").with_source("f.hlo.txt")
    assert isinstance(err, HloParseError) and err.line == 3
    assert str(err) == "f.hlo.txt: line 3: expected x, got y"
