"""``compiler_space``: the columns of a spec this jaxlib accepts, probed with real
compiles; a made-up option is found unsupported, skipped and reported once."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest

from xla_costmodel.clients.xla import compiler_space
from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2
from xla_costmodel.tpugraphs.xla_cpu import F32
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions

MADE_UP_TOP = "xla_cpu_made_up_option_for_test"
MADE_UP_KEY = "xla_cpu_made_up_extra_option_for_test"


@dataclass(frozen=True)
class MadeUp:
    """``xla_cpu/2`` plus two options no jaxlib has: a top-level one and a map key."""

    SPEC: str = "xla_cpu/made-up-for-test"
    COLUMNS: tuple[str, ...] = (*xla_cpu2.COLUMNS, MADE_UP_TOP, "made_up_extra")

    def default_row(self) -> F32:
        return np.concatenate([xla_cpu2.default_row(), np.zeros(2, np.float32)])

    def to_options(self, row: npt.ArrayLike) -> CompilerOptions:
        arr = np.asarray(row, np.float32)
        if arr.shape != (len(self.COLUMNS),):
            raise ValueError(f"shape {arr.shape}")
        base = xla_cpu2.to_options(arr[:-2])
        top, extra = dict(base.compiler_options), dict(base.extra_options)
        if arr[-2]:
            top[MADE_UP_TOP] = True
        if arr[-1]:
            extra[MADE_UP_KEY] = "1"
        return CompilerOptions(compiler_options=top, extra_options=extra)


def _with(spec: MadeUp, **columns: float) -> F32:
    row = spec.default_row()
    for name, value in columns.items():
        row[spec.COLUMNS.index(name)] = value
    return row


def test_every_real_option_is_supported_by_the_installed_jaxlib() -> None:
    assert compiler_space.supported("xla_cpu/2") == frozenset(xla_cpu2.COLUMNS)
    assert compiler_space.supported("xla_cpu/1") == frozenset(xla_cpu.COLUMNS)
    assert compiler_space.supported(xla_cpu2) == frozenset(xla_cpu2.COLUMNS)


def test_made_up_options_are_unsupported_and_the_real_ones_are_not() -> None:
    spec = MadeUp()
    reasons = compiler_space.rejected(spec)
    assert compiler_space.supported(spec) == frozenset(xla_cpu2.COLUMNS)
    assert "No such compile option" in (reasons[MADE_UP_TOP] or "")
    assert "unknown (ignored)" in (reasons["made_up_extra"] or "")


def test_rows_setting_a_made_up_option_are_skipped_or_stale() -> None:
    spec = MadeUp()
    hoist = _with(spec, small_while_loop_default=0, small_while_loop_65536=1)
    rows = np.stack(
        [
            spec.default_row(),
            _with(spec, **{MADE_UP_TOP: 1}),
            hoist,
            _with(spec, made_up_extra=1, disable_cse=1),
        ]
    )
    np.testing.assert_array_equal(compiler_space.restrict(rows, spec), rows[[0, 2]])
    assert compiler_space.applicable(hoist, spec)
    reason = compiler_space.why_not(rows[1], spec) or ""
    assert reason.startswith("stale") and MADE_UP_TOP in reason
    assert "made_up_extra" in (compiler_space.why_not(rows[3], spec) or "")


def test_a_stored_decision_never_crashes_the_check() -> None:
    assert "unknown spec" in (compiler_space.why_not([1.0], "xla_cpu/9") or "")
    assert "invalid xla_cpu/2 row" in (compiler_space.why_not([1.0], "xla_cpu/2") or "")
    assert compiler_space.why_not(xla_cpu2.default_row(), "xla_cpu/2") is None
    with pytest.raises(ValueError, match="unknown spec"):
        compiler_space.supported("xla_cpu/9")


def test_the_skip_is_reported_once_per_process(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spec = MadeUp(SPEC="xla_cpu/made-up-for-the-log-test")
    with caplog.at_level(logging.WARNING, logger=compiler_space.__name__):
        for _ in range(3):
            compiler_space.supported(spec)
            compiler_space.restrict(spec.default_row()[None], spec)
            compiler_space.applicable(_with(spec, **{MADE_UP_TOP: 1}), spec)
    lines = [r.getMessage() for r in caplog.records]
    # each rejected option said once, whichever call met it first; nothing else
    assert len(lines) == 2, lines
    assert all(spec.SPEC in line for line in lines)
    assert sum(MADE_UP_TOP in line for line in lines) == 1
    assert sum("made_up_extra" in line for line in lines) == 1
    assert not any("disable_cse" in line for line in lines)


def test_judging_one_row_compiles_only_for_the_columns_it_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """jit's first lookup must not pay for probing the whole spec (~2 s)."""
    spec = MadeUp(SPEC="xla_cpu/made-up-for-the-lazy-test")
    compiles: list[object] = []
    real = compiler_space._compile_error  # counted, still real

    def counted(options: object) -> str | None:
        compiles.append(options)
        return real(options)  # type: ignore[arg-type]

    monkeypatch.setattr(compiler_space, "_compile_error", counted)
    # forget what earlier tests compiled (later callers just probe again)
    compiler_space._accepts_cached.cache_clear()
    compiler_space._known_extra_key.cache_clear()
    assert compiler_space.why_not(spec.default_row(), spec) is None
    assert compiles == []
    row = _with(spec, **{MADE_UP_TOP: 1})
    why = compiler_space.why_not(row, spec)
    assert why is not None and MADE_UP_TOP in why
    assert len(compiles) == 1  # that one column: the whole spec is ~20 compiles
    compiler_space.supported(spec)
    assert len(compiles) > 10


def test_default_controls_are_spelled_with_options_this_jaxlib_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A control copy of the default names an option at its default value; one this
    jaxlib lacks (as 0.11.1 lacks ``xla_cpu_use_fusion_emitters``) would fail the
    tuner's and the collector's default compiles, so it is skipped."""
    from xla_costmodel.clients.xla import probe

    passes = {"xla_disable_hlo_passes": ""}
    monkeypatch.setattr(probe, "CONTROL_OPTIONS", ({MADE_UP_TOP: True}, passes))
    assert probe.controls(1) == [passes]
    assert probe.controls(2) == [passes]  # fewer when fewer compile
