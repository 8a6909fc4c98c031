"""The xla_cpu/2 config spec: xla_cpu/1 plus the loop threshold, rows <-> options."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions

KEY = "xla_cpu_small_while_loop_byte_threshold"


def _level(row: np.ndarray, name: str) -> np.ndarray:
    row = row.copy()
    row[17:] = 0
    row[xla_cpu2.COLUMNS.index(f"small_while_loop_{name}")] = 1
    return row


def test_the_first_columns_are_xla_cpu_1s_then_three_threshold_levels() -> None:
    assert xla_cpu2.SPEC == "xla_cpu/2"
    assert xla_cpu2.COLUMNS[: xla_cpu.WIDTH] == xla_cpu.COLUMNS
    assert xla_cpu2.COLUMNS[xla_cpu.WIDTH :] == (
        "small_while_loop_default",
        "small_while_loop_65536",
        "small_while_loop_1e9",
    )
    assert xla_cpu2.WIDTH == len(set(xla_cpu2.COLUMNS)) == 20


def test_the_default_row_is_xlas_default_and_sets_nothing() -> None:
    row = xla_cpu2.default_row()
    assert row.dtype == np.float32 and row[-3:].tolist() == [1, 0, 0]
    options = xla_cpu2.to_options(row)
    assert options.is_default() and options == CompilerOptions()
    np.testing.assert_array_equal(xla_cpu2.from_options(CompilerOptions()), row)
    np.testing.assert_array_equal(xla_cpu2.from_options({}), row)


def test_a_v1_row_is_the_v2_row_with_the_threshold_at_its_default() -> None:
    for row1 in xla_cpu.sample(200, seed=5):
        row2 = xla_cpu2.upgrade_v1(row1)
        assert row2[-3:].tolist() == [1, 0, 0]
        options = xla_cpu2.to_options(row2)
        assert options.compiler_options == xla_cpu.to_options(row1)
        assert options.extra_options == {}
        np.testing.assert_array_equal(xla_cpu2.downgrade(row2), row1)


def test_a_non_default_threshold_has_no_v1_row() -> None:
    row = _level(xla_cpu2.default_row(), "65536")
    assert xla_cpu2.downgrade(row) is None
    with pytest.raises(ValueError, match="xla_cpu/1"):
        xla_cpu2.upgrade_v1(row)  # a v2 row is not a v1 row


@pytest.mark.parametrize(("name", "value"), [("65536", "65536"), ("1e9", "1000000000")])
def test_threshold_levels_go_to_the_extra_options_map(name: str, value: str) -> None:
    row = _level(xla_cpu2.default_row(), name)
    row[xla_cpu2.COLUMNS.index("disable_cse")] = 1
    options = xla_cpu2.to_options(row)
    assert options.compiler_options == {"xla_disable_hlo_passes": "cse"}
    assert options.extra_options == {KEY: value}
    np.testing.assert_array_equal(xla_cpu2.from_options(options), row)


def test_every_sampled_row_round_trips_and_none_is_excluded() -> None:
    rows = xla_cpu2.sample(300, seed=3)
    assert len({r.tobytes() for r in rows}) == 300
    for row in rows:
        assert xla_cpu2.excluded(row) is None
        np.testing.assert_array_equal(
            xla_cpu2.from_options(xla_cpu2.to_options(row)), row
        )


def test_sample_holds_the_threshold_alone_and_draws_it_often() -> None:
    rows = xla_cpu2.sample(400, seed=0)
    np.testing.assert_array_equal(rows, xla_cpu2.sample(400, seed=0))
    np.testing.assert_array_equal(rows[0], xla_cpu2.default_row())
    np.testing.assert_array_equal(rows[1], _level(xla_cpu2.default_row(), "65536"))
    np.testing.assert_array_equal(rows[2], _level(xla_cpu2.default_row(), "1e9"))
    share = rows[3:, -3:].mean(axis=0)
    assert 0.4 < share[0] < 0.6 and 0.17 < share[1] < 0.33 and 0.17 < share[2] < 0.33
    assert xla_cpu2.sample(2, seed=0).shape == (2, xla_cpu2.WIDTH)
    with pytest.raises(ValueError, match="n must be"):
        xla_cpu2.sample(0, seed=0)


def test_sample_shares_the_v1_draws_so_fixed_sets_compare_across_specs() -> None:
    v1 = xla_cpu.sample(58, seed=0)
    v2 = xla_cpu2.sample(60, seed=0)
    # rows 3.. are xla_cpu/1's rows 1.. (same draws), each with a threshold level
    np.testing.assert_array_equal(v2[3:, : xla_cpu.WIDTH], v1[1:])
    shared = {r.tobytes() for r in xla_cpu2.upgrade_v1_rows(v1)}
    both = [r for r in v2 if r.tobytes() in shared]
    assert len(both) == 1 + int((v2[3:, xla_cpu.WIDTH] == 1).sum()) > 20
    assert len({r.tobytes() for r in v2}) == 60


def test_excluded_names_the_crashing_pair() -> None:
    row = xla_cpu2.default_row()
    assert xla_cpu2.excluded(row) is None
    row[xla_cpu2.COLUMNS.index("ynn_eltwise")] = 1
    row[xla_cpu2.COLUMNS.index("disable_algsimp")] = 1
    assert "ynn_eltwise" in (xla_cpu2.excluded(row) or "")
    assert xla_cpu2.to_options(row).compiler_options  # still encodable


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda r: r[:-1], "shape"),
        (lambda r: np.where(np.arange(20) == 18, 1.0, r), "small_while_loop"),
        (lambda r: np.where(np.arange(20) == 17, 0.0, r), "small_while_loop"),
        (lambda r: np.where(np.arange(20) == 0, 0.5, r), "0 or 1"),
        (lambda r: np.where(np.arange(20) == 13, 1.0, r), "scheduler"),
    ],
)
def test_validate_refuses_bad_rows_naming_the_spec(
    change: Callable[[np.ndarray], np.ndarray], match: str
) -> None:
    bad = change(xla_cpu2.default_row())
    with pytest.raises(ValueError, match=match):
        xla_cpu2.to_options(bad)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (CompilerOptions(extra_options={"xla_cpu_other": "1"}), "xla_cpu_other"),
        (CompilerOptions(extra_options={KEY: "2048"}), "2048"),
        (CompilerOptions(extra_options={KEY: "many"}), "many"),
        (CompilerOptions(compiler_options={"xla_foo": True}), "xla_foo"),
    ],
)
def test_from_options_refuses_what_the_spec_cannot_hold(
    options: CompilerOptions, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        xla_cpu2.from_options(options)


def test_an_explicit_default_threshold_is_the_default_row() -> None:
    explicit = CompilerOptions(extra_options={KEY: "1024"})
    np.testing.assert_array_equal(
        xla_cpu2.from_options(explicit), xla_cpu2.default_row()
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"compiler_options": {"xla_backend_extra_options": "a=1"}},
        {"extra_options": {"a": "1,b=2"}},
        {"extra_options": {"a=b": "1"}},
        {"extra_options": {"a": 1}},
    ],
)
def test_compiler_options_keep_the_map_apart_and_well_formed(
    kwargs: dict[str, Any],
) -> None:
    with pytest.raises(ValueError):
        CompilerOptions(**kwargs)


def test_the_flat_spelling_is_one_dict_and_reads_back() -> None:
    options = CompilerOptions(
        compiler_options={"xla_disable_hlo_passes": "cse"},
        extra_options={KEY: "65536", "xla_cpu_a": "1"},
    )
    flat = options.flat()
    assert flat == {
        "xla_disable_hlo_passes": "cse",
        "xla_backend_extra_options": f"xla_cpu_a=1,{KEY}=65536",
    }
    assert CompilerOptions.from_flat(flat) == options
    assert CompilerOptions().flat() == {}
    row = _level(xla_cpu2.default_row(), "1e9")
    np.testing.assert_array_equal(
        xla_cpu2.from_options(xla_cpu2.to_options(row).flat()), row
    )
    for bad in ("a", "=1", 5):
        with pytest.raises(ValueError, match="k=v"):
            CompilerOptions.from_flat({"xla_backend_extra_options": bad})


def test_for_program_keeps_the_threshold_only_where_a_while_loop_is() -> None:
    from xla_costmodel.tpugraphs.spec import OPCODE_IDS

    rows = xla_cpu2.sample(60, seed=0)
    plain = np.array([OPCODE_IDS["add"], OPCODE_IDS["dot"]])
    looped = np.array([OPCODE_IDS["add"], OPCODE_IDS["while"]])
    assert not xla_cpu2.has_loops(plain) and xla_cpu2.has_loops(looped)
    np.testing.assert_array_equal(xla_cpu2.for_program(rows, loops=True), rows)
    kept = xla_cpu2.for_program(rows, loops=False)
    assert (kept[:, xla_cpu.WIDTH] == 1).all()  # only the default level
    assert 20 < len(kept) < 60 and (kept[0] == xla_cpu2.default_row()).all()
