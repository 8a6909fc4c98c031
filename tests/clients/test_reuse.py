"""Tuned once, fast everywhere: decisions stored by ``tune``, reused by the next
``tune`` and applied by the drop-in ``jit``, against a real uvicorn process serving
the shipped xla_cpu model, with real XLA compiles of a tiny program.

The verification's timings are the one thing replaced (``Bench.pair``, seeded): a
tiny program's real speedups are too small and noisy to say in advance whether a
decision holds. Everything else (compiles, HTTP, the database) is real.
"""

from __future__ import annotations

import importlib.util
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
from xla_costmodel.tpugraphs import machine, xla_cpu

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


def _program(fn: Any, args: tuple[Any, ...]) -> tuple[str, str]:
    """(graph_id, hlo_fingerprint) as the tuner computes them."""
    import jax

    from xla_costmodel.clients import Hlo, prepare_graph
    from xla_costmodel.clients.xla.reuse import fingerprint

    lowered = jax.jit(fn).lower(*args)
    text = lowered.as_text(dialect="hlo")
    return prepare_graph(Hlo(text, configurable=None)).graph_id, fingerprint(lowered)


def _decide(
    url: str,
    fn: Any,
    args: tuple[Any, ...],
    target: str,
    *,
    row: int | None = 3,
    options: dict[str, Any] | None = None,
    compiler: str | None = None,
) -> dict[str, Any]:
    """Store a decision for ``fn`` as a tuner would; returns the decided options."""
    graph_id, fingerprint = _program(fn, args)
    config = xla_cpu.sample(8, 0)[0 if row is None else row]
    decided = xla_cpu.to_options(config) if options is None else options
    decision = Decision(
        graph_id=graph_id,
        config=tuple(float(v) for v in config),
        compiler_options=decided,
        speedup=1.0 if row is None else 1.3,
        speedup_low=1.0 if row is None else 1.2,
        p_value=None if row is None else 0.001,
        pairs=0 if row is None else 7,
        budget=8,
        strategy="model",
        kept_default=row is None,
        target=target,
        compiler=compiler or machine.compiler(),
        hlo_fingerprint=fingerprint,
    )
    with CostModelClient(url) as client:
        assert client.record_decision(MODEL, decision).stored
    return decided


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
    assert report.graph_id == _program(fn, args)[0]
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


def test_jit_falls_back_when_this_jaxlib_rejects_an_option(server: str) -> None:
    target = f"test-rejected-{uuid.uuid4().hex[:8]}"
    fn, args = _tiny()
    _decide(server, fn, args, target, options={"xla_no_such_option_for_test": True})
    f = jit(fn, server=server, target=target)
    out = f(*args)
    assert f.report is not None and f.report.source == "default"
    assert "rejected" in f.report.reason and out.shape == (16,)


def test_jit_with_a_budget_tunes_and_stores_the_decision(
    server: str, tmp_path: Path
) -> None:
    target = f"test-tuned-{uuid.uuid4().hex[:8]}"
    fn, args = _tiny(2.0)
    tune_kwargs = {"candidates": 8, "protocol": QUICK, "crash_dir": tmp_path}
    f = jit(fn, server=server, target=target, budget=2, tune_kwargs=tune_kwargs)
    f(*args)
    assert f.report is not None and f.report.source == "tuned", f.report.reason
    with CostModelClient(server) as client:
        best = client.best(MODEL, graph_id=f.report.graph_id, target=target)
    assert best is not None and best.compiler == machine.compiler()
    assert dict(best.compiler_options) == f.report.compiler_options
    # Another process of this machine now applies it without tuning.
    g = jit(fn, server=server, target=target, budget=2, tune_kwargs=tune_kwargs)
    g(*args)
    assert g.report is not None and g.report.source == "best_known"


# -- tune -------------------------------------------------------------------


def _seeded_pairs(ratio: float, noise: float = 0.02) -> Any:
    """``Bench.pair`` with seeded times: the candidate at ``ratio`` of the default."""
    rng = np.random.default_rng(0)

    def pair(self: Bench, default: Any, candidate: Any) -> tuple[int, int]:
        d, c = 1e6 * (1 + noise * rng.standard_normal(2))
        return int(d), int(ratio * c)

    return pair


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
    return tune(
        fn,
        args,
        budget,
        client=client,
        target=target,
        candidates=8,
        protocol=QUICK,
        crash_dir=tmp_path,
        **config,
    )


def test_tune_reuses_a_fresh_decision_with_one_compile(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = f"test-reuse-{uuid.uuid4().hex[:8]}"
    fn, args = _tiny(3.0)
    decided = _decide(server, fn, args, target)
    monkeypatch.setattr(Bench, "pair", _seeded_pairs(0.7))
    compiles: list[int] = []
    real_compile = Bench.compile

    def counting(self: Bench, keys: list[int], options: list[Any]) -> Any:
        compiles.append(len(keys))
        return real_compile(self, keys, options)

    monkeypatch.setattr(Bench, "compile", counting)
    with CostModelClient(server) as client:
        report = _tune(client, fn, args, 4, target, tmp_path)
    assert report.reused, report.reason
    assert compiles == [1] and report.compiler_options == decided
    assert [m["compiler_options"] for m in report.measured] == [decided]
    assert report.verified is not None and report.verified["kept"]
    assert report.compiler == machine.compiler() and report.decision_stored
    assert report.speedup > 1.3 and report.rounds == []
    body = report.to_json()
    assert {"reused", "compiler", "verified"} <= set(body)


def test_tune_searches_when_the_decision_does_not_hold(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = f"test-fails-{uuid.uuid4().hex[:8]}"
    fn, args = _tiny(4.0)
    decided = _decide(server, fn, args, target)
    monkeypatch.setattr(Bench, "pair", _seeded_pairs(1.15))  # shown slower
    with CostModelClient(server) as client:
        report = _tune(client, fn, args, 3, target, tmp_path)
    assert not report.reused
    assert report.verified is not None and not report.verified["kept"]
    assert report.measured[0]["compiler_options"] == decided  # measured first
    assert report.measured[0]["round"] == 0
    assert len(report.measured) + len(report.failed) == 3  # the budget, in all
    assert report.rounds and report.service_answered
    assert "did not hold" in " ".join(report.notes)


def test_tune_reverifies_a_stale_decision(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = f"test-stale-tune-{uuid.uuid4().hex[:8]}"
    fn, args = _tiny(5.0)
    decided = _decide(server, fn, args, target, compiler="jaxlib 0.0.1-test")
    monkeypatch.setattr(Bench, "pair", _seeded_pairs(0.7))  # it would hold
    with CostModelClient(server) as client:
        report = _tune(client, fn, args, 2, target, tmp_path)
        best = client.best(
            MODEL, graph_id=report.graph_id, target=target, compiler=machine.compiler()
        )
    assert not report.reused  # stale: never a shortcut, the search runs
    assert report.verified is not None and report.verified["stale"]
    assert report.measured[0]["compiler_options"] == decided
    assert report.rounds and "decided under jaxlib 0.0.1-test" in " ".join(report.notes)
    # This run's own decision, under this compiler, is now the fresh one.
    assert best is not None and not best.stale and best.compiler == machine.compiler()


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


def _costmodel(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from xla_costmodel.cli import main; main()", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
    )


def test_costmodel_best_prints_what_the_service_knows(
    server: str, tmp_path: Path
) -> None:
    import json

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
    assert body["graph_id"] == _program(fn, args)[0] and not body["stale"]
    stale = _costmodel(*argv, "--compiler", "jaxlib 9.9.9")
    assert stale.returncode == 0 and "STALE" in stale.stdout
