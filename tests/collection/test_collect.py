"""``costmodel collect`` end to end on tiny programs: real XLA:CPU compiles, the files
it writes, resume, recorded compile failures. No timing assertions.

jax is required (``make test`` installs the ``xla`` extra): without it these tests
fail with a message saying so, never skip.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from xla_costmodel import cli, extras
from xla_costmodel.clients.xla.measure import TimingProtocol
from xla_costmodel.collection.zoo import PROGRAMS, Program, families, select
from xla_costmodel.tpugraphs import xla_cpu2
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions

# These tests check the files, not the noise: on a loaded 2-core machine a control of a
# microsecond program can take 10x the other (one preemption in a one-run round), and
# the program was then dropped (seen in make test beside a simulation).
QUICK = TimingProtocol(
    runs=1, min_rounds=2, max_rounds=2, budget_s=1.0, attempts=1, noise_threshold=1e6
)
KEYS = {
    "node_feat",
    "node_opcode",
    "edge_index",
    "node_splits",
    "config_feat",
    "config_runtime",
    "config_runtime_normalizers",
    "config_spec",
}


@pytest.fixture(scope="module")
def jax_installed() -> None:
    if importlib.util.find_spec("jax") is None:
        pytest.fail(
            "jax is not installed: pip install 'xla-costmodel[xla]' (make test does)"
        )


def _tiny() -> tuple[Any, tuple[Any, ...]]:
    import jax
    import jax.numpy as jnp

    def fn(w: Any, x: Any) -> Any:
        return jnp.sum(jax.nn.relu(x @ w) ** 2, axis=-1)

    return fn, (jnp.ones((64, 64), jnp.float32), jnp.ones((32, 64), jnp.float32))


TINY = Program("tiny_mlp", "test", _tiny, "one 32x64 @ 64x64 matmul + relu + reduce")


def _run(out: Path, hook: Any = None) -> list[dict[str, Any]]:
    from xla_costmodel.collection.worker import run_collection

    return run_collection(
        [TINY],
        out,
        configs=3,
        seed=0,
        protocol=QUICK,
        time_budget=60.0,
        options_hook=hook,
        progress=False,
    )


def _break_row_2(index: int, options: CompilerOptions) -> CompilerOptions:
    if index != 2:
        return options
    bad = {**options.compiler_options, "xla_cpu_scheduler_type": "NO_SUCH_SCHEDULER"}
    return dataclasses.replace(options, compiler_options=bad)


@pytest.mark.usefixtures("jax_installed")
def test_collect_writes_tpugraphs_files_and_records_failures(tmp_path: Path) -> None:
    sides = _run(tmp_path, _break_row_2)
    assert [s["status"] for s in sides] == ["ok"]
    with np.load(tmp_path / "tiny_mlp.npz", allow_pickle=False) as z:
        data = {k: z[k] for k in z.files}
    assert set(data) == KEYS
    assert data["config_spec"].shape == () and str(data["config_spec"]) == "xla_cpu/2"
    n = len(data["node_opcode"])
    assert data["node_feat"].shape == (n, 140) and data["node_feat"].dtype == np.float32
    assert data["node_opcode"].dtype == np.uint8
    assert data["edge_index"].dtype == np.int64 and data["edge_index"].shape[1] == 2
    assert data["node_splits"][-1] == n
    # Row 2 failed to compile: two of three sampled rows remain, row 0 the default.
    rows = xla_cpu2.sample(3, 0)
    np.testing.assert_array_equal(data["config_feat"], rows[[0, 1]])
    assert data["config_feat"].shape == (2, 20)
    assert data["config_feat"].dtype == np.float32
    runtimes, norms = data["config_runtime"], data["config_runtime_normalizers"]
    assert runtimes.dtype == norms.dtype == np.int64 and (runtimes > 0).all()
    np.testing.assert_array_equal(norms, np.full(2, runtimes[0]))

    side = json.loads((tmp_path / "tiny_mlp.json").read_text())
    assert side["spec"] == "xla_cpu/2" and side["columns"] == list(xla_cpu2.COLUMNS)
    assert side["skipped_columns"] == {} and side["skipped_rows"] == []
    assert side["rows"] == [0, 1] and side["options"][0] == {}
    assert side["options"][1] == xla_cpu2.to_options(rows[1]).flat()
    (failure,) = side["compile_failures"]
    assert failure["row"] == 2 and failure["error"]
    assert failure["options"]["xla_cpu_scheduler_type"] == "NO_SUCH_SCHEDULER"
    assert "xla_backend_extra_options" in failure["options"]  # row 2: 1e9
    assert len(side["default_copies_ns"]) == 3  # row 0 + two controls
    assert side["controls_distinct_executables"] is True
    assert side["controls_same_optimized_hlo"] is True
    assert side["max_rel_diff"][0] == 0.0 and side["max_rel_diff"][2] is None
    assert side["config_runtime_ns"] == runtimes.tolist()
    for key in (
        "family",
        "noise",
        "rounds",
        "versions",
        "machine",
        "phase_s",
        "date",
        "load_average_start",
        "optimized_hlo_sha1",
        "attempts",
    ):
        assert key in side, key
    assert side["versions"]["jax"] != "not installed"
    assert side["machine"]["cpu_model"] and side["machine"]["cores"] >= 1
    assert (tmp_path / "tiny_mlp.hlo.txt").read_text().startswith("HloModule")

    before = (tmp_path / "tiny_mlp.json").stat().st_mtime_ns
    assert _run(tmp_path) == []  # resumed: the finished program is skipped
    assert (tmp_path / "tiny_mlp.json").stat().st_mtime_ns == before


@pytest.mark.usefixtures("jax_installed")
def test_a_program_whose_default_fails_is_dropped_and_recorded(tmp_path: Path) -> None:
    def break_default(index: int, options: CompilerOptions) -> CompilerOptions:
        return _break_row_2(2, options) if index == 0 else options

    (side,) = _run(tmp_path, break_default)
    assert side["status"] == "dropped" and "default" in side["reason"]
    assert not (tmp_path / "tiny_mlp.npz").exists()
    assert json.loads((tmp_path / "tiny_mlp.json").read_text())["status"] == "dropped"


@pytest.mark.usefixtures("jax_installed")
def test_the_command_collects_a_zoo_program(tmp_path: Path) -> None:
    args = [
        "collect",
        "--programs",
        "mlp_train_3x1024_b64",
        "--configs",
        "2",
        "--max-rounds",
        "3",
        "--runs",
        "1",
        "--noise-threshold",
        "0.5",
        "--no-pin",
        "--out",
        str(tmp_path),
    ]
    result = CliRunner().invoke(cli.build_app(), args)
    assert result.exit_code == 0, result.output
    side = json.loads((tmp_path / "mlp_train_3x1024_b64.json").read_text())
    assert side["family"] == "mlp" and side["pinned_cpus"] == side["compile_cpus"]
    assert side["spec"] == "xla_cpu/2"  # the default --spec, through the supervisor
    assert side["protocol"]["noise_threshold"] == 0.5 and side["protocol"]["runs"] == 1
    assert "mlp_train_3x1024_b64" in (tmp_path / "progress.log").read_text()


def test_without_the_extra_the_command_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(extras.EXTRAS, "xla", ("no_such_module_for_this_test",))
    result = CliRunner().invoke(cli.build_app(), ["collect", "--out", "x"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "costmodel collect needs the xla extra: pip install 'xla-costmodel[xla]'"
    ]


def test_the_zoo_is_large_varied_and_importing_it_loads_no_jax() -> None:
    assert len(PROGRAMS) >= 40 and len({p.name for p in PROGRAMS}) == len(PROGRAMS)
    sizes = [len(names) for names in families().values()]
    assert 12 <= len(sizes) <= 16 and min(sizes) >= 3
    assert select(["rnn"]) == [p for p in PROGRAMS if p.family == "rnn"]
    with pytest.raises(ValueError, match="no_such"):
        select(["no_such"])
    code = (
        "import sys, xla_costmodel.clients, xla_costmodel.collection.zoo, "
        "xla_costmodel.collection.collect, xla_costmodel.tpugraphs.xla_cpu; "
        "print(sorted(m for m in ('jax', 'keras', 'jaxlib') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.usefixtures("jax_installed")
def test_the_datasheet_is_computed_from_the_sidecars_and_compares_other_cpus(
    tmp_path: Path,
) -> None:
    from xla_costmodel.collection import cross_cpu, datasheet

    here = tmp_path / "cpu-here"  # one folder per target, as datasets/xla_cpu/
    (side,) = _run(here)
    assert side["status"] == "ok" and side["configs_measured"] == 3
    # The same program "measured on another CPU", where the configs rank the other way.
    t = side["config_runtime_ns"]
    other = tmp_path / "cpu-test-9.9-avx2"  # another target: a sibling folder
    other.mkdir(parents=True)
    there = {
        **side,
        "machine": {**side["machine"], "cpu_family": "9", "cpu_model_id": "9"},
        "config_runtime_ns": [max(t) + min(t) - x for x in t],
    }
    (other / "tiny_mlp.json").write_text(json.dumps(there))

    cmp = cross_cpu.compare(side, there)
    assert cmp is not None and cmp["shared"] == 3
    if len(set(t)) == 3:  # no ties: the ranks reverse exactly
        assert cmp["spearman"] == pytest.approx(-1.0)
    # the other CPU's winner is this CPU's slowest config
    assert cmp["there_best_here"] == pytest.approx(max(t) / min(t))

    datasheet.main([str(here)])
    text = (here / "DATASHEET.md").read_text()
    assert "1 real JAX / keras programs in 1 architecture families" in text
    assert "| tiny_mlp | test | xla_cpu/2 (20) |" in text
    assert "`xla_cpu/2` [C,20]: 1 programs" in text
    assert f"{side['default_ms']:.2f}" in text
    assert "- `cpu-test-9.9-avx2`: " in text and "family 9 model 9" in text
    assert "| tiny_mlp | cpu-test-9.9-avx2 | 3 |" in text
    assert "| xla_cpu/2 / xla_cpu/2 |" in text
