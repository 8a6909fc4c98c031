"""Where an ``xla_cpu/1`` row (17 wide, an old client's) enters the service it
becomes its ``xla_cpu/2`` row (20), checked against the artifact's config input:
rank and feedback batches (``inputs.check_configs``, no work when a batch fits) and
decision rows (``decision_rows.checked_row``). Anything else is a 4xx naming the
field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from xla_costmodel.runner import ArtifactRunner, Embedding
from xla_costmodel.service.core.decision_rows import checked_row, options_of
from xla_costmodel.service.core.errors import InvalidRequest, PayloadTooLarge
from xla_costmodel.service.core.inputs import Limits, check_configs, upgraded
from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2
from xla_costmodel.tpugraphs.arrays import make_graph
from xla_costmodel.tpugraphs.collections import TILE, XLA_CPU

V1 = xla_cpu.sample(5, seed=2)
LIMITS = Limits(
    max_nodes=100,
    max_configs=100,
    max_decoded_bytes=1 << 20,
    max_hlo_bytes=1 << 20,
    max_hlo_instructions=1000,
    max_scored_bytes=1 << 20,
)


@pytest.fixture(scope="module")
def shipped_xla_cpu(shipped: Path) -> tuple[ArtifactRunner, Embedding]:
    runner = ArtifactRunner(shipped / "xla_cpu" / "1")
    graph = make_graph(np.zeros((2, 140), np.float32), [63, 2], [[1, 0]])
    return runner, runner.encode(graph)


def check(
    scorer: tuple[ArtifactRunner, Embedding], value: Any, limits: Limits = LIMITS
) -> np.ndarray[Any, Any]:
    runner, embedding = scorer
    return check_configs(value, runner, embedding, "configs", limits)


def test_the_artifact_takes_xla_cpu2_rows(
    shipped_xla_cpu: tuple[ArtifactRunner, Embedding],
) -> None:
    runner, _ = shipped_xla_cpu
    assert runner.spec is XLA_CPU
    assert runner.manifest.config_input.shape[-1] == xla_cpu2.WIDTH


def test_a_batch_that_fits_is_passed_on_as_it_is(
    shipped_xla_cpu: tuple[ArtifactRunner, Embedding],
) -> None:
    today = xla_cpu2.sample(5, seed=2).astype(np.int8)
    assert check(shipped_xla_cpu, today) is today


@pytest.mark.parametrize(
    ("dtype", "kept"),
    [(np.int8, np.int8), (np.uint8, np.uint8), (np.int64, np.float32)],
)
def test_an_xla_cpu1_batch_becomes_its_upgrade(
    shipped_xla_cpu: tuple[ArtifactRunner, Embedding], dtype: Any, kept: Any
) -> None:
    got = check(shipped_xla_cpu, V1.astype(dtype))
    assert got.dtype == kept  # small integers stay small; exact either way
    np.testing.assert_array_equal(got, xla_cpu2.upgrade_v1_rows(V1))
    from_json = check(shipped_xla_cpu, np.asarray(V1.tolist()))
    np.testing.assert_array_equal(from_json, xla_cpu2.upgrade_v1_rows(V1))


def test_a_remembered_ranking_of_an_older_release_is_upgraded(
    shipped_xla_cpu: tuple[ArtifactRunner, Embedding],
) -> None:
    """Rankings outlive a rolling upgrade in Redis: feedback picks from them."""
    runner, _ = shipped_xla_cpu
    old = upgraded(V1.astype(np.int8), runner)
    assert old.dtype == np.int8
    np.testing.assert_array_equal(old, xla_cpu2.upgrade_v1_rows(V1))
    today = xla_cpu2.upgrade_v1_rows(V1)
    assert upgraded(today, runner) is today


@pytest.mark.parametrize("shape", [(3, 19), (3, 16), (3, 21), (3, 24), (3, 17, 1)])
def test_batches_of_no_spec_are_refused_naming_the_field(
    shipped_xla_cpu: tuple[ArtifactRunner, Embedding], shape: tuple[int, ...]
) -> None:
    with pytest.raises(InvalidRequest, match=r"\[\?,20\]") as info:
        check(shipped_xla_cpu, np.zeros(shape, np.int8))
    assert info.value.field == "configs"


def test_the_upgrade_is_bounded_like_any_batch(
    shipped_xla_cpu: tuple[ArtifactRunner, Embedding],
) -> None:
    """17 values per row fit the bound, their 20 do not."""
    rows = np.zeros((10, 17), np.int8)
    limits = Limits(**{**LIMITS.__dict__, "max_scored_bytes": 10 * 17 * 4})
    with pytest.raises(PayloadTooLarge) as info:
        check(shipped_xla_cpu, rows, limits)
    assert info.value.field == "configs"


def test_a_decision_row_of_xla_cpu1_is_its_upgrade() -> None:
    row = checked_row(XLA_CPU, V1[1].tolist(), "config", 100)
    assert row.dtype == np.int8  # compacted, as a 20-wide row of 0/1 is
    np.testing.assert_array_equal(row, xla_cpu2.upgrade_v1(V1[1]))
    today = checked_row(XLA_CPU, xla_cpu2.upgrade_v1(V1[1]).tolist(), "config", 100)
    assert today.tobytes() == row.tobytes()
    assert options_of(XLA_CPU, row, "config") == xla_cpu.to_options(V1[1])


def test_a_threshold_row_derives_the_map() -> None:
    row = xla_cpu2.sample(3, seed=0)[2]  # the default with the threshold at 1e9
    options = options_of(XLA_CPU, checked_row(XLA_CPU, row.tolist(), "c", 1), "c")
    assert options == {
        xla_cpu2.EXTRA_KEY: f"{xla_cpu2.THRESHOLD_KEY}=1000000000",
    }


def two_levels() -> list[float]:
    row = xla_cpu2.default_row()
    row[-1] = 1.0
    return list(row.tolist())


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ([1.0] * 19, r"\[20\] \(or \[17\], xla_cpu/1\)"),
        ([[1.0] * 17], "one row"),
        ([1.0] * 17, "exactly one of scheduler"),
        (two_levels(), "exactly one of small_while_loop"),
        ([2.0] * 17, "0 or 1"),
    ],
)
def test_bad_decision_rows_are_refused_naming_the_field(
    value: list[Any], problem: str
) -> None:
    with pytest.raises(InvalidRequest, match=problem) as info:
        options_of(XLA_CPU, checked_row(XLA_CPU, value, "refuted.config", 1), "r.c")
    assert info.value.field in ("refuted.config", "r.c")


def test_a_collection_without_an_older_spec_takes_no_other_width() -> None:
    with pytest.raises(InvalidRequest, match=r"\[24\], got \[17\]"):
        checked_row(TILE, [1.0] * 17, "config", 1)
