"""``tune``: choose XLA:CPU compiler options for a real JAX program with the service.

    from xla_costmodel.clients import CostModelClient
    from xla_costmodel.clients.xla.tune import autotuned, tune

    with CostModelClient("http://127.0.0.1:8000") as client:
        report = tune(fn, args, budget=8, client=client)   # a TuneReport
        fast = autotuned(fn, args, budget=8, client=client)
    fast(*args)              # the executable compiled with fast.report.compiler_options

Strategy ``"model"``: lower ``jax.jit(fn)`` once and featurize its pre-optimization
HLO (one row configures the whole program: no configurable nodes); sample
``candidates`` option rows (``xla_cpu.sample``, row 0 the default). The rounds
follow ``policy.plan``: the first measures the head of the service's *portfolio*
(configs that won on other programs of this target, then spread-out ones), later
ones the top of its ranking (adapted to this graph's measurements and to the
target's knowledge), with some exploration left in the middle. Each round compiles
its picks and measures them beside separately compiled copies of the default (the
controls) with ``measure.py``'s protocol (compile first, shuffled round-robin rounds,
min per round, median over rounds), then sends the runtimes, the default's included,
as feedback: the service adapts its ranking of this graph, and its knowledge of the
target, for the next round and for every later program. The ``budget`` K counts
configs compiled and measured (a config that fails to compile counts too).

Choosing (``decide.py``): the ``confirm`` configs that were fastest relative to the
default measured beside them are timed again against the default in ``repeats``
interleaved pairs (a fresh measurement: the winner's luck in the first one does not
count), and the fastest one is kept only if a one-sided Mann-Whitney test says it is
faster at level ``alpha`` *and* its median speedup exceeds ``1 + min_gain``.
Otherwise the default stays (``compiler_options == {}``); ``default_ms`` and
``best_ms`` are from those pairs.

No service (``client=None``, unreachable, no such model, HLO it cannot featurize): the
default, measured the same way, with ``reason`` saying why; a service lost mid-run
ends the rounds and the choice is made among what was measured. ``"random"``: K rows
drawn from the same candidates, same protocol, the service never asked (the
baseline; its picks cannot be steered by feedback, nor can they feed the service's
view of the graph). A config whose output differs from the default's beyond
``max_rel_diff`` counts as failed.

A config that crashes XLA (a segfault compiling it or running it the first time)
kills the calling process: nothing can catch that in process. The program's crash
journal (under ``crash_dir``) remembers it, and the next ``tune`` of the same
program leaves it out (``notes`` says so); ``costmodel tune`` runs the tuning in a
child process and restarts it by itself. jax is imported when ``tune`` runs, never
at import.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.errors import CostModelError
from xla_costmodel.clients.hlo import Hlo
from xla_costmodel.clients.payloads import prepare_graph
from xla_costmodel.clients.xla.measure import TimingProtocol
from xla_costmodel.clients.xla.pickers import ModelPicker, Picker, RandomPicker
from xla_costmodel.clients.xla.tune_rounds import (
    TUNE_PROTOCOL,
    Bench,
    Log,
    Measured,
    Options,
    Rounds,
    Rows,
    Strategy,
    TuneConfig,
    default_crash_dir,
)
from xla_costmodel.tpugraphs import machine, xla_cpu

__all__ = ["Autotuned", "TuneConfig", "TuneReport", "autotuned", "tune"]


@dataclass
class TuneReport:
    """What ``tune`` measured and chose; ``to_json()`` is a JSON-ready dict.

    ``speedup`` = ``default_ms / best_ms`` of the chosen options (1.0 when the
    default stays). ``measured``: one ``{"compiler_options", "ms", "vs_default",
    "round"}`` per config measured in the rounds (``vs_default``: its runtime / the
    default's in the same measurement), plus ``final_ms`` for those measured again to
    choose; ``failed``: ``{"compiler_options", "error"}`` per config that did not
    compile. ``rounds``: per round, configs picked and measured, ``adapted`` (the
    service's answer: measurements of this graph that shaped its ranking; None when
    not asked), ``feedback_stored``, the default's ms and the controls' noise.
    """

    default_ms: float
    best_ms: float
    speedup: float
    compiler_options: Options
    measured: list[dict[str, Any]]
    failed: list[dict[str, Any]]
    strategy: str
    budget: int
    candidates: int
    seed: int
    noise: float  # the controls' worst disagreement over the run (informational)
    rounds: list[dict[str, Any]]
    target: str
    model: str
    model_version: str | None
    service_answered: bool  # the service ranked at least once
    reason: str  # why these options (or why the default)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Autotuned:
    """``autotuned``'s answer: call it like ``fn``'s compiled executable (same argument
    shapes and dtypes as the ``args`` tuned on); ``report`` says what was chosen."""

    compiled: Any  # jax.stages.Compiled, built with report.compiler_options
    report: TuneReport

    def __call__(self, *args: Any) -> Any:
        return self.compiled(*args)


def tune(
    fn: Callable[..., Any],
    args: Sequence[Any],
    budget: int = 8,
    *,
    client: CostModelClient | None = None,
    model: str = "xla_cpu",
    strategy: Strategy = "model",
    seed: int = 0,
    rounds: int | None = None,
    candidates: int = 256,
    target: str | None = None,
    min_gain: float = 0.02,
    protocol: TimingProtocol = TUNE_PROTOCOL,
    crash_dir: Path | None = None,
    progress: Log | None = None,
) -> TuneReport:
    """Tune the XLA:CPU compiler options of ``fn(*args)`` (see the module docstring).

    ``budget`` configs are compiled and measured in ``rounds`` rounds (default
    ``min(3, budget)``), picked from ``candidates`` sampled with ``seed``;
    ``client`` (strategy ``"model"``) ranks them with ``model`` for ``target``
    (default: this CPU, ``machine.target()``). ``crash_dir`` keeps the crash
    journals (``tune_rounds.Bench``; default ``~/.cache/costmodel/tune``).
    ``progress`` receives a line per step.
    """
    cfg = TuneConfig(
        budget,
        model,
        strategy,
        seed,
        rounds,
        candidates,
        target,
        min_gain=min_gain,
        protocol=protocol,
        crash_dir=crash_dir,
    )
    return _tune(fn, tuple(args), cfg, client, progress)[0]


def autotuned(
    fn: Callable[..., Any],
    args: Sequence[Any],
    budget: int = 8,
    *,
    client: CostModelClient | None = None,
    progress: Log | None = None,
    **config: Any,
) -> Autotuned:
    """``tune`` (``config``: its keywords, or any ``TuneConfig`` field), then the
    executable it measured for the chosen options, callable like ``fn``, with the
    report attached: ``autotuned(...).report``."""
    cfg = TuneConfig(budget=budget, **config)
    report, compiled = _tune(fn, tuple(args), cfg, client, progress)
    return Autotuned(compiled, report)


def _tune(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    cfg: TuneConfig,
    client: CostModelClient | None,
    progress: Log | None,
) -> tuple[TuneReport, Any]:
    """The report and the executable of the chosen options."""
    import jax

    started = time.monotonic()
    plan = cfg.plan()
    rows = xla_cpu.sample(cfg.candidates, cfg.seed)
    target = cfg.target or machine.target()
    lowered = jax.jit(fn).lower(*args)
    text = lowered.as_text(dialect="hlo")
    crashes = cfg.crash_dir or default_crash_dir()
    crash_path = crashes / f"{hashlib.sha1(text.encode()).hexdigest()[:16]}.journal"
    with tempfile.TemporaryDirectory(prefix="costmodel-tune-") as workdir:
        bench = Bench(lowered, args, cfg, Path(workdir), crash_path)
        run = Rounds(bench, rows, progress or _quiet)
        picker, why = _picker(cfg, client, text, rows, target)
        if picker is not None:
            why = run.play(picker, plan)
        chosen, default_ns, noise = run.decide()
    best_ns = default_ns if chosen is None else chosen.final_ns or default_ns
    report = TuneReport(
        default_ms=default_ns / 1e6,
        best_ms=best_ns / 1e6,
        speedup=default_ns / best_ns,
        compiler_options={} if chosen is None else xla_cpu.to_options(rows[chosen.row]),
        measured=[_entry(m, rows) for m in run.measured],
        failed=run.failed,
        strategy=cfg.strategy,
        budget=cfg.budget,
        candidates=cfg.candidates,
        seed=cfg.seed,
        noise=noise,
        rounds=run.rounds,
        target=target,
        model=cfg.model,
        model_version=None if picker is None else picker.model_version,
        service_answered=picker is not None and picker.answered,
        reason=why or _reason(chosen, default_ns, best_ns, run.measured, cfg),
        notes=run.notes,
        seconds=time.monotonic() - started,
    )
    executable = run.bench.controls[0] if chosen is None else chosen.executable
    return report, executable


def _quiet(line: str) -> None:
    pass


def _picker(
    cfg: TuneConfig,
    client: CostModelClient | None,
    hlo_text: str,
    rows: Rows,
    target: str,
) -> tuple[Picker | None, str]:
    """The picker of ``cfg.strategy``, or None and why the default stays."""
    if cfg.strategy == "random":
        return RandomPicker(np.random.default_rng([cfg.seed, 1])), ""
    if client is None:
        return None, "no client given: kept the default"
    try:
        graph = prepare_graph(Hlo(hlo_text, configurable=None))
    except CostModelError as exc:
        return None, f"the HLO could not be featurized ({exc}): kept the default"
    session = client.session(cfg.model, target=target)
    return ModelPicker(session, graph, rows, cfg.deadline), ""


def _reason(
    chosen: Measured | None,
    default_ns: int,
    best_ns: int,
    measured: list[Measured],
    cfg: TuneConfig,
) -> str:
    rule = f"Mann-Whitney p < {cfg.alpha} and over {cfg.min_gain:.0%} faster"
    if chosen is not None:
        p = chosen.verdict.p_value if chosen.verdict else float("nan")
        return (
            f"{default_ns / best_ns:.3f}x faster than the default in "
            f"{cfg.repeats} interleaved pairs (p = {p:.3g}; kept when {rule})"
        )
    if not measured:
        return "no config compiled: kept the default"
    return f"no config was faster than the default ({rule}): kept the default"


def _entry(m: Measured, rows: Rows) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "compiler_options": xla_cpu.to_options(rows[m.row]),
        "ms": m.ns / 1e6,
        "vs_default": m.vs_default,
        "round": m.round,
    }
    if m.final_ns is not None:
        entry["final_ms"] = m.final_ns / 1e6
    if m.verdict is not None:
        entry["final_speedup"] = m.verdict.speedup
        entry["p_value"] = m.verdict.p_value
    return entry
