"""``costmodel collect`` and its specs: ``xla_cpu/2`` rows compiled through
``compile_with`` (the loop threshold reaches the compile), ``xla_cpu/1`` still
collectable, folders holding both (resume, datasheet, cross-CPU), and a made-up
column this jaxlib rejects, skipped and said once. Tiny programs, real XLA:CPU
compiles, no timing assertions.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
import pytest
from typer.testing import CliRunner

from xla_costmodel import cli
from xla_costmodel.clients.xla import compiler_space, probe
from xla_costmodel.clients.xla.measure import TimingProtocol
from xla_costmodel.collection import cross_cpu, datasheet, specs
from xla_costmodel.collection.worker import run_collection
from xla_costmodel.collection.zoo import Program
from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2
from xla_costmodel.tpugraphs.xla_cpu import F32
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions

QUICK = TimingProtocol(
    runs=1, min_rounds=2, max_rounds=2, budget_s=1.0, attempts=1, noise_threshold=1e6
)
MADE_UP_KEY = "xla_cpu_made_up_option_for_tests"
HOIST_64K, HOIST_1E9 = (xla_cpu2.to_options(r) for r in xla_cpu2.sample(3, 0)[1:])


def _loop() -> tuple[Any, tuple[Any, ...]]:
    def fn(x: Any) -> Any:  # 4 KB of loop state: hoisted above the 1 KB default
        return jax.lax.fori_loop(0, 16, lambda i, s: jnp.sin(s) + 0.5 * s, x)

    return fn, (jnp.ones((1024,), jnp.float32),)


def _mlp() -> tuple[Any, tuple[Any, ...]]:
    def fn(w: Any, x: Any) -> Any:
        return jnp.sum(jax.nn.relu(x @ w), axis=-1)

    return fn, (jnp.ones((32, 32), jnp.float32), jnp.ones((8, 32), jnp.float32))


LOOP = Program("tiny_loop", "test", _loop, "a fori_loop over 1024 floats")
MLP = Program("tiny_mlp", "test", _mlp, "one 8x32 @ 32x32 matmul")


def _run(out: Path, programs: list[Program], **kw: Any) -> list[dict[str, Any]]:
    return run_collection(
        programs,
        out,
        configs=kw.pop("configs", 3),
        seed=0,
        protocol=QUICK,
        time_budget=60.0,
        progress=False,
        **kw,
    )


def _side(out: Path, name: str) -> dict[str, Any]:
    side: dict[str, Any] = json.loads((out / f"{name}.json").read_text())
    return side


def test_the_threshold_rows_reach_the_compile_and_leave_the_default_alone(
    tmp_path: Path,
) -> None:
    (side,) = _run(tmp_path, [LOOP])
    assert side["status"] == "ok" and side["rows"] == [0, 1, 2]
    assert side["spec"] == "xla_cpu/2" and side["columns"] == list(xla_cpu2.COLUMNS)
    assert side["options"] == [{}, *(o.flat() for o in (HOIST_64K, HOIST_1E9))]
    sha1 = side["optimized_hlo_sha1"]
    assert sha1[2] != sha1[0]  # the 1e9 row hoisted the loop
    # the controls, compiled after the map entries, are the default's executable
    assert side["controls_same_optimized_hlo"] is True
    assert side["max_rel_diff"][2] is not None and side["max_rel_diff"][2] < 1e-4
    with np.load(tmp_path / "tiny_loop.npz", allow_pickle=False) as z:
        assert str(z["config_spec"]) == "xla_cpu/2"
        np.testing.assert_array_equal(z["config_feat"], xla_cpu2.sample(3, 0))


def test_the_default_compiled_beside_a_map_entry_is_the_default() -> None:
    """One lowering (the optimized HLO's text holds the lowering's source lines),
    compiled as the collector does: the default, alone, before and after the 1e9
    row and as a control, is one executable; the 1e9 row another."""
    fn, args = LOOP.build()
    lowered = jax.jit(fn).lower(*args)
    alone = hashlib.sha1(str(lowered.compile().as_text()).encode()).hexdigest()[:12]
    entries = [
        probe.compile_one(lowered, o)
        for o in (CompilerOptions(), HOIST_1E9, {}, probe.CONTROL_OPTIONS[0])
    ]
    default, hoisted, again, control = (e.sha1 for e in entries)
    assert default == again == control == alone != hoisted
    flat = probe.compile_one(lowered, HOIST_1E9.flat())  # the map as JSON spells it
    assert flat.sha1 == hoisted
    bad = probe.compile_one(lowered, {"xla_backend_extra_options": "no-equals-sign"})
    assert bad.executable is None and bad.error and "k=v" in bad.error


def test_xla_cpu_1_still_collects_and_a_mixed_folder_resumes_as_asked(
    tmp_path: Path,
) -> None:
    tmp_path = tmp_path / "cpu-here"  # the datasheet reads sibling folders as CPUs
    sides = _run(tmp_path, [MLP, LOOP], spec=xla_cpu.SPEC)
    assert [s["spec"] for s in sides] == ["xla_cpu/1", "xla_cpu/1"]
    assert _side(tmp_path, "tiny_mlp")["options"][1] == xla_cpu.to_options(
        xla_cpu.sample(2, 0)[1]
    )
    with np.load(tmp_path / "tiny_mlp.npz", allow_pickle=False) as z:
        assert (
            z["config_feat"].shape == (3, 17) and str(z["config_spec"]) == "xla_cpu/1"
        )
    mlp_before = (tmp_path / "tiny_mlp.json").stat().st_mtime_ns

    # Not named: another spec's files are left alone.
    assert _run(tmp_path, [MLP, LOOP], spec=xla_cpu2.SPEC) == []
    # Named: collected again in the asked spec, the others untouched.
    (side,) = _run(tmp_path, [MLP, LOOP], spec=xla_cpu2.SPEC, recollect={"tiny_loop"})
    assert side["name"] == "tiny_loop" and side["spec"] == "xla_cpu/2"
    assert _side(tmp_path, "tiny_loop")["spec"] == "xla_cpu/2"
    assert (tmp_path / "tiny_mlp.json").stat().st_mtime_ns == mlp_before
    # Named again and already in that spec: done.
    assert _run(tmp_path, [LOOP], spec=xla_cpu2.SPEC, recollect={"tiny_loop"}) == []

    text = datasheet.render(tmp_path)
    assert "| tiny_mlp | test | xla_cpu/1 (17) |" in text
    assert "| tiny_loop | test | xla_cpu/2 (20) |" in text
    assert "`xla_cpu/2` [C,20]: 1 programs; `xla_cpu/1` [C,17]: 1 programs" in text
    assert "| `small_while_loop_1e9` |" in text  # its effect, from the v2 program


def test_rows_of_either_spec_compare_by_content() -> None:
    v1 = {"spec": "xla_cpu/1", "seed": 0, "rows": [0, 2, 5]}
    rows = specs.side_rows(v1)
    assert rows.shape == (3, 20)
    np.testing.assert_array_equal(
        rows, xla_cpu2.upgrade_v1_rows(xla_cpu.sample(6, 0)[[0, 2, 5]])
    )
    v2 = {"spec": "xla_cpu/2", "seed": 0, "rows": [0, 1, 2]}
    here = {**v1, "config_runtime_ns": [10, 9, 8], "default_ms": 1e-5}
    there = {**v2, "config_runtime_ns": [10, 5, 4], "default_ms": 1e-5}
    here |= {"best_over_default": 0.8}
    there |= {"best_over_default": 0.4}
    # only the default row is shared: too few to compare, never a crash
    assert cross_cpu.compare(here, there) is None
    assert cross_cpu.compare(here, {**here}) is not None


@dataclass(frozen=True)
class MadeUp:
    """``xla_cpu/2`` plus a column that sets a made-up map key (this jaxlib's XLA
    ignores unknown keys, so ``compiler_space`` rejects it); every odd sample row
    sets it."""

    SPEC: str = "xla_cpu_made_up/1"
    COLUMNS: tuple[str, ...] = field(
        default=(*xla_cpu2.COLUMNS, "made_up_option"), compare=False
    )

    def default_row(self) -> F32:
        return np.append(xla_cpu2.default_row(), np.float32(0.0))

    def to_options(self, row: npt.ArrayLike) -> CompilerOptions:
        arr = np.asarray(row, np.float32)
        if arr.shape != (len(self.COLUMNS),) or arr[-1] not in (0.0, 1.0):
            raise ValueError(f"not a {self.SPEC} row: {arr}")
        base = xla_cpu2.to_options(arr[:-1])
        if not arr[-1]:
            return base
        extra = {**base.extra_options, MADE_UP_KEY: "1"}
        return CompilerOptions(
            compiler_options=base.compiler_options, extra_options=extra
        )

    def excluded(self, row: npt.ArrayLike) -> str | None:
        return xla_cpu2.excluded(np.asarray(row, np.float32)[:-1])

    def sample(self, n: int, seed: int) -> F32:
        bits = (np.arange(n) % 2).astype(np.float32)[:, None]
        return np.concatenate([xla_cpu2.sample(n, seed), bits], axis=1)


def test_a_made_up_column_is_skipped_and_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = MadeUp()
    monkeypatch.setitem(compiler_space.SPECS, spec.SPEC, spec)
    said: list[str] = []
    rows = specs.sampled(spec.SPEC, 6, 0, said.append)
    assert rows.index == (0, 2, 4) and rows.skipped_rows == (1, 3, 5)
    assert not rows.rows[:, -1].any()
    assert list(rows.skipped_columns) == ["made_up_option"]
    assert len(said) == 1 and "made_up_option" in said[0] and MADE_UP_KEY in said[0]

    sides = _run(tmp_path, [MLP, LOOP], spec=spec.SPEC, configs=4)
    assert [s["status"] for s in sides] == ["ok", "ok"]
    for side in sides:
        assert side["rows"] == [0, 2] and side["skipped_rows"] == [1, 3]
        assert "unknown" in side["skipped_columns"]["made_up_option"]
        assert all(MADE_UP_KEY not in json.dumps(o) for o in side["options"])
    log = (tmp_path / "progress.log").read_text()
    assert sum("made_up_option" in line for line in log.splitlines()) == 1


def test_the_command_refuses_an_unknown_spec() -> None:
    result = CliRunner().invoke(
        cli.build_app(), ["collect", "--spec", "xla_cpu/9", "--out", "unused"]
    )
    assert result.exit_code == 2
    assert "unknown spec 'xla_cpu/9'" in result.output and "xla_cpu/2" in result.output
