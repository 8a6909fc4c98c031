"""``tune`` end to end: real XLA:CPU compiles of a tiny JAX program, ranked by a live
service (a real uvicorn process serving a tiny xla_cpu model trained here), the
service unreachable, and ``costmodel tune`` on a file. No timing assertions.

jax is required (``make test`` installs the ``xla`` extra), and torch to train the
tiny model: without them these tests fail with a message saying so, never skip.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest
from typer.testing import CliRunner

from xla_costmodel import cli, extras
from xla_costmodel.clients import CostModelClient, Hlo, RetryPolicy
from xla_costmodel.clients.xla import policy
from xla_costmodel.clients.xla.measure import TimingProtocol
from xla_costmodel.clients.xla.tune import TuneConfig, TuneReport, autotuned, tune
from xla_costmodel.clients.xla.tune_config import config_key
from xla_costmodel.harness import SERVE_MODULE, ServiceServer
from xla_costmodel.tpugraphs import xla_cpu2
from xla_costmodel.tpugraphs.paired import summarize
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions

REPO = Path(__file__).resolve().parents[2]
MODEL: Final = "xla_cpu"
QUICK = TimingProtocol(runs=1, min_rounds=2, max_rounds=2, budget_s=1.0)
REQUIRED = {
    "default_ms",
    "best_ms",
    "speedup",
    "compiler_options",
    "measured",
    "strategy",
    "budget",
}
TINY_FILE = """
def program():
    import jax
    import jax.numpy as jnp

    def fn(w, x):
        return jnp.sum(jax.nn.relu(x @ w) ** 2, axis=-1)

    return fn, (jnp.ones((64, 64), jnp.float32), jnp.ones((32, 64), jnp.float32))
"""


@pytest.fixture(scope="module", autouse=True)
def jax_installed() -> None:
    if importlib.util.find_spec("jax") is None:
        pytest.fail(
            "jax is not installed: pip install 'xla-costmodel[xla]' (make test does)"
        )


def _tiny() -> tuple[Any, tuple[Any, ...]]:
    import jax
    import jax.numpy as jnp

    def fn(w: Any, b: Any, x: Any) -> Any:
        return jnp.tanh(jax.nn.relu(x @ w + b) @ w.T).sum(axis=-1)

    k1, k2 = jax.random.split(jax.random.key(0))
    w = jax.random.normal(k1, (64, 128), jnp.float32) / 8
    x = jax.random.normal(k2, (32, 64), jnp.float32)
    return fn, (w, jnp.zeros((128,), jnp.float32), x)


@contextmanager
def _service(
    root: Path, model_dir: Path, argv: list[str] | None = None
) -> Iterator[str]:
    """A real service process serving the xla_cpu model from ``model_dir``
    (``harness.ServiceServer``: uvicorn on the app factory, or ``argv``); its URL
    once ready."""
    env = {
        "COSTMODEL_MODELS": MODEL,
        "COSTMODEL_MODEL_DIR": str(model_dir),
        "COSTMODEL_DATA_DIR": str(root / "db"),
        "COSTMODEL_LOG_LEVEL": "WARNING",
    }
    with ServiceServer(root, env, argv=argv) as server:
        yield server.url


@pytest.fixture(scope="module")
def xla_cpu_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real uvicorn process serving a tiny xla_cpu model trained on synthetic files."""
    from xla_costmodel.models.export import export_artifact
    from xla_costmodel.models.network import ModelConfig
    from xla_costmodel.models.synthetic import write_tree
    from xla_costmodel.models.train import TrainConfig, fit

    root = tmp_path_factory.mktemp("tune_service")
    train = write_tree(root / "data", MODEL, "train", 4, seed=0, num_configs=40)
    valid = write_tree(root / "data", MODEL, "valid", 1, seed=1, num_configs=40)
    network = ModelConfig(MODEL, hidden=8, layers=1, embed=8, scorer_hidden=8)
    cfg = TrainConfig(MODEL, epochs=1, model=network, batch_configs=32)
    out = root / "models" / MODEL / "1"
    export_artifact(fit(train, valid, cfg, out.parent), out, name=MODEL)
    with _service(root, root / "models") as url:  # uvicorn on the app factory
        yield url


def test_tune_ranks_measures_feeds_back_and_keeps_a_sound_choice(
    xla_cpu_service: str, tmp_path: Path
) -> None:
    fn, args = _tiny()
    with CostModelClient(xla_cpu_service) as client:
        config = TuneConfig(
            budget=3, candidates=8, rounds=2, protocol=QUICK, crash_dir=tmp_path
        )
        tuned = autotuned(fn, args, config, client=client)
        report = tuned.report
        assert report.service_answered and report.model_version == "1", report.reason
        body = json.loads(json.dumps(report.to_json()))
        assert REQUIRED | {"noise", "rounds", "target", "model_version"} <= set(body)
        assert body["strategy"] == "model" and body["budget"] == 3
        assert report.default_ms > 0 and report.noise >= 0.02
        assert [r.configs for r in report.rounds] == [2, 1]
        assert body["rounds"] == [r.to_json() for r in report.rounds]
        assert len(report.measured) + len(report.failed) == 3
        for m, entry in zip(report.measured, body["measured"], strict=True):
            assert m.ms > 0 and entry == m.to_json()
            assert set(entry) >= {"compiler_options", "ms", "vs_default", "round"}
            xla_cpu2.from_options(m.compiler_options)  # a valid xla_cpu/2 config
        # Every round's measurements (the default's too) were stored by the service.
        for r in report.rounds:
            assert r.feedback_stored == r.measured + 1
        # The chosen options are the default's, or a measured config that beat the
        # default beyond the noise when measured again.
        if report.compiler_options:
            (entry,) = [
                m
                for m in report.measured
                if m.compiler_options == report.compiler_options
            ]
            assert entry.final_ms == report.best_ms
            # Confirmed in a fresh process: its pairs are the report's figures.
            assert report.confirmed is not None
            assert report.confirmed.pid != os.getpid()
            fresh = summarize(report.confirmed.pairs)
            assert report.speedup == fresh.speedup > 1 + 0.02
        else:
            assert report.best_ms == report.default_ms and report.speedup == 1.0
        # The service's next ranking of this graph adapts to what was fed back (from
        # 4 distinct configs on): the default + every measured config.
        import jax

        hlo = Hlo(jax.jit(fn).lower(*args).as_text(dialect="hlo"), configurable=None)
        again = client.rank(MODEL, hlo, xla_cpu2.sample(8, 0), target=report.target)
        distinct = 1 + len(report.measured)
        assert again.adapted == (distinct if distinct >= 4 else 0)
    np.testing.assert_allclose(tuned(*args), fn(*args), rtol=1e-5, atol=1e-6)


def test_an_unreachable_service_keeps_the_default(tmp_path: Path) -> None:
    fn, args = _tiny()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    url = f"http://127.0.0.1:{port}"
    config = TuneConfig(budget=2, candidates=8, protocol=QUICK, crash_dir=tmp_path)
    with CostModelClient(url, retry=RetryPolicy(max_attempts=1)) as client:
        report = tune(fn, args, config, client=client)
    assert report.compiler_options == {} and report.speedup == 1.0
    assert not report.service_answered and report.measured == ()
    assert "the service did not rank" in report.reason
    assert "kept the default" in report.reason
    assert report.default_ms > 0 and report.best_ms == report.default_ms

    alone = tune(fn, args, config)
    assert alone.compiler_options == {} and "no client" in alone.reason


def test_the_config_is_checked_and_plans_the_policys_rounds() -> None:
    with pytest.raises(ValueError, match="strategy"):
        TuneConfig(strategy="best")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="budget"):
        TuneConfig(budget=8, candidates=8)
    with pytest.raises(ValueError, match="repeats"):
        TuneConfig(repeats=1)
    assert TuneConfig(budget=8).plan() == policy.plan(8)
    assert [r.size for r in TuneConfig(budget=2).plan()] == [2]  # one round
    assert [r.size for r in TuneConfig(budget=3).plan()] == [1, 1, 1]


def test_the_reports_typed_entries_serialize_to_the_json_contract() -> None:
    """``costmodel tune --json`` is a contract: the typed entries (``Measured``,
    ``Failed``, ``RoundSummary``, ``Verified``, ...) give the same keys, in the same
    order, as the dicts they replaced; a measured config's optional keys appear only
    when set."""
    from xla_costmodel.clients.wire import Refuted
    from xla_costmodel.clients.xla.confirm import Confirmation
    from xla_costmodel.clients.xla.pickers import Shaping
    from xla_costmodel.clients.xla.tune_report import (
        Failed,
        Load,
        Measured,
        RoundSummary,
        Verified,
    )

    shaping = Shaping(
        target_programs=3, target_measurements=9, knowledge_weight=0.5, prior_weight=0.5
    )
    report = TuneReport(
        default_ms=2.0,
        best_ms=1.0,
        speedup=2.0,
        compiler_options={"a": True},
        measured=(
            Measured(compiler_options={"a": True}, ms=1.0, vs_default=0.5, round=1),
            Measured(
                compiler_options={"b": 1},
                ms=1.5,
                vs_default=0.75,
                round=2,
                final_ms=1.4,
                final_speedup=1.3,
                p_value=0.01,
            ),
        ),
        failed=(Failed({"c": False}, "no"),),
        strategy="model",
        budget=3,
        candidates=8,
        seed=0,
        noise=0.03,
        rounds=(
            RoundSummary(
                round=1,
                configs=2,
                measured=2,
                adapted=0,
                shaping=shaping,
                explored=2,
                feedback_stored=3,
                default_ms=2.0,
                noise=0.03,
            ),
        ),
        target="cpu-x",
        model="xla_cpu",
        model_version="1",
        service_answered=True,
        reason="why",
        notes=("a note",),
        verified=Verified(
            kept=True, speedup=1.1, speedup_low=1.0, p_value=0.1, pairs=7, stale=False
        ),
        config=(1.0, 0.0),
        confirmed=Confirmation(pairs=((2, 1),), pid=7, load=(0.5, 0.6)),
        load=Load(start=(1.0, 1.0, 1.0), end=(2.0, 2.0, 2.0), noise=0.03),
        refuted=Refuted(config=(0.0, 1.0), reason="outputs"),
    )
    body = json.loads(json.dumps(report.to_json()))
    assert list(body) == [f.name for f in dataclasses.fields(TuneReport)]
    assert body["measured"] == [
        {"compiler_options": {"a": True}, "ms": 1.0, "vs_default": 0.5, "round": 1},
        {
            "compiler_options": {"b": 1},
            "ms": 1.5,
            "vs_default": 0.75,
            "round": 2,
            "final_ms": 1.4,
            "final_speedup": 1.3,
            "p_value": 0.01,
        },
    ]
    assert body["failed"] == [{"compiler_options": {"c": False}, "error": "no"}]
    (summary,) = body["rounds"]
    assert list(summary) == [
        "round",
        "configs",
        "measured",
        "adapted",
        "shaping",
        "explored",
        "feedback_stored",
        "default_ms",
        "noise",
    ]
    assert summary["shaping"] == {
        "target_programs": 3,
        "target_measurements": 9,
        "knowledge_weight": 0.5,
        "prior_weight": 0.5,
    }
    assert body["verified"] == {
        "kept": True,
        "speedup": 1.1,
        "speedup_low": 1.0,
        "p_value": 0.1,
        "pairs": 7,
        "stale": False,
    }
    assert body["notes"] == ["a note"] and body["config"] == [1.0, 0.0]
    assert body["confirmed"]["pid"] == 7 and body["confirmed"]["pairs"] == [[2, 1]]
    assert body["load"] == {
        "start": [1.0, 1.0, 1.0],
        "end": [2.0, 2.0, 2.0],
        "noise": 0.03,
        "confirm_controls": None,
        "confirm_load": None,
    }
    assert body["refuted"] == {"config": [0.0, 1.0], "reason": "outputs"}


def test_configs_that_crashed_an_earlier_run_are_left_out(tmp_path: Path) -> None:
    fn, args = _tiny()

    def config(budget: int) -> TuneConfig:
        return TuneConfig(
            budget=budget,
            strategy="random",
            candidates=16,
            protocol=QUICK,
            crash_dir=tmp_path,
        )

    first = tune(fn, args, config(1))
    assert first.notes == ()
    (journal,) = tmp_path.glob("*.journal")  # one per program
    # the tuner's candidates: no while loop here, so no loop-threshold rows
    rows = xla_cpu2.sample_for_program(16, 0, loops=False)
    crashed = range(1, len(rows) - 2)
    # As a process killed while compiling them would have left it: begun, not ended.
    with journal.open("a") as f:
        f.writelines(f"c {config_key(rows[i])}\n" for i in crashed)
    again = tune(fn, args, config(2))
    tried = [m.compiler_options for m in (*again.measured, *again.failed)]
    expected = [xla_cpu2.to_options(rows[i]).flat() for i in (-2, -1)]
    assert sorted(map(str, tried)) == sorted(map(str, expected))
    assert (
        f"left out {len(crashed)} config(s) that crashed an earlier run"
        in again.notes[0]
    )


def _costmodel(*argv: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it (it tunes in a child process of its own)."""
    return subprocess.run(
        [sys.executable, "-c", "from xla_costmodel.cli import main; main()", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "XDG_CACHE_HOME": str(cache)},
    )


def test_the_command_tunes_a_file_at_random(tmp_path: Path) -> None:
    path = tmp_path / "tiny_program.py"
    path.write_text(TINY_FILE)
    result = _costmodel(
        "tune",
        f"{path}:program",
        "--strategy",
        "random",
        "--budget",
        "2",
        "--candidates",
        "8",
        "--seed",
        "1",
        "--json",
        cache=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert set(body) >= REQUIRED
    assert (body["strategy"], body["budget"], body["seed"]) == ("random", 2, 1)
    # Random never asks the service: nothing reused, nothing verified, and the
    # compiler every runtime of the run was measured with.
    assert body["reused"] is False and body["verified"] is None
    assert body["compiler"].startswith("jaxlib ")
    assert not body["service_answered"] and body["default_ms"] > 0
    assert len(body["measured"]) + len(body["failed"]) == 2
    measured = [m["compiler_options"] for m in body["measured"]]
    assert body["compiler_options"] == {} or body["compiler_options"] in measured
    assert all(m["ms"] > 0 for m in body["measured"])
    assert list(tmp_path.glob("costmodel/tune/*.journal"))  # under XDG_CACHE_HOME
    # The load the run saw: the load averages at its start and end.
    assert len(body["load"]["start"]) == len(body["load"]["end"]) == 3

    bad = _costmodel("tune", f"{path}:no_such", cache=tmp_path)
    assert bad.returncode == 2 and "no_such" in bad.stderr


def test_the_command_is_registered_and_names_its_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert cli.COMMANDS["tune"] == ("xla_costmodel.clients.xla.tune_cli:tune", "xla")
    monkeypatch.setitem(extras.EXTRAS, "xla", ("no_such_module_for_this_test",))
    result = CliRunner().invoke(cli.build_app(), ["tune", "f.py:g", "--json"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "costmodel tune needs the xla extra: pip install 'xla-costmodel[xla]'"
    ]


def test_importing_the_tuner_loads_no_jax() -> None:
    code = (
        "import sys, xla_costmodel.clients, xla_costmodel.clients.xla.tune, "
        "xla_costmodel.clients.xla.tune_cli; "
        "print(sorted(m for m in ('jax', 'jaxlib', 'keras') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def shipped_xla_cpu_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real uvicorn process serving the shipped xla_cpu artifact (models/artifacts)."""
    root = tmp_path_factory.mktemp("shipped_xla_cpu")
    argv = [sys.executable, "-m", SERVE_MODULE]  # costmodel serve
    with _service(root, REPO / "models" / "artifacts", argv) as url:
        yield url


def test_the_example_program_is_tuned_with_the_shipped_model(
    shipped_xla_cpu_service: str, tmp_path: Path
) -> None:
    """README's `costmodel tune examples/tune_programs.py:my_program`, tiny budget."""
    result = _costmodel(
        "tune",
        "examples/tune_programs.py:my_program",
        "--server",
        shipped_xla_cpu_service,
        "--budget",
        "2",
        "--rounds",
        "1",
        "--candidates",
        "16",
        "--json",
        cache=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["service_answered"] and body["strategy"] == "model"
    assert body["model"] == MODEL and body["model_version"] == "1"
    assert len(body["measured"]) + len(body["failed"]) == 2
    (first,) = body["rounds"]
    assert first["feedback_stored"] >= 1  # the default's runtime at least
    assert first["explored"] == first["configs"] == 2  # the portfolio's head
    assert 0 < first["shaping"]["prior_weight"] <= 1.0
    measured = [m["compiler_options"] for m in body["measured"]]
    assert body["compiler_options"] == {} or body["compiler_options"] in measured
    if body["compiler_options"]:  # the fresh process's pairs, as the decision's
        assert body["speedup"] == summarize(body["confirmed"]["pairs"]).speedup
    else:
        assert body["speedup"] == 1.0
    assert set(body["load"]) >= {"start", "end", "noise", "confirm_controls"}


def test_a_finalist_is_timed_in_a_fresh_process_on_every_cpu_and_on_one() -> None:
    """``confirm.Confirmer``: the program shipped with jax.export to a child that
    compiles the default twice and the options, and times them in 7 rounds."""
    from xla_costmodel.clients.xla.confirm import Confirmer

    fn, args = _tiny()
    options = xla_cpu2.to_options(xla_cpu2.sample(8, 0)[1])  # the loop threshold
    assert options.extra_options  # the map travels to the child, and applies there
    c = Confirmer(fn, args).run(options, rounds=7, runs=1)
    assert c.error is None and c.pid is not None and c.pid != os.getpid()
    assert len(c.pairs) == 7 and all(d > 0 and t > 0 for d, t in c.pairs)
    cpus = len(os.sched_getaffinity(0))
    assert len(c.one_cpu) == (7 if cpus > 1 else 0)
    assert c.load is not None and c.controls >= 0.0
    # Options XLA rejects there are an error, not a crash.
    bad = Confirmer(fn, args).run(
        CompilerOptions(compiler_options={"xla_no_such_option_for_test": True})
    )
    assert bad.error is not None and bad.summary is None
