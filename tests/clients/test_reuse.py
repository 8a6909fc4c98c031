"""Tuned once, fast everywhere: decisions stored by ``tune``, reused by the next
``tune`` and applied by the drop-in ``jit``, against a real uvicorn process serving
the shipped xla_cpu model, with real XLA compiles of a tiny program.

A tiny program's real speedups are too small and noisy to say in advance whether a
config holds, so the timings are steered: in the tuning process by seeding
``Bench.pair``, in the fresh process that confirms a finalist or times a fleet's
decision by the ``Hooks.config_scale`` argument (it multiplies that process's times
of the config). Everything else (compiles, child processes, HTTP, the database) is
real.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from answer_keys import BEST_KEYS, BEST_PROVENANCE

from xla_costmodel.clients import CostModelClient, Decision, RetryPolicy
from xla_costmodel.clients.xla import jit
from xla_costmodel.clients.xla.measure import TimingProtocol
from xla_costmodel.clients.xla.tune import TuneReport, tune
from xla_costmodel.clients.xla.tune_bench import Bench
from xla_costmodel.clients.xla.tune_config import Hooks, TuneConfig
from xla_costmodel.tpugraphs import machine, xla_cpu2
from xla_costmodel.tpugraphs.paired import summarize

MODEL = "xla_cpu"
QUICK = TimingProtocol(runs=1, min_rounds=2, max_rounds=2, budget_s=1.0)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def jax_installed() -> None:
    if importlib.util.find_spec("jax") is None:
        pytest.fail("jax is not installed: pip install 'xla-costmodel[xla]'")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The shipped xla_cpu model under a real uvicorn on loopback (writes open)."""
    from xla_costmodel.harness import ServiceServer

    env = {
        "COSTMODEL_MODEL_DIR": str(REPO / "models" / "artifacts"),
        "COSTMODEL_MODELS": MODEL,
        "COSTMODEL_LOG_LEVEL": "WARNING",
        "COSTMODEL_DATA_DIR": str(tmp_path_factory.mktemp("data")),
    }
    with ServiceServer(tmp_path_factory.mktemp("uvicorn"), env) as s:
        yield s.url


def _tiny(scale: float = 1.0) -> tuple[Any, tuple[Any, ...]]:
    import jax
    import jax.numpy as jnp

    def fn(w: Any, x: Any) -> Any:
        return jnp.tanh(jax.nn.relu(x @ w) * scale).sum(axis=-1)

    k1, k2 = jax.random.split(jax.random.key(0))
    return fn, (
        jax.random.normal(k1, (64, 64), jnp.float32),
        jax.random.normal(k2, (16, 64), jnp.float32),
    )


def _program(fn: Any, args: tuple[Any, ...]) -> tuple[Any, str]:
    """(the prepared graph, hlo_fingerprint) as the tuner computes them."""
    import jax

    from xla_costmodel.clients import Hlo, prepare_graph
    from xla_costmodel.clients.xla.reuse import fingerprint

    lowered = jax.jit(fn).lower(*args)
    text = lowered.as_text(dialect="hlo")
    return prepare_graph(Hlo(text, configurable=None)), fingerprint(lowered)


FASTER = tuple((1_300_000 + 1000 * i, 1_000_000) for i in range(7))  # 1.3x, p 1/128


def _decide(
    url: str,
    fn: Any,
    args: tuple[Any, ...],
    target: str,
    *,
    row: int | None = 3,
    compiler: str | None = None,
    token: str | None = None,
) -> dict[str, Any]:
    """Store a decision for ``fn`` as a tuner would (the graph with feedback first,
    then the row and pairs that show it 1.3x faster); returns its options."""
    graph, fingerprint = _program(fn, args)
    config = xla_cpu2.sample(8, 0)[0 if row is None else row]
    compiler = compiler or machine.compiler()
    decision = Decision(
        graph_id=graph.graph_id,
        config=tuple(float(v) for v in config),
        paired_runtimes_ns=() if row is None else FASTER,
        budget=8,
        strategy="model",
        kept_default=row is None,
        target=target,
        compiler=compiler,
        hlo_fingerprint=fingerprint,
    )
    with CostModelClient(url, token=token or "") as client:
        rows = np.stack([xla_cpu2.default_row(), config])
        client.feedback(
            MODEL,
            graph,
            [1_300_000, 1_000_000],
            configs=rows,
            target=target,
            compiler=compiler,
        )
        assert client.record_decision(MODEL, decision).stored
    return xla_cpu2.to_options(config).flat()


class Counting(httpx.HTTPTransport):
    """A real transport that counts what it sends."""

    def __init__(self) -> None:
        super().__init__(retries=0)
        self.paths: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return super().handle_request(request)


def _counting_client(url: str) -> tuple[CostModelClient, Counting]:
    transport = Counting()
    client = CostModelClient(
        url, transport=transport, retry=RetryPolicy(max_attempts=1), timeout=2.0
    )
    return client, transport


# -- jit ----------------------------------------------------------------------


def test_jit_without_a_server_is_jax_jit() -> None:
    import jax

    fn, args = _tiny()
    f = jit(fn)
    np.testing.assert_allclose(f(*args), jax.jit(fn)(*args), rtol=1e-6)
    assert f.report is not None and f.report.source == "default"
    assert f.report.compiler_options == {} and "no server" in f.report.reason


def test_jit_with_a_dead_server_compiles_the_default() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    fn, args = _tiny()
    f = jit(fn, server=f"http://127.0.0.1:{port}")
    out = f(*args)
    assert f.report is not None and f.report.source == "default"
    assert "no answer" in f.report.reason and out.shape == (16,)


def test_jit_applies_a_fresh_decision_with_one_request(server: str) -> None:
    target = f"test-fresh-{uuid.uuid4().hex[:8]}"
    fn, args = _tiny()
    decided = _decide(server, fn, args, target)
    client, transport = _counting_client(server)
    with client:
        f = jit(fn, client=client, target=target)
        first = f(*args)
        again = f(*args)  # the same signature: compiled once, asked once
        import jax

        np.testing.assert_allclose(first, jax.jit(fn)(*args), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(again, first)
    assert transport.paths == ["/v1/best"]
    report = f.report
    assert report is not None and report.source == "best_known", report.reason
    assert report.compiler_options == decided
    assert report.graph_id == _program(fn, args)[0].graph_id
    assert report.added_ms > 0 and report.compile_ms > 0
    # A new signature is looked up (and compiled) once more.
    f2 = jit(fn, server=server, target=target)
    f2(*args)
    f2(args[0], args[1][:8])
    assert len(f2.reports) == 2


def test_jit_never_applies_a_stale_decision_without_verification(server: str) -> None:
    target = f"test-stale-{uuid.uuid4().hex[:8]}"
    fn, args = _tiny()
    _decide(server, fn, args, target, compiler="jaxlib 0.0.1-test")
    f = jit(fn, server=server, target=target)
    f(*args)
    assert f.report is not None and f.report.source == "default"
    assert f.report.compiler_options == {}
    assert "decided under jaxlib 0.0.1-test" in f.report.reason
    assert f.report.decision is not None and f.report.decision["stale"]


def test_jit_with_a_budget_tunes_in_a_child_and_stores_the_decision(
    server: str, tmp_path: Path
) -> None:
    target = f"test-tuned-{uuid.uuid4().hex[:8]}"
    fn, args = _tiny(2.0)
    tune_kwargs = {"candidates": 8, "protocol": QUICK, "crash_dir": tmp_path}
    f = jit(fn, server=server, target=target, budget=2, tune_kwargs=tune_kwargs)
    f(*args)
    assert f.report is not None and f.report.source == "tuned", f.report.reason
    child = int(f.report.reason.split("in child process ")[1].split(":")[0])
    assert child != os.getpid()
    assert f.report.graph_id == _program(fn, args)[0].graph_id  # the caller's name
    with CostModelClient(server) as client:
        best = client.best(MODEL, graph_id=f.report.graph_id, target=target)
    assert best is not None and best.compiler == machine.compiler()
    assert xla_cpu2.to_options(best.config).flat() == f.report.compiler_options
    # Another process of this machine now applies it without tuning: the child
    # stored it under the caller's fingerprint.
    g = jit(fn, server=server, target=target, budget=2, tune_kwargs=tune_kwargs)
    g(*args)
    assert g.report is not None and g.report.source == "best_known"


def test_a_segfault_while_jit_tunes_kills_the_child_not_the_caller(
    server: str, tmp_path: Path
) -> None:
    """The child dies by SIGSEGV compiling its first candidate (the hook, an
    argument); it is restarted, leaves that config out (its crash journal) and
    finishes; the caller compiles what it chose."""
    import jax

    target = f"test-crash-{uuid.uuid4().hex[:8]}"
    fn, args = _tiny(7.0)
    caller = os.getpid()
    tune_kwargs = {
        "candidates": 8,
        "protocol": QUICK,
        "crash_dir": tmp_path,
        "strategy": "random",
        "hooks": Hooks(crash_at="candidate"),
    }
    f = jit(fn, server=server, target=target, budget=2, tune_kwargs=tune_kwargs)
    out = f(*args)
    assert os.getpid() == caller
    np.testing.assert_allclose(out, jax.jit(fn)(*args), rtol=1e-4, atol=1e-5)
    assert f.report is not None and f.report.source == "tuned", f.report.reason
    (journal,) = tmp_path.glob("*.journal")
    from xla_costmodel.clients.xla.probe import Journal

    assert len(Journal(journal).crashed()) == 1  # the config the segfault hit
    # Without restarts the child's death is the default, still no caller's death.
    h = jit(
        fn,
        server=server,
        target=target,
        budget=2,
        tune_kwargs={**tune_kwargs, "crash_dir": tmp_path / "b", "restarts": 0},
    )
    h(*args)
    assert h.report is not None and h.report.source == "default"
    assert "killed by signal 11" in h.report.reason


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The shipped model under uvicorn with tokens required, one writer's token for
    one target: ``url``, ``token``, ``target``, ``db`` (the SQLite file)."""
    from xla_costmodel.harness import ServiceServer

    data = tmp_path_factory.mktemp("auth-data")
    target = f"test-token-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(
        [*COSTMODEL, "tokens", "create", "a-writer", "--target", target],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COSTMODEL_DATA_DIR": str(data)},
    )
    env = {
        "COSTMODEL_MODEL_DIR": str(REPO / "models" / "artifacts"),
        "COSTMODEL_MODELS": MODEL,
        "COSTMODEL_LOG_LEVEL": "WARNING",
        "COSTMODEL_DATA_DIR": str(data),
        "COSTMODEL_FEEDBACK_AUTH": "token",
    }
    with ServiceServer(tmp_path_factory.mktemp("auth-uvicorn"), env) as s:
        yield {
            "url": s.url,
            "token": made.stdout.strip().splitlines()[-1],
            "target": target,
            "db": data / "costmodel.db",
        }


def _writers(db: Path) -> dict[str, str]:
    """graph_id -> the writer of its decision, read from the service's database."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT graph_id, writer FROM decisions").fetchall())


def test_jit_hands_the_writer_token_to_its_tuning_child_not_its_environment(
    auth_server: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tokens required. The caller's process holds the token (``token=``); the
    tuning child gets it on its stdin: the decision is stored under the writer's
    name. A caller whose environment holds a token but who hands none to the child
    stores nothing: the child's environment has no token (``isolate.call``)."""
    url, target = auth_server["url"], auth_server["target"]
    tune_kwargs = {"candidates": 8, "protocol": QUICK, "crash_dir": tmp_path}
    fn, args = _tiny(10.0)
    f = jit(
        fn,
        server=url,
        token=auth_server["token"],
        target=target,
        budget=1,
        tune_kwargs=tune_kwargs,
    )
    f(*args)
    assert f.report is not None and f.report.source == "tuned", f.report.reason
    # The caller's environment has a token, the child is handed none.
    monkeypatch.setenv("COSTMODEL_TOKEN", auth_server["token"])
    with CostModelClient(url, token="") as anonymous:
        g = jit(fn, client=anonymous, target=target, budget=1, tune_kwargs=tune_kwargs)
        g(args[0], args[1][:8])  # another program: another shape
    assert g.report is not None and g.report.source == "tuned", g.report.reason
    stored = _writers(auth_server["db"])
    assert stored.get(f.report.graph_id) == "a-writer"
    assert g.report.graph_id != f.report.graph_id
    assert g.report.graph_id not in stored


def test_costmodel_tune_hands_its_token_to_its_worker_on_stdin(
    auth_server: dict[str, Any], tmp_path: Path
) -> None:
    """``COSTMODEL_TOKEN`` in the command's environment (as studies/reuse.py runs
    it): the worker, started without it, stores the decision as the writer."""
    path = tmp_path / "tiny_token.py"
    path.write_text(TINY_FILE.replace("(8, 32)", "(4, 32)"))
    argv = ["tune", f"{path}:program", "--server", auth_server["url"]]
    argv += ["--target", auth_server["target"], "--budget", "1", "--json"]
    done = subprocess.run(
        [*COSTMODEL, *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={
            **os.environ,
            "COSTMODEL_TOKEN": auth_server["token"],
            "XDG_CACHE_HOME": str(tmp_path),
        },
    )
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["decision_stored"], body["notes"]
    assert _writers(auth_server["db"]).get(body["graph_id"]) == "a-writer"


# -- tune -------------------------------------------------------------------


def _seeded_pairs(ratio: float, noise: float = 0.02) -> Any:
    """``Bench.pair`` with seeded times: the candidate at ``ratio`` of the default."""
    rng = np.random.default_rng(0)

    def pair(self: Bench, default: Any, candidate: Any) -> tuple[int, int]:
        d, c = 1e6 * (1 + noise * rng.standard_normal(2))
        return int(d), int(ratio * c)

    return pair


def _faster_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every candidate looks 1.4x faster in the tuning process: in the rounds
    (``Bench.measure``) and in the final pairs (``Bench.pair``)."""
    real = Bench.measure

    def measure(self: Bench, executables: Any) -> tuple[list[int], int]:
        ns, default_ns = real(self, executables)
        return [int(0.7 * default_ns) for _ in ns], default_ns

    monkeypatch.setattr(Bench, "measure", measure)
    monkeypatch.setattr(Bench, "pair", _seeded_pairs(0.7))


def _tune(
    client: CostModelClient,
    fn: Any,
    args: tuple[Any, ...],
    budget: int,
    target: str,
    tmp_path: Path,
    **config: Any,
) -> TuneReport:
    """``tune`` small: 8 candidates, the quick protocol, this test's journal."""
    cfg = TuneConfig(
        budget=budget,
        target=target,
        candidates=8,
        protocol=QUICK,
        crash_dir=tmp_path,
        **config,
    )
    return tune(fn, args, cfg, client=client)


def test_tune_reuses_a_fresh_decision_with_one_compile(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = f"test-reuse-{uuid.uuid4().hex[:8]}"
    fn, args = _tiny(3.0)
    decided = _decide(server, fn, args, target)
    compiles: list[int] = []
    real_compile = Bench.compile

    def counting(self: Bench, keys: list[int], options: list[Any]) -> Any:
        compiles.append(len(keys))
        return real_compile(self, keys, options)

    monkeypatch.setattr(Bench, "compile", counting)
    with CostModelClient(server) as client:
        report = _tune(
            client, fn, args, 4, target, tmp_path, hooks=Hooks(config_scale=0.2)
        )
        best = client.best(MODEL, graph_id=report.graph_id, target=target)
    assert report.reused, report.reason
    assert compiles == [1] and report.compiler_options == decided
    assert [m.compiler_options for m in report.measured] == [decided]
    assert report.verified is not None and report.verified.kept
    assert report.compiler == machine.compiler() and report.decision_stored
    assert report.rounds == () and report.refuted is None
    # Timed in a fresh process: those pairs are the report's figures and the
    # decision's (the service computes the same speedup from them).
    assert report.confirmed is not None and report.confirmed.pid != os.getpid()
    pairs = report.confirmed.pairs
    assert len(pairs) == 7 and report.speedup == summarize(pairs).speedup > 1.5
    assert best is not None and best.writers >= 1


def test_tune_refutes_a_decision_that_is_slower_here_and_searches(
    server: str, tmp_path: Path
) -> None:
    target = f"test-fails-{uuid.uuid4().hex[:8]}"
    fn, args = _tiny(4.0)
    decided = _decide(server, fn, args, target)
    with CostModelClient(server) as client:
        report = _tune(
            client, fn, args, 3, target, tmp_path, hooks=Hooks(config_scale=5.0)
        )
    assert not report.reused
    assert report.verified is not None and not report.verified.kept
    assert report.measured[0].compiler_options == decided  # measured first
    assert report.measured[0].round == 0
    assert len(report.measured) + len(report.failed) == 3  # the budget, in all
    assert report.rounds and report.service_answered
    assert "did not hold" in " ".join(report.notes)
    # The run's decision carries the refutation, with the pairs that show it (the
    # service checks they do) and it was stored.
    assert report.refuted is not None and report.refuted.reason == "slower"
    assert report.refuted.config == tuple(xla_cpu2.sample(8, 0)[3])
    assert summarize(report.refuted.paired_runtimes_ns).slower
    assert report.decision_stored, report.notes


def test_tune_reverifies_a_stale_decision(server: str, tmp_path: Path) -> None:
    target = f"test-stale-tune-{uuid.uuid4().hex[:8]}"
    fn, args = _tiny(5.0)
    decided = _decide(server, fn, args, target, compiler="jaxlib 0.0.1-test")
    with CostModelClient(server) as client:
        report = _tune(
            client, fn, args, 2, target, tmp_path, hooks=Hooks(config_scale=0.2)
        )
        best = client.best(
            MODEL, graph_id=report.graph_id, target=target, compiler=machine.compiler()
        )
    assert not report.reused  # stale: never a shortcut, the search runs
    assert report.verified is not None and report.verified.stale
    assert report.measured[0].compiler_options == decided
    assert report.rounds and "decided under jaxlib 0.0.1-test" in " ".join(report.notes)
    # This run's own decision, under this compiler, is now the fresh one.
    assert best is not None and not best.stale and best.compiler == machine.compiler()


def test_a_finalist_is_kept_only_if_a_fresh_process_confirms_it(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the tuning process every finalist looks 1.4x faster (``Bench.pair``
    and ``Bench.measure`` steered); the fresh process times the finalist 5x
    slower (the hook): the default stays, with a note. Timed 5x faster there, it
    is kept and its fresh pairs are the decision's."""
    _faster_in_process(monkeypatch)
    fn, args = _tiny(8.0)
    target = f"test-confirm-{uuid.uuid4().hex[:8]}"
    with CostModelClient(server) as client:
        dropped = _tune(
            client,
            fn,
            args,
            2,
            target,
            tmp_path,
            reuse=False,
            hooks=Hooks(config_scale=5.0),
        )
        assert dropped.compiler_options == {} and dropped.speedup == 1.0
        assert dropped.confirmed is not None
        assert dropped.confirmed.pid != os.getpid()
        note = " ".join(dropped.notes)
        assert "the finalist did not hold in a fresh process (0." in note
        assert dropped.decision_stored, dropped.notes  # the default, measured
        best = client.best(MODEL, graph_id=dropped.graph_id, target=target)
        assert best is not None and best.kept_default

        kept = _tune(
            client,
            fn,
            args,
            2,
            target,
            tmp_path,
            reuse=False,
            hooks=Hooks(config_scale=0.2),
        )
        best = client.best(MODEL, graph_id=kept.graph_id, target=target)
    assert kept.compiler_options and kept.config is not None, kept.notes
    assert kept.confirmed is not None and len(kept.confirmed.pairs) == 7
    fresh = summarize(kept.confirmed.pairs)
    assert kept.speedup == fresh.speedup > 1.5
    assert kept.load is not None and kept.load.confirm_controls is not None
    assert kept.decision_stored, kept.notes
    # The service computed the stored figures from the pairs the run sent.
    assert best is not None and best.config == tuple(kept.config)
    assert best.speedup == pytest.approx(fresh.speedup)


def test_a_finalist_whose_fresh_process_crashes_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _faster_in_process(monkeypatch)
    fn, args = _tiny(9.0)
    cfg = TuneConfig(
        budget=2,
        strategy="random",
        candidates=8,
        protocol=QUICK,
        crash_dir=tmp_path,
        hooks=Hooks(crash_at="confirm"),
    )
    report = tune(fn, args, cfg)
    assert report.compiler_options == {}
    assert "killed by signal 11" in " ".join(report.notes), report.notes


def test_no_reuse_skips_the_lookup(server: str, tmp_path: Path) -> None:
    target = f"test-noreuse-{uuid.uuid4().hex[:8]}"
    fn, args = _tiny(6.0)
    _decide(server, fn, args, target)
    with CostModelClient(server) as client:
        report = _tune(client, fn, args, 1, target, tmp_path, reuse=False)
    assert not report.reused and report.verified is None
    assert report.rounds


def test_importing_jit_loads_no_jax() -> None:
    code = (
        "import sys; from xla_costmodel.clients.xla import jit; "
        "print(sorted(m for m in ('jax', 'jaxlib') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


TINY_FILE = """
def program():
    import jax.numpy as jnp

    def fn(w, x):
        return jnp.sum(jnp.tanh(x @ w), axis=-1)

    return fn, (jnp.ones((32, 32), jnp.float32), jnp.ones((8, 32), jnp.float32))
"""


COSTMODEL = [sys.executable, "-c", "from xla_costmodel.cli import main; main()"]


def _costmodel(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COSTMODEL, *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
    )


def test_costmodel_best_prints_what_the_service_knows(
    server: str, tmp_path: Path
) -> None:

    from xla_costmodel.clients.xla.programs import load_program

    path = tmp_path / "tiny_best.py"
    path.write_text(TINY_FILE)
    target = f"test-cli-{uuid.uuid4().hex[:8]}"
    argv = ["best", f"{path}:program", "--server", server, "--target", target]
    nothing = _costmodel(*argv, "--json")
    assert nothing.returncode == 1, nothing.stderr
    assert json.loads(nothing.stdout)["error"]["code"] == "no_decision"

    fn, args = load_program(f"{path}:program")
    decided = _decide(server, fn, args, target)
    found = _costmodel(*argv, "--json")
    assert found.returncode == 0, found.stderr
    body = json.loads(found.stdout)
    assert set(body) == BEST_KEYS - BEST_PROVENANCE
    assert body["compiler_options"] == decided and body["target"] == target
    assert body["graph_id"] == _program(fn, args)[0].graph_id and not body["stale"]
    stale = _costmodel(*argv, "--compiler", "jaxlib 9.9.9")
    assert stale.returncode == 0 and "STALE" in stale.stdout
