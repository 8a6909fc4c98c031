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
from xla_costmodel.clients.xla import policy
from xla_costmodel.clients.xla.confirm import Confirmation, Confirmer
from xla_costmodel.clients.xla.measure import TimingProtocol
from xla_costmodel.clients.xla.pickers import ModelPicker, Picker, RandomPicker
from xla_costmodel.clients.xla.tune_bench import Bench
from xla_costmodel.clients.xla.tune_config import (
    TUNE_PROTOCOL,
    Hooks,
    Log,
    Rows,
    Strategy,
    TuneConfig,
    default_crash_dir,
)
from xla_costmodel.clients.xla.tune_fleet import check_known, prepare, tell, with_row
from xla_costmodel.clients.xla.tune_report import (
    Load,
    RunState,
    TuneReport,
    build_report,
)
from xla_costmodel.clients.xla.tune_rounds import Candidate, Rounds
from xla_costmodel.tpugraphs import machine, xla_cpu

__all__ = ["Autotuned", "TuneConfig", "TuneReport", "autotuned", "tune"]


@dataclass(frozen=True)
class Autotuned:
    """``autotuned``'s answer: call it like ``fn``'s compiled executable (same argument
    shapes and dtypes as the ``args`` tuned on); ``report`` says what was chosen."""

    compiled: Any  # jax.stages.Compiled, built with report.compiler_options
    report: TuneReport

    def __call__(self, *args: Any) -> Any:
        return self.compiled(*args)


# The public entry point: each TuneConfig knob as a keyword, as documented.
def tune(  # noqa: PLR0913
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
    reuse: bool = True,
    min_writers: int = 1,
    confirm_rounds: int = 7,
    hooks: Hooks | None = None,
) -> TuneReport:
    """Tune the XLA:CPU compiler options of ``fn(*args)`` (see the module docstring).

    ``budget`` configs are compiled and measured in ``rounds`` rounds (default
    ``min(3, budget)``), picked from ``candidates`` sampled with ``seed``;
    ``client`` (strategy ``"model"``) ranks them with ``model`` for ``target``
    (default: this CPU, ``machine.target()``). With ``reuse``, what the fleet
    decided for this program (by ``min_writers`` writers at least) is verified
    first (``reuse.py``). ``crash_dir`` keeps the crash journals
    (``tune_bench.Bench``; default ``~/.cache/costmodel/tune``). The finalist is
    confirmed in a fresh process over ``confirm_rounds`` rounds (``confirm.py``);
    ``hooks`` are for tests (``tune_config.Hooks``). ``progress`` receives a line
    per step.
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
        reuse=reuse,
        min_writers=min_writers,
        confirm_rounds=confirm_rounds,
        hooks=hooks or Hooks(),
    )
    return run_tuning(fn, tuple(args), cfg, client, progress)[0]


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
    """``tune`` with its configuration built: the report and the executable of the
    chosen options. ``named``: the program's HLO text and fingerprint as the
    caller lowered it (a child tuning a shipped program, ``jit_tuning.tune_job``),
    else this lowering's."""
    import jax

    started, load_start = time.monotonic(), os.getloadavg()
    log = progress or _quiet
    rows = xla_cpu.sample(cfg.candidates, cfg.seed)
    state = RunState(
        cfg, cfg.target or machine.target(), machine.compiler() or "unknown"
    )
    lowered = jax.jit(fn).lower(*args)
    text = lowered.as_text(dialect="hlo") if named is None else named[0]
    if cfg.strategy == "model" and client is not None:
        state.why = prepare(state, client, text, lowered, named)
        if state.known is not None:
            rows, state.known_row = with_row(rows, state.known.config)
    crashes = cfg.crash_dir or default_crash_dir()
    crash_path = crashes / f"{hashlib.sha1(text.encode()).hexdigest()[:16]}.journal"
    confirmer = Confirmer(
        fn,
        args,
        crash=cfg.hooks.crash_at == "confirm",
        config_scale=cfg.hooks.config_scale,
    )
    with tempfile.TemporaryDirectory(prefix="costmodel-tune-") as workdir:
        bench = Bench(lowered, args, cfg, Path(workdir), crash_path)
        run = Rounds(bench, rows, cfg, log, confirmer)
        if state.ignored:
            run.notes.append(state.ignored)
        chosen, default_ns, noise = _choose(state, run, client)
    best_ns = default_ns if chosen is None else chosen.final_ns or default_ns
    if chosen is not None and chosen.final_default_ns is not None:
        default_ns = chosen.final_default_ns  # the fresh process's pairs
    # A reused default was not measured again: nothing new to tell.
    if client and state.program and not (state.reused and chosen is None):
        tell(state, client, run, rows, chosen, default_ns)
    load = _load(load_start, noise, run.confirmation)
    report = build_report(state, run, chosen, (default_ns, best_ns), load, started)
    executable = bench.default_executable if chosen is None else chosen.executable
    return report, executable


def _choose(
    state: RunState, run: Rounds, client: CostModelClient | None
) -> tuple[Candidate | None, int, float]:
    """The run's choice (None: the default), the default's runtime and the
    controls' noise: the fleet's decision when it holds here (``check_known``),
    else the rounds played (``_play``), decided and the finalist confirmed."""
    chosen = check_known(state, run, run.log)
    if state.reused:
        default_ns = run.bench.measure([])[1]
        if chosen is not None and chosen.final_default_ns is not None:
            default_ns = chosen.final_default_ns  # from the verifying pairs
        return chosen, default_ns, run.bench.noise
    _play(state, run, client, run.rows, run.cfg)
    chosen, default_ns, noise = run.decide()
    if chosen is not None and not run.confirm(chosen):
        return None, _default_ns(chosen, default_ns), noise
    return chosen, default_ns, noise


def _default_ns(dropped: Candidate, default_ns: int) -> int:
    """The default's runtime once a finalist is dropped: the fresh process's median
    of it when that measured, else the tuning run's."""
    c = dropped.confirmation
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
    state: RunState,
    run: Rounds,
    client: CostModelClient | None,
    rows: Rows,
    cfg: TuneConfig,
) -> None:
    """The rounds of ``cfg.plan()``, less what checking a decision spent."""
    # A decision checked first counts, compiled or not (so does any failed compile).
    left = cfg.budget - len(run.measured) - len(run.failed)
    if cfg.strategy == "random":
        picker: Picker = RandomPicker(np.random.default_rng([cfg.seed, 1]))
    elif client is None:
        state.why = state.why or "no client given: kept the default"
        return
    elif state.graph is None:
        return  # state.why says why
    else:
        session = client.session(
            cfg.model, target=state.target, compiler=state.compiler
        )
        picker = ModelPicker(session, state.graph, rows, cfg.deadline)
    state.picker = picker
    if left >= 1:
        state.why = run.play(
            picker, policy.plan(left, cfg.rounds and min(cfg.rounds, left))
        )
