"""A spec with an option no jaxlib has (issue 35's done-when, "Compiler versions"):
``tune`` and ``jit`` run, never try it, treat a decision setting it as stale, and
say so once.

The spec is ``xla_cpu/2`` plus one made-up column (an ``xla_backend_extra_options``
key, or a top-level option), registered under its own name in
``compiler_space.SPECS`` (the registry every client tool looks a spec name up in)
and named by ``TuneConfig.spec`` / ``jit(spec=...)``. ``tune`` runs in this process
(the child process of ``costmodel tune`` would look the name up in a registry
without it); everything is real but the service, an httpx ``MockTransport`` fake.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest

from xla_costmodel.clients import CostModelClient, RetryPolicy
from xla_costmodel.clients.xla import compiler_space, jit
from xla_costmodel.clients.xla.dropin import STALE_ROW
from xla_costmodel.clients.xla.measure import TimingProtocol
from xla_costmodel.clients.xla.tune import TuneConfig, tune
from xla_costmodel.tpugraphs import machine, xla_cpu2
from xla_costmodel.tpugraphs.xla_cpu import F32
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions

EXTRA = "xla_cpu_made_up_option_for_tests"
TOP = "xla_made_up_option_for_tests"
COLUMN = "made_up_for_tests"
QUICK = TimingProtocol(runs=1, min_rounds=2, max_rounds=2, budget_s=1.0)


@dataclass(frozen=True)
class MadeUp:
    """``xla_cpu/2`` plus ``COLUMN``: the map entry ``EXTRA=1`` (or the top-level
    ``TOP=True``); sampled in about half the rows past the default."""

    SPEC: str
    top_level: bool = False
    COLUMNS: tuple[str, ...] = (*xla_cpu2.COLUMNS, COLUMN)

    def default_row(self) -> F32:
        return np.append(xla_cpu2.default_row(), np.float32(0.0))

    def to_options(self, row: npt.ArrayLike) -> CompilerOptions:
        arr = np.asarray(row, np.float32)
        if arr.shape != (len(self.COLUMNS),) or arr[-1] not in (0.0, 1.0):
            raise ValueError(f"a {self.SPEC} row has {len(self.COLUMNS)} bits")
        base = xla_cpu2.to_options(arr[:-1])
        top, extra = dict(base.compiler_options), dict(base.extra_options)
        if arr[-1] and self.top_level:
            top[TOP] = True
        elif arr[-1]:
            extra[EXTRA] = "1"
        return CompilerOptions(compiler_options=top, extra_options=extra)

    def sample(self, n: int, seed: int) -> F32:
        bits = np.random.default_rng([seed, 35]).random(n) < 0.5
        bits[0] = False  # row 0 stays the default
        rows = xla_cpu2.sample(n, seed)
        return np.hstack([rows, bits[:, None].astype(np.float32)])

    def excluded(self, row: npt.ArrayLike) -> str | None:
        return xla_cpu2.excluded(np.asarray(row, np.float32)[:-1])


def _register(monkeypatch: pytest.MonkeyPatch, spec: MadeUp) -> str:
    monkeypatch.setitem(compiler_space.SPECS, spec.SPEC, spec)
    return spec.SPEC


def _with(row: F32, made_up: float) -> tuple[float, ...]:
    return (*(float(v) for v in row), made_up)


SAME = xla_cpu2.default_row()
SAME[xla_cpu2.COLUMNS.index("disable_cse")] = 1.0


def _tiny() -> tuple[Any, tuple[Any, ...]]:
    import jax.numpy as jnp

    def fn(w: Any, x: Any) -> Any:
        return jnp.tanh(x @ w).sum(axis=-1)

    return fn, (jnp.ones((32, 32), jnp.float32) / 32, jnp.ones((8, 32), jnp.float32))


class Service:
    """``GET /v1/best`` answers a decision for ``config`` (404 when None); every
    other request 404s (the service cannot rank: the tuner keeps the default)."""

    def __init__(self, config: tuple[float, ...] | None) -> None:
        self.config = config
        self.paths: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        if request.url.path == "/v1/best" and self.config is not None:
            return httpx.Response(200, json=_answer(self.config))
        error = {"error": {"code": "not_found", "message": "no", "field": None}}
        return httpx.Response(404, json=error)

    def client(self) -> CostModelClient:
        return CostModelClient(
            "http://service.test",
            transport=httpx.MockTransport(self),
            retry=RetryPolicy(max_attempts=1),
            timeout=2.0,
        )


def _answer(config: tuple[float, ...]) -> dict[str, Any]:
    return {
        "graph_id": "cd" * 32,
        "target": "test-made-up-cpu",
        "config": list(config),
        "compiler_options": {},
        "speedup": 1.3,
        "speedup_low": 1.2,
        "p_value": 0.001,
        "writers": 2,
        "decided_at": "2026-11-28T14:00:00+00:00",
        "compiler": machine.compiler(),
        "stale": False,
        "kept_default": False,
    }


def _tried(report: Any) -> list[dict[str, Any]]:
    return [m.compiler_options for m in (*report.measured, *report.failed)]


def _sets_it(options: dict[str, Any]) -> bool:
    return TOP in options or EXTRA in str(options.get(xla_cpu2.EXTRA_KEY, ""))


def test_tune_never_tries_the_made_up_option_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = MadeUp(SPEC="xla_cpu/made-up-tune")
    name = _register(monkeypatch, spec)
    assert spec.sample(8, 0)[:, -1].sum() >= 2  # the premise: the sampler sets it
    cfg = TuneConfig(
        budget=4,
        strategy="random",
        candidates=8,
        protocol=QUICK,
        crash_dir=tmp_path,
        spec=name,
    )
    fn, args = _tiny()
    with caplog.at_level(logging.WARNING, logger=compiler_space.__name__):
        reports = [tune(fn, args, cfg) for _ in range(2)]
    logged = [r.getMessage() for r in caplog.records if COLUMN in r.getMessage()]
    assert len(logged) == 1, logged  # the process says it once
    for report in reports:
        assert report.measured, report.reason  # it ran
        assert not any(_sets_it(o) for o in _tried(report)), _tried(report)
        assert report.config is None or report.config[-1] == 0.0
        (note,) = [n for n in report.notes if COLUMN in n]  # each run says it once
        assert "never tried" in note and "sampled config(s) left out" in note


@pytest.mark.parametrize("top_level", [False, True])
def test_a_decision_setting_it_is_stale_for_jit_and_said_once(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    top_level: bool,
) -> None:
    spec = MadeUp(SPEC=f"xla_cpu/made-up-jit-{top_level}", top_level=top_level)
    name = _register(monkeypatch, spec)
    fn, args = _tiny()
    service = Service(_with(SAME, 1.0))
    with caplog.at_level(logging.WARNING), service.client() as client:
        reports = []
        for _ in range(2):  # two wrapped functions, one process
            f = jit(fn, client=client, target="test-made-up-cpu", spec=name)
            np.testing.assert_allclose(f(*args), fn(*args), rtol=1e-6)
            reports.append(f.report)
    for report in reports:
        assert report is not None and report.source == "default"
        assert STALE_ROW in report.reason and COLUMN in report.reason
        assert report.compiler_options == {}
    said = [r.getMessage() for r in caplog.records if STALE_ROW in r.getMessage()]
    assert len(said) == 1, said
    # A decision of the same spec that leaves it unset is applied.
    service.config = _with(SAME, 0.0)
    with service.client() as client:
        g = jit(fn, client=client, target="test-made-up-cpu", spec=name)
        g(*args)
    assert g.report is not None, "no report"
    assert g.report.source == "best_known", g.report.reason
    assert g.report.compiler_options == xla_cpu2.to_options(SAME).flat()


def test_tune_reuse_takes_a_decision_setting_it_for_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``tune --reuse``: the fleet's decision sets the made-up option: never
    compiled nor verified, a note says why, the run goes on (this fake cannot
    rank: the default stays)."""
    name = _register(monkeypatch, MadeUp(SPEC="xla_cpu/made-up-reuse"))
    fn, args = _tiny()
    service = Service(_with(SAME, 1.0))
    cfg = TuneConfig(
        budget=2, candidates=8, protocol=QUICK, crash_dir=tmp_path, spec=name
    )
    with service.client() as client:
        report = tune(fn, args, cfg, client=client)
    assert "/v1/best" in service.paths
    assert report.verified is None and not report.reused and report.refuted is None
    assert not any(_sets_it(o) for o in _tried(report))
    (note,) = [n for n in report.notes if "fleet's decision" in n]
    assert "sets options this jaxlib rejects" in note and "ignored" in note
    assert report.compiler_options == {}
    json.dumps(report.to_json())  # still a report like any other


def test_an_unknown_spec_name_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="unknown spec"):
        TuneConfig(spec="xla_cpu/no-such-spec")


def test_costmodel_best_prints_a_decision_setting_it_as_stale(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``costmodel best`` judges rows with the default spec's name: registered
    under it, the made-up spec's row is shown stale here, never a crash."""
    from xla_costmodel.clients.wire import parse_best
    from xla_costmodel.clients.xla import spec_rows
    from xla_costmodel.clients.xla.best_cli import _show

    _register(monkeypatch, MadeUp(SPEC=spec_rows.SPEC))
    known = parse_best(httpx.Response(200, json=_answer(_with(SAME, 1.0))))
    _show(known, machine.compiler(), json_=False)
    out, err = capsys.readouterr()
    assert "options: none: STALE here" in out
    assert err.startswith("warning: the decided row sets options this jaxlib")
    assert COLUMN in err
    _show(known, machine.compiler(), json_=True)
    out, _ = capsys.readouterr()
    assert json.loads(out)["compiler_options"] is None
