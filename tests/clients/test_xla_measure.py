"""The tuner's measuring primitives (also the collector's): the crash journal of
``probe.py`` (which entry a crashed process left open), the timing protocol of
``measure.py``, and the supervisor of ``isolate.py`` that restarts a crashed worker."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from xla_costmodel.clients.xla import isolate
from xla_costmodel.clients.xla.measure import TimingProtocol, disagreement, measure
from xla_costmodel.clients.xla.probe import Journal


def test_an_entry_begun_but_never_ended_is_a_crash(tmp_path: Path) -> None:
    path = tmp_path / ".p.journal"
    first = Journal(path)
    first.mark("attempt")
    for k in (0, 1):
        first.mark("c", k)
        first.mark("C", k)
    first.mark("r", 0)
    first.mark("R", 0)
    first.mark("r", 1)  # the process died running entry 1
    second = Journal(path)
    assert second.crashed() == {1} and second.attempts() == 1
    second.mark("attempt")
    second.mark("c", 0)  # ... and this one compiling entry 0
    third = Journal(path)
    assert third.crashed() == {0, 1} and third.attempts() == 2
    third.remove()
    assert not path.exists() and Journal(path).crashed() == set()


def test_measure_visits_every_runner_each_round_in_shuffled_order() -> None:
    visits: list[int] = []
    runners = [lambda k=k: visits.append(k) for k in range(4)]
    ticks = iter(range(0, 10**6, 1000))
    protocol = TimingProtocol(runs=2, min_rounds=3, max_rounds=3)
    m = measure(runners, protocol, np.random.default_rng(0), clock=lambda: next(ticks))
    assert m.round_min_ns.shape == (4, 3) and m.rounds == 3
    assert (m.round_min_ns == 1000).all() and (m.median_ns == 1000).all()
    # 3 rounds x 4 runners x (1 warm + 2 timed) visits, each runner 3 x 3 times.
    assert sorted(visits) == sorted(list(range(4)) * 9)
    orders = [visits[r * 12 : (r + 1) * 12 : 3] for r in range(3)]
    assert all(sorted(o) == [0, 1, 2, 3] for o in orders)


def test_disagreement_of_controls() -> None:
    assert disagreement([100, 105, 110]) == pytest.approx(0.1)
    assert disagreement([100]) == 0.0


def test_the_supervisor_restarts_a_crashed_worker_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    codes = iter([-11, -11, 0, 3])
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, next(codes))

    monkeypatch.setattr(isolate.subprocess, "run", fake_run)
    lines: list[str] = []
    assert isolate.supervise(["collect", "--worker"], 5, lines.append) == 0
    assert len(calls) == 3 and calls[0][-2:] == ["collect", "--worker"]
    assert lines == [
        "worker killed by signal 11 (start 1); restarting",
        "worker killed by signal 11 (start 2); restarting",
    ]
    assert (
        isolate.supervise(["collect"], 5, lines.append) == 3
    )  # a Python error: no retry
    codes = iter([-11] * 3)
    assert isolate.supervise(["collect"], 2, lines.append) == 1  # restarts exhausted


def test_the_probe_checks_each_first_output_against_the_default(
    tmp_path: Path,
) -> None:
    """``collect``'s probe (``compile_and_probe``) scores every entry with
    ``outputs.compare``: fast math without NaN semantics turns a NaN-guarded sum
    (7.85) into NaN, an infinite difference, where the old check read 0.0."""
    import jax
    import jax.numpy as jnp

    from xla_costmodel.clients.xla.probe import CONTROL_OPTIONS, compile_and_probe

    def guarded(x: jax.Array) -> jax.Array:
        return jnp.where(jnp.isnan(x), 0.0, x).sum()

    x = jnp.array([1.0, jnp.nan, 2.5, 4.35, jnp.nan], jnp.float32)
    fast = {"xla_cpu_enable_fast_math": True, "xla_cpu_fast_math_honor_nans": False}
    entries = compile_and_probe(
        jax.jit(guarded).lower(x),
        [{}, fast, CONTROL_OPTIONS[0]],
        (x,),
        Journal(tmp_path / ".probe.journal"),
        None,
    )
    assert [e.max_rel_diff for e in entries] == [0.0, float("inf"), 0.0]
    bad = entries[1].outputs
    assert bad is not None and not bad.ok and "NaN" in bad.reason
