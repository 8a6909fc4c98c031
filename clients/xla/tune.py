"""``tune``: choose XLA:CPU compiler options for a real JAX program with the service.

    from xla_costmodel.clients import CostModelClient
    from xla_costmodel.clients.xla.tune import TuneConfig, autotuned, tune

    config = TuneConfig(budget=8)     # every knob, checked once
    with CostModelClient("http://127.0.0.1:8000") as client:
        report = tune(fn, args, config, client=client)   # a TuneReport
        fast = autotuned(fn, args, config, client=client)
    fast(*args)              # the executable compiled with fast.report.compiler_options

One ``TuneConfig`` holds every knob; ``costmodel tune`` builds it once from its
options, ``jit`` from its ``tune_kwargs``. A run is a chain of steps, each
returning a frozen value that the next takes: ``prepare`` (the program as the
service knows it, the fleet's decision: ``Prepared``), ``check_known`` (that
decision verified: ``Checked``), ``Rounds.play`` (``Played``), ``Rounds.decide``
and ``Rounds.confirm`` (the kept ``Candidate``, together an ``Outcome``), ``tell``
(``Told``), and ``build_report`` (the ``TuneReport``). ``Rounds`` is the run's
ledger of what was measured; nothing else is written by more than one step.

Strategy ``"model"``: lower ``jax.jit(fn)`` once and featurize its pre-optimization
HLO (one row configures the whole program: no configurable nodes); sample
``candidates`` option rows of ``cfg.spec`` (``xla_cpu/2``: ``spec_rows.candidates``,
row 0 the default), leaving out those that set an option this jaxlib rejects
(``notes`` names the options); each is compiled as ``compile_with`` compiles it.
The rounds follow ``policy.plan``: the first measures the head of the service's
*portfolio* (configs that won on other programs of this target, then spread-out
ones), later ones the top of its ranking (adapted to this graph's measurements and
to the target's knowledge), with some exploration left in the middle. Each round compiles
its picks and measures them beside separately compiled copies of the default (the
controls) with ``measure.py``'s protocol (compile first, shuffled round-robin rounds,
min per round, median over rounds), then sends the runtimes, the default's included,
as feedback: the service adapts its ranking of this graph, and its knowledge of the
target, for the next round and for every later program. The ``budget`` K counts
configs compiled and measured (a config that fails to compile counts too).

Choosing (``decide.py``): the ``confirm`` configs that were fastest relative to the
default measured beside them are timed again against the default in interleaved
pairs (a fresh measurement: the winner's luck in the first one does not count), as
many as ``decide.Sequential`` needs (``repeats`` to ``max_pairs``; ``pairs`` in the
report counts them): each is a finalist only if a one-sided signed-rank test says
it is faster at level ``alpha`` *and* its median speedup exceeds ``1 + min_gain``.
The fastest finalist is then confirmed in a fresh process (``confirm.py``: the
default twice and the finalist, ``confirm_rounds`` shuffled rounds on every CPU
and on one), where the conditions of this run (its load, its other executables)
cannot reach it; it is kept only if it holds there, and those pairs are what the
decision sends and what ``speedup``, ``default_ms`` and ``best_ms`` report
(``tpugraphs.paired.summarize``). Otherwise the default stays
(``compiler_options == {}``) and ``notes`` says why. ``load`` records the load
averages at the start and end and both processes' controls.

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
program leaves it out (``notes`` says so); ``costmodel tune`` and ``jit(...,
budget > 0)`` therefore run the tuning in a child process (``isolate.py``) and
restart it by themselves. jax is imported when ``tune`` runs, never at import.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.xla import policy, spec_rows
from xla_costmodel.clients.xla.confirm import Confirmation, Confirmer
from xla_costmodel.clients.xla.pickers import ModelPicker, Picker, RandomPicker
from xla_costmodel.clients.xla.tune_bench import Bench
from xla_costmodel.clients.xla.tune_config import (
    Log,
    Scope,
    TuneConfig,
    default_crash_dir,
)
from xla_costmodel.clients.xla.tune_fleet import (
    Checked,
    Outcome,
    Prepared,
    Told,
    check_known,
    prepare,
    tell,
    with_row,
)
from xla_costmodel.clients.xla.tune_report import Load, TuneReport, build_report
from xla_costmodel.clients.xla.tune_rounds import Played, Rounds
from xla_costmodel.tpugraphs import machine

__all__ = ["Autotuned", "TuneConfig", "TuneReport", "autotuned", "tune"]


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
    config: TuneConfig | None = None,
    *,
    client: CostModelClient | None = None,
    progress: Log | None = None,
) -> TuneReport:
    """Tune the XLA:CPU compiler options of ``fn(*args)`` (see the module docstring).

    ``config`` holds every knob (``TuneConfig``; default ``TuneConfig()``: budget 8):
    ``budget`` configs are compiled and measured in ``rounds`` rounds, picked from
    ``candidates`` sampled with ``seed``; ``client`` (strategy ``"model"``) ranks
    them with ``model`` for ``target`` (default: this CPU, ``machine.target()``).
    With ``reuse``, what the fleet decided for this program (by ``min_writers``
    writers at least) is verified first (``reuse.py``). ``progress`` receives a
    line per step.
    """
    return run_tuning(fn, tuple(args), config or TuneConfig(), client, progress)[0]


def autotuned(
    fn: Callable[..., Any],
    args: Sequence[Any],
    config: TuneConfig | None = None,
    *,
    client: CostModelClient | None = None,
    progress: Log | None = None,
) -> Autotuned:
    """``tune``, then the executable it measured for the chosen options, callable
    like ``fn``, with the report attached: ``autotuned(...).report``."""
    cfg = config or TuneConfig()
    report, compiled = run_tuning(fn, tuple(args), cfg, client, progress)
    return Autotuned(compiled, report)


def run_tuning(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    cfg: TuneConfig,
    client: CostModelClient | None,
    progress: Log | None,
    *,
    named: tuple[str, str] | None = None,
) -> tuple[TuneReport, Any]:
    """``tune``: the report and the executable of the chosen options. ``named``:
    the program's HLO text and fingerprint as the caller lowered it (a child
    tuning a shipped program, ``jit_tuning.tune_job``), else this lowering's."""
    import jax

    started, load_start = time.monotonic(), os.getloadavg()
    scope = Scope(cfg, cfg.target or machine.target(), machine.compiler() or "unknown")
    lowered = jax.jit(fn).lower(*args)
    text = lowered.as_text(dialect="hlo") if named is None else named[0]
    found = spec_rows.candidates(
        spec_rows.spec_named(cfg.spec),
        cfg.candidates,
        cfg.seed,
        spec_rows.has_loops(text),
    )
    rows = found.rows
    prepared = Prepared()
    if cfg.strategy == "model" and client is not None:
        prepared = prepare(client, scope, text, lowered, named)
    known_row: int | None = None
    if prepared.known is not None and prepared.row is not None:
        rows, known_row = with_row(rows, prepared.row)
    confirmer = Confirmer(
        fn,
        args,
        crash=cfg.hooks.crash_at == "confirm",
        config_scale=cfg.hooks.config_scale,
    )
    with tempfile.TemporaryDirectory(prefix="costmodel-tune-") as workdir:
        bench = Bench(lowered, args, cfg, Path(workdir), _crash_path(cfg, text))
        run = Rounds(bench, rows, cfg, progress or _quiet, confirmer)
        run.notes += [n for n in (found.note, prepared.ignored) if n]
        outcome = _choose(scope, prepared, known_row, run, client)
    told = Told()
    # A reused default was not measured again: nothing new to tell.
    news = outcome.chosen is not None or not outcome.checked.reused
    if client is not None and prepared.program is not None and news:
        told = tell(client, scope, prepared, rows, outcome)
    load = _load(load_start, outcome.noise, run.confirmation)
    report = build_report(scope, prepared, run, outcome, told, load, started)
    if outcome.chosen is None:
        return report, bench.default_executable
    return report, run.executable(outcome.chosen)


def _crash_path(cfg: TuneConfig, text: str) -> Path:
    """The program's crash journal (``tune_bench.Bench``), named by its HLO."""
    crashes = cfg.crash_dir or default_crash_dir()
    return crashes / f"{hashlib.sha1(text.encode()).hexdigest()[:16]}.journal"


def _choose(
    scope: Scope,
    prepared: Prepared,
    known_row: int | None,
    run: Rounds,
    client: CostModelClient | None,
) -> Outcome:
    """The run's choice: the fleet's decision when it holds here (``check_known``),
    else the rounds played (``_play``), decided and the finalist confirmed."""
    checked = check_known(prepared.known, known_row, scope.compiler, run)
    if checked.note:
        run.notes.append(checked.note)
    if checked.reused:
        return _reused(checked, run)
    played = _play(scope, prepared, run, client)
    chosen, default_ns, noise = run.decide()
    kept = None if chosen is None else run.confirm(chosen)
    if chosen is not None and kept is None:  # dropped: the fresh process's default
        default_ns = _default_ns(run.confirmation, default_ns)
    best_ns = default_ns
    if kept is not None:
        best_ns = kept.final_ns or default_ns
        default_ns = kept.final_default_ns or default_ns  # the fresh process's
    return Outcome(
        chosen=kept,
        default_ns=default_ns,
        best_ns=best_ns,
        noise=noise,
        checked=checked,
        played=played,
    )


def _reused(checked: Checked, run: Rounds) -> Outcome:
    """The fleet's decision held: the default measured once more, unless the
    verifying pairs timed it."""
    default_ns = run.bench.measure([])[1]
    chosen = checked.chosen
    best_ns = default_ns if chosen is None else chosen.final_ns or default_ns
    if chosen is not None and chosen.final_default_ns is not None:
        default_ns = chosen.final_default_ns  # from the verifying pairs
    return Outcome(
        chosen=chosen,
        default_ns=default_ns,
        best_ns=best_ns,
        noise=run.bench.noise,
        checked=checked,
        played=Played(),
    )


def _default_ns(c: Confirmation | None, default_ns: int) -> int:
    """The default's runtime once a finalist is dropped: the fresh process's median
    of it when that measured, else the tuning run's."""
    if c is None or not c.pairs:
        return default_ns
    return int(np.median([d for d, _ in c.pairs]))


def _load(
    start: tuple[float, float, float], noise: float, c: Confirmation | None
) -> Load:
    """The load the run saw: the load averages at its start and end, the controls'
    noise in this process, and the fresh process's controls and load."""
    return Load(
        start=start,
        end=os.getloadavg(),
        noise=noise,
        confirm_controls=None if c is None or not c.pairs else c.controls,
        confirm_load=None if c is None else c.load,
    )


def _quiet(line: str) -> None:
    pass


def _play(
    scope: Scope, prepared: Prepared, run: Rounds, client: CostModelClient | None
) -> Played:
    """The rounds of ``cfg.plan()``, less what checking a decision spent."""
    cfg = scope.cfg
    # A decision checked first counts, compiled or not (so does any failed compile).
    left = cfg.budget - len(run.measured) - len(run.failed)
    if cfg.strategy == "random":
        picker: Picker = RandomPicker(np.random.default_rng([cfg.seed, 1]))
    elif client is None:
        return Played(why="no client given: kept the default")
    elif prepared.graph is None:
        return Played()  # prepared.why says why
    else:
        session = client.session(
            cfg.model, target=scope.target, compiler=scope.compiler
        )
        picker = ModelPicker(session, prepared.graph, run.rows, cfg.deadline)
    if left < 1:
        return Played()
    return run.play(picker, policy.plan(left, cfg.rounds and min(cfg.rounds, left)))
