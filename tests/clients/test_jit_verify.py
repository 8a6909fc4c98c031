"""``jit``'s verification of a fleet decision (issue 34): options come from the row
only, and a row whose outputs differ from XLA's default on the first call is not
applied and is reported to the service.

Real XLA compiles and runs in process; the service is a small HTTP fake behind
httpx's ``MockTransport`` (the client's injectable transport: the lookup answers
a ``GET /v1/best`` body, the report's ``POST /v1/decisions`` body is recorded),
because the server's decision contract is being rebuilt beside this work.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from xla_costmodel.clients import CostModelClient, RetryPolicy
from xla_costmodel.clients.xla import jit
from xla_costmodel.clients.xla.compile_options import compile_with
from xla_costmodel.clients.xla.dropin import INVALID_ROW
from xla_costmodel.tpugraphs import machine, xla_cpu, xla_cpu2

MODEL = "xla_cpu"
TARGET = "test-verify-cpu"


def _row(column: str, value: float) -> tuple[float, ...]:
    """An ``xla_cpu/2`` row: the default with one column changed."""
    row = xla_cpu2.default_row()
    row[xla_cpu2.COLUMNS.index(column)] = value
    return tuple(float(v) for v in row)


def _row_with(row: tuple[float, ...], column: str, value: float) -> tuple[float, ...]:
    out = list(row)
    out[xla_cpu2.COLUMNS.index(column)] = value
    return tuple(out)


def _options(row: tuple[float, ...]) -> dict[str, Any]:
    """A row's options as the wire and the reports spell them."""
    return xla_cpu2.to_options(row).flat()


# Without YNN's reduce fusion XLA sums the row means in another order: a
# chaotic iteration carries that rounding to O(1) differences (a real output
# change under a valid row). Without CSE the same program's outputs are identical.
DIFFERS = _row("ynn_reduce", 0.0)
SAME = _row("disable_cse", 1.0)


def _chaos() -> tuple[Any, tuple[Any, ...]]:
    import jax
    import jax.numpy as jnp
    from jax import lax

    def fn(w: Any, x: Any) -> Any:
        def step(x: Any, _: Any) -> tuple[Any, None]:
            y = jnp.tanh(3.0 * (x @ w))
            return y - y.mean(axis=1, keepdims=True) * 0.5, None

        return lax.scan(step, x, None, length=200)[0]

    w = jax.random.normal(jax.random.key(0), (128, 128), jnp.float32) / 11
    x = jax.random.normal(jax.random.key(1), (32, 128), jnp.float32)
    return fn, (w, x)


class FakeService:
    """``GET /v1/best`` answers ``best`` (404 when None); ``POST /v1/decisions``
    is recorded and answered ``decision_status``."""

    def __init__(self, best: dict[str, Any] | None, decision_status: int = 200):
        self.best, self.decision_status = best, decision_status
        self.requests: list[tuple[str, str]] = []
        self.decisions: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.path))
        if request.url.path == "/v1/best":
            if self.best is None:
                return httpx.Response(404, json=_error("no_decision"))
            return httpx.Response(200, json=self.best)
        if request.url.path == "/v1/decisions" and request.method == "POST":
            self.decisions.append(json.loads(request.content))
            if self.decision_status != 200:
                return httpx.Response(self.decision_status, json=_error("internal"))
            return httpx.Response(200, json={"stored": True, "decision_id": 1})
        return httpx.Response(404, json=_error("not_found"))

    def client(self) -> CostModelClient:
        return CostModelClient(
            "http://service.test",
            transport=httpx.MockTransport(self),
            retry=RetryPolicy(max_attempts=1),
            timeout=2.0,
        )


def _error(code: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": code, "field": None}}


def _answer(
    config: tuple[float, ...], options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``GET /v1/best`` body deciding ``config``; ``compiler_options`` as a
    server (or a writer it trusted) might send them."""
    sent = _options(config) if options is None else options
    return {
        "graph_id": "ab" * 32,
        "target": TARGET,
        "config": list(config),
        "compiler_options": sent,
        "speedup": 1.3,
        "speedup_low": 1.2,
        "p_value": 0.001,
        "writers": 1,
        "decided_at": "2026-11-28T14:00:00+00:00",
        "compiler": machine.compiler(),
        "stale": False,
        "kept_default": False,
        "model": MODEL,
        "pairs": 7,
        "strategy": "model",
    }


def _plain(fn: Any, args: tuple[Any, ...]) -> np.ndarray[Any, Any]:
    import jax

    return np.asarray(jax.jit(fn)(*args))


def test_a_row_whose_outputs_differ_is_not_applied_and_is_reported() -> None:
    import jax

    fn, args = _chaos()
    lowered = jax.jit(fn).lower(*args)
    decided = np.asarray(compile_with(lowered, xla_cpu2.to_options(DIFFERS))(*args))
    default = _plain(fn, args)
    assert not np.allclose(decided, default, atol=0.1)  # the premise: a real change

    service = FakeService(_answer(DIFFERS))
    with service.client() as client:
        f = jit(fn, client=client, model=MODEL, target=TARGET)
        first = f(*args)
        again = f(*args)  # the signature keeps the default: asked and told once
    np.testing.assert_array_equal(np.asarray(first), default)
    np.testing.assert_array_equal(np.asarray(again), default)
    report = f.report
    assert report is not None and report.source == "default"
    assert report.compiler_options == {}
    assert "outputs differ from the default's" in report.reason
    assert "reported to the service" in report.reason
    assert report.outputs is not None and not report.outputs.ok
    assert report.verify_ms > 0 and report.added_ms >= report.verify_ms
    assert service.requests == [("GET", "/v1/best"), ("POST", "/v1/decisions")]
    (sent,) = service.decisions
    assert sent["refuted"] == {"config": list(DIFFERS), "reason": "outputs"}
    assert sent["config"] == [float(v) for v in xla_cpu2.default_row()]
    assert sent["kept_default"] is True and sent["strategy"] == "verify"
    assert sent["budget"] == 0 and "paired_runtimes_ns" not in sent
    assert "compiler_options" not in sent and "speedup" not in sent
    assert sent["graph_id"] == "ab" * 32 and sent["target"] == TARGET
    assert sent["compiler"] == machine.compiler()
    assert sent["hlo_fingerprint"] == report.hlo_fingerprint


def test_without_verification_the_same_row_changes_the_result() -> None:
    """``verify=False``: jit applies the row as decided (the outputs change)."""
    fn, args = _chaos()
    service = FakeService(_answer(DIFFERS))
    with service.client() as client:
        f = jit(fn, client=client, model=MODEL, target=TARGET, verify=False)
        out = np.asarray(f(*args))
    assert f.report is not None and f.report.source == "best_known"
    assert f.report.outputs is None and f.report.verify_ms == 0.0
    assert not np.allclose(out, _plain(fn, args), atol=0.1)
    assert service.decisions == []


def test_a_row_with_the_same_outputs_is_applied_after_one_verified_run() -> None:
    fn, args = _chaos()
    service = FakeService(_answer(SAME))
    with service.client() as client:
        f = jit(fn, client=client, model=MODEL, target=TARGET)
        out = f(*args)
    report = f.report
    assert report is not None and report.source == "best_known", report.reason
    assert report.compiler_options == _options(SAME) != {}
    assert report.outputs is not None and report.outputs.ok
    assert report.verify_ms > 0
    np.testing.assert_array_equal(np.asarray(out), _plain(fn, args))
    assert service.decisions == []


def test_a_loop_threshold_row_is_applied_through_the_extra_options_map() -> None:
    """An ``xla_cpu/2`` row setting the loop-hoisting threshold (an entry of
    ``xla_backend_extra_options``): compiled with ``compile_with`` beside the
    default, verified, applied; the report spells the map as the wire does."""
    hoist = _row("small_while_loop_default", 0.0)
    hoist = _row_with(hoist, "small_while_loop_65536", 1.0)
    fn, args = _chaos()
    service = FakeService(_answer(hoist))
    with service.client() as client:
        f = jit(fn, client=client, model=MODEL, target=TARGET)
        out = f(*args)
    report = f.report
    assert report is not None and report.source == "best_known", report.reason
    assert report.compiler_options == {
        xla_cpu2.EXTRA_KEY: f"{xla_cpu2.THRESHOLD_KEY}=65536"
    }
    assert report.outputs is not None and report.outputs.ok
    np.testing.assert_array_equal(np.asarray(out), _plain(fn, args))


def test_an_older_servers_xla_cpu_1_row_is_upgraded_and_applied() -> None:
    """A 17-value row (``xla_cpu/1``, from a server that predates ``xla_cpu/2``):
    the same config at the threshold's default; a refutation sends 20 values."""
    old = xla_cpu2.downgrade(SAME)
    assert old is not None and old.shape == (xla_cpu.WIDTH,)
    fn, args = _chaos()
    service = FakeService(_answer(tuple(float(v) for v in old), _options(SAME)))
    with service.client() as client:
        f = jit(fn, client=client, model=MODEL, target=TARGET)
        f(*args)
    assert f.report is not None and f.report.source == "best_known", f.report.reason
    assert f.report.compiler_options == _options(SAME)

    older = xla_cpu2.downgrade(DIFFERS)
    assert older is not None
    service = FakeService(_answer(tuple(float(v) for v in older), _options(DIFFERS)))
    with service.client() as client:
        g = jit(fn, client=client, model=MODEL, target=TARGET)
        g(*args)
    assert g.report is not None and g.report.source == "default"
    (sent,) = service.decisions
    assert sent["refuted"]["config"] == list(DIFFERS)
    assert len(sent["config"]) == xla_cpu2.WIDTH


def test_a_mismatch_with_donated_arguments_still_returns_the_default() -> None:
    """Both executables run on the call: the default gets copies of donated
    arguments, so neither run finds its buffers consumed."""
    fn, args = _chaos()
    default = _plain(fn, args)
    service = FakeService(_answer(DIFFERS))
    with service.client() as client:
        f = jit(fn, client=client, model=MODEL, target=TARGET, donate_argnums=1)
        out = f(args[0], args[1].copy())
    assert f.report is not None and f.report.source == "default"
    np.testing.assert_array_equal(np.asarray(out), default)


def test_a_failed_report_leaves_the_default_and_raises_nothing() -> None:
    fn, args = _chaos()
    service = FakeService(_answer(DIFFERS), decision_status=500)
    with service.client() as client:
        f = jit(fn, client=client, model=MODEL, target=TARGET)
        out = f(*args)
    np.testing.assert_array_equal(np.asarray(out), _plain(fn, args))
    assert f.report is not None and f.report.source == "default"
    assert "not reported to the service" in f.report.reason
    assert len(service.decisions) == 1


def _tiny() -> tuple[Any, tuple[Any, ...]]:
    import jax.numpy as jnp

    def fn(x: Any) -> Any:
        return jnp.tanh(x * 2.0 + 1.0).sum()

    return fn, (jnp.linspace(-1.0, 1.0, 64, dtype=jnp.float32),)


@pytest.mark.parametrize("row", [SAME, tuple(float(v) for v in xla_cpu2.default_row())])
def test_free_form_options_in_the_answer_are_never_compiled(
    row: tuple[float, ...], tmp_path: Path
) -> None:
    """The answer names a valid row but sends ``xla_dump_to``: jit compiles the
    row's options only (nothing is dumped)."""
    import jax

    fn, args = _tiny()
    probe = tmp_path / "probe"  # the premise: this option dumps when compiled
    jax.jit(fn).lower(*args).compile(compiler_options={"xla_dump_to": str(probe)})
    assert probe.exists()

    dump = tmp_path / "dump"
    sent = {"xla_dump_to": str(dump), **_options(row)}
    service = FakeService(_answer(row, sent))
    with service.client() as client:
        f = jit(fn, client=client, model=MODEL, target=TARGET)
        f(*args)
    assert f.report is not None and f.report.source == "best_known", f.report.reason
    assert f.report.compiler_options == _options(row)
    assert not dump.exists()


@pytest.mark.parametrize(
    "row",
    [
        (1.0,) * xla_cpu2.WIDTH,  # three scheduler bits
        (1.0,) * xla_cpu.WIDTH,  # an xla_cpu/1 row (upgraded), three scheduler bits
        (1.0, 0.0),  # the wrong width
        # valid bits, but a pair the spec never samples (it crashed XLA)
        tuple(
            float(v)
            for v in np.maximum(
                np.asarray(_row("ynn_eltwise", 1.0)),
                np.asarray(_row("disable_algsimp", 1.0)),
            )
        ),
    ],
)
def test_an_invalid_row_is_no_decision(row: tuple[float, ...]) -> None:
    fn, args = _tiny()
    service = FakeService(_answer(row, {"xla_cpu_enable_fast_math": True}))
    with service.client() as client:
        f = jit(fn, client=client, model=MODEL, target=TARGET)
        out = f(*args)
    report = f.report
    assert report is not None and report.source == "default"
    assert report.compiler_options == {} and INVALID_ROW in report.reason
    assert float(out) == pytest.approx(float(_plain(fn, args)))
    assert service.decisions == []


# -- against a real ``costmodel serve`` ----------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """``costmodel serve`` requiring writer tokens (SQLite, empty) and one token
    allowed this CPU's target."""
    from xla_costmodel.harness import ServiceServer
    from xla_costmodel.studies.real_fleet import COMMAND
    from xla_costmodel.studies.reuse import token

    workdir = tmp_path_factory.mktemp("served")
    env = {
        "COSTMODEL_DATA_DIR": str(workdir / "data"),
        "COSTMODEL_FEEDBACK_AUTH": "token",
        "COSTMODEL_LOG_LEVEL": "WARNING",
    }
    with ServiceServer(workdir, env, argv=[*COMMAND, "serve"]) as server:
        yield server.url, token(workdir, "verifier")


def test_a_refuted_row_is_no_longer_served(served: tuple[str, str]) -> None:
    """A writer stores a measured decision for ``DIFFERS``; a fresh ``jit`` finds
    its outputs differ, returns the default's, and reports it; the service then
    stops answering that row for the program."""
    import jax

    from xla_costmodel.clients import Decision, Hlo, prepare_graph
    from xla_costmodel.clients.xla.reuse import fingerprint

    url, secret = served
    fn, args = _chaos()
    lowered = jax.jit(fn).lower(*args)
    graph = prepare_graph(Hlo(lowered.as_text(dialect="hlo"), configurable=None))
    target, compiler = machine.target(), machine.compiler()
    pairs = tuple((1_000_000 + 997 * i, 800_000 + 991 * i) for i in range(8))
    with CostModelClient(url, token=secret) as writer:
        writer.feedback(
            MODEL,
            graph,
            np.asarray(pairs[0], np.int64),
            configs=np.stack([xla_cpu2.default_row(), np.asarray(DIFFERS, np.float32)]),
            target=target,
            compiler=compiler,
        )
        writer.record_decision(
            MODEL,
            Decision(
                graph_id=graph.graph_id,
                config=DIFFERS,
                paired_runtimes_ns=pairs,
                budget=8,
                strategy="model",
                kept_default=False,
                target=target,
                compiler=compiler,
                hlo_fingerprint=fingerprint(lowered),
            ),
        )
        best = writer.best(
            MODEL, graph_id=graph.graph_id, target=target, compiler=compiler
        )
        assert best is not None and best.config == DIFFERS  # served before

    f = jit(fn, server=url, token=secret)
    out = f(*args)
    report = f.report
    assert report is not None and report.source == "default", report.reason
    assert report.reason.endswith("; reported to the service"), report.reason
    np.testing.assert_array_equal(np.asarray(out), _plain(fn, args))
    with CostModelClient(url) as reader:
        after = reader.best(
            MODEL, graph_id=graph.graph_id, target=target, compiler=compiler
        )
    assert after is None or after.config != DIFFERS


def test_costmodel_best_shows_the_rows_options_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``costmodel best`` prints the row's options, never the sent ones, warns on
    stderr when they differ, and escapes what the service sent."""
    from xla_costmodel.clients.wire import parse_best
    from xla_costmodel.clients.xla.best_cli import _show

    sent = {"xla_dump_to": "/tmp/x\r\x1b[2Koptions: (default)"}
    body = {**_answer(SAME, sent), "target": "cpu\x1b[2K", "compiler": "jaxlib\x85"}
    known = parse_best(httpx.Response(200, json=body))
    _show(known, machine.compiler(), json_=False)
    out, err = capsys.readouterr()
    assert "options: -cse\n" in out and "xla_dump_to" not in out
    assert "cpu\\x1b[2K" in out and "jaxlib\\x85" in out
    assert all(" " <= c <= "~" for c in out.replace("\n", ""))
    assert (
        err.startswith("warning: the service sent compiler_options") and "\r" not in err
    )
    _show(known, machine.compiler(), json_=True)
    out, _ = capsys.readouterr()
    assert json.loads(out)["compiler_options"] == _options(SAME)
