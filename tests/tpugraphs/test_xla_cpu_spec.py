"""The xla_cpu/1 config spec: rows <-> compiler options, validation, sampling."""

from __future__ import annotations

import numpy as np
import pytest

from xla_costmodel.tpugraphs import xla_cpu


def test_width_and_columns_are_distinct_from_the_tpugraphs_collections() -> None:
    assert xla_cpu.WIDTH == len(xla_cpu.COLUMNS) == len(set(xla_cpu.COLUMNS))
    assert xla_cpu.WIDTH not in (24, 18)
    assert xla_cpu.SPEC == "xla_cpu/1"


def test_the_default_row_is_xlas_default_and_emits_no_options() -> None:
    row = xla_cpu.default_row()
    assert row.dtype == np.float32 and row.shape == (xla_cpu.WIDTH,)
    assert xla_cpu.to_options(row) == {}
    np.testing.assert_array_equal(xla_cpu.from_options({}), row)
    on = {c for c, v in zip(xla_cpu.COLUMNS, row, strict=True) if v}
    assert on == {
        "ynn_reduce",
        "ynn_individual_dot",
        "ynn_individual_convolution",
        "scheduler_default",
        "use_fusion_emitters",
    }


def test_every_sampled_row_round_trips_through_options() -> None:
    for row in xla_cpu.sample(300, seed=3):
        options = xla_cpu.to_options(row)
        np.testing.assert_array_equal(xla_cpu.from_options(options), row)


def test_options_use_full_enum_names_and_comma_lists() -> None:
    row = xla_cpu.default_row()
    row[xla_cpu.COLUMNS.index("ynn_individual_convolution")] = 0
    row[xla_cpu.COLUMNS.index("ynn_eltwise")] = 1
    row[xla_cpu.COLUMNS.index("disable_fusion")] = 1
    row[xla_cpu.COLUMNS.index("disable_cse")] = 1
    row[xla_cpu.COLUMNS.index("scheduler_default")] = 0
    row[xla_cpu.COLUMNS.index("scheduler_memory_optimized")] = 1
    row[xla_cpu.COLUMNS.index("use_fusion_emitters")] = 0
    row[xla_cpu.COLUMNS.index("copy_insertion_region_analysis")] = 1
    assert xla_cpu.to_options(row) == {
        "xla_cpu_experimental_ynn_fusion_type": (
            "LIBRARY_FUSION_TYPE_ELTWISE,LIBRARY_FUSION_TYPE_REDUCE,"
            "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"
        ),
        "xla_disable_hlo_passes": "fusion,cse",
        "xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED",
        "xla_cpu_use_fusion_emitters": False,
        "xla_cpu_copy_insertion_use_region_analysis": True,
    }


def test_no_ynn_fusion_is_the_empty_string() -> None:
    row = xla_cpu.default_row()
    row[:5] = 0
    assert xla_cpu.to_options(row) == {"xla_cpu_experimental_ynn_fusion_type": ""}
    np.testing.assert_array_equal(
        xla_cpu.from_options({"xla_cpu_experimental_ynn_fusion_type": ""}), row
    )


def test_from_options_accepts_explicit_defaults_and_string_bools() -> None:
    explicit = {
        "xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_DEFAULT",
        "xla_cpu_use_fusion_emitters": "true",
        "xla_disable_hlo_passes": "",
    }
    np.testing.assert_array_equal(xla_cpu.from_options(explicit), xla_cpu.default_row())


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"xla_cpu_enable_fast_math": True}, "xla_cpu_enable_fast_math"),
        ({"xla_disable_hlo_passes": "fusion,dot_decomposer"}, "dot_decomposer"),
        ({"xla_cpu_experimental_ynn_fusion_type": "DOT"}, "'DOT'"),
        ({"xla_cpu_scheduler_type": "MEMORY_OPTIMIZED"}, "xla_cpu_scheduler_type"),
        ({"xla_cpu_use_fusion_emitters": 1}, "xla_cpu_use_fusion_emitters"),
        ({"xla_disable_hlo_passes": 3}, "xla_disable_hlo_passes"),
    ],
)
def test_from_options_names_the_bad_key_or_value(
    options: dict[str, object], names: str
) -> None:
    with pytest.raises(ValueError, match=names):
        xla_cpu.from_options(options)  # type: ignore[arg-type]


def test_to_options_rejects_bad_rows_naming_the_columns() -> None:
    with pytest.raises(ValueError, match=r"shape \(17,\)"):
        xla_cpu.to_options(np.zeros(16, np.float32))
    row = xla_cpu.default_row()
    row[xla_cpu.COLUMNS.index("disable_cse")] = 0.5
    with pytest.raises(ValueError, match="disable_cse"):
        xla_cpu.to_options(row)
    row = xla_cpu.default_row()
    row[xla_cpu.COLUMNS.index("scheduler_memory_optimized")] = 1
    with pytest.raises(ValueError, match="scheduler_default"):
        xla_cpu.to_options(row)


def test_sample_is_distinct_default_first_and_deterministic() -> None:
    rows = xla_cpu.sample(200, seed=7)
    assert rows.shape == (200, xla_cpu.WIDTH) and rows.dtype == np.float32
    np.testing.assert_array_equal(rows[0], xla_cpu.default_row())
    assert len({r.tobytes() for r in rows}) == 200
    np.testing.assert_array_equal(rows, xla_cpu.sample(200, seed=7))
    assert not np.array_equal(rows, xla_cpu.sample(200, seed=8))
    np.testing.assert_array_equal(xla_cpu.sample(50, seed=7), rows[:50])
    np.testing.assert_array_equal(
        xla_cpu.sample(1, seed=0), xla_cpu.default_row()[None]
    )
    with pytest.raises(ValueError, match="n must be"):
        xla_cpu.sample(0, seed=0)


def test_sample_avoids_the_pair_that_crashes_xla_but_it_still_encodes() -> None:
    rows = xla_cpu.sample(2000, seed=1)
    eltwise = rows[:, xla_cpu.COLUMNS.index("ynn_eltwise")] == 1
    no_algsimp = rows[:, xla_cpu.COLUMNS.index("disable_algsimp")] == 1
    assert eltwise.any() and no_algsimp.any() and not (eltwise & no_algsimp).any()
    row = xla_cpu.default_row()
    row[
        [xla_cpu.COLUMNS.index("ynn_eltwise"), xla_cpu.COLUMNS.index("disable_algsimp")]
    ] = 1
    np.testing.assert_array_equal(xla_cpu.from_options(xla_cpu.to_options(row)), row)
