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
report counts them): each is kept only if a one-sided signed-rank test says it is
faster at level ``alpha`` *and* its median speedup exceeds ``1 + min_gain``, and the
fastest kept one wins. Otherwise the default stays (``compiler_options == {}``);
``default_ms`` and ``best_ms`` are from those pairs.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.errors import CostModelError
from xla_costmodel.clients.hlo import Hlo
from xla_costmodel.clients.payloads import prepare_graph
from xla_costmodel.clients.xla import policy, reuse
from xla_costmodel.clients.xla.measure import TimingProtocol
from xla_costmodel.clients.xla.pickers import ModelPicker, Picker, RandomPicker
from xla_costmodel.clients.xla.tune_bench import Bench
from xla_costmodel.clients.xla.tune_config import (
    TUNE_PROTOCOL,
    Log,
    Rows,
    Strategy,
    TuneConfig,
    default_crash_dir,
)
from xla_costmodel.clients.xla.tune_report import RunState, TuneReport, build_report
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
) -> TuneReport:
    """Tune the XLA:CPU compiler options of ``fn(*args)`` (see the module docstring).

    ``budget`` configs are compiled and measured in ``rounds`` rounds (default
    ``min(3, budget)``), picked from ``candidates`` sampled with ``seed``;
    ``client`` (strategy ``"model"``) ranks them with ``model`` for ``target``
    (default: this CPU, ``machine.target()``). With ``reuse``, what the fleet
    decided for this program (by ``min_writers`` writers at least) is verified
    first (``reuse.py``). ``crash_dir`` keeps the crash journals
    (``tune_bench.Bench``; default ``~/.cache/costmodel/tune``). ``progress``
    receives a line per step.
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
    log = progress or _quiet
    rows = xla_cpu.sample(cfg.candidates, cfg.seed)
    state = RunState(
        cfg, cfg.target or machine.target(), machine.compiler() or "unknown"
    )
    lowered = jax.jit(fn).lower(*args)
    text = lowered.as_text(dialect="hlo")
    if cfg.strategy == "model" and client is not None:
        state.why = _prepare(state, client, text, lowered)
        if state.known is not None:
            rows, state.known_row = _with_row(rows, state.known.config)
    crashes = cfg.crash_dir or default_crash_dir()
    crash_path = crashes / f"{hashlib.sha1(text.encode()).hexdigest()[:16]}.journal"
    with tempfile.TemporaryDirectory(prefix="costmodel-tune-") as workdir:
        bench = Bench(lowered, args, cfg, Path(workdir), crash_path)
        run = Rounds(bench, rows, cfg, log)
        chosen = _check_known(state, run, log)
        if state.reused:
            default_ns = bench.measure([])[1]
            if chosen is not None and chosen.final_default_ns is not None:
                default_ns = chosen.final_default_ns  # from the verifying pairs
            noise = bench.noise
        else:
            _play(state, run, client, rows, cfg)
            chosen, default_ns, noise = run.decide()
    best_ns = default_ns if chosen is None else chosen.final_ns or default_ns
    # A reused default was not measured again: nothing new to tell.
    if client and state.program and not (state.reused and chosen is None):
        _tell(state, client, run, rows, chosen, default_ns, best_ns)
    report = build_report(state, run, chosen, (default_ns, best_ns), noise, started)
    executable = bench.default_executable if chosen is None else chosen.executable
    return report, executable


def _quiet(line: str) -> None:
    pass


def _prepare(state: RunState, client: CostModelClient, text: str, lowered: Any) -> str:
    """Featurize the program for the service and ask what the fleet decided for it
    (``cfg.reuse``); returns why the default stays when the HLO cannot be used."""
    try:
        state.graph = prepare_graph(Hlo(text, configurable=None))
    except CostModelError as exc:
        return f"the HLO could not be featurized ({exc}): kept the default"
    state.program = reuse.Program(state.graph.graph_id, reuse.fingerprint(lowered))
    if state.cfg.reuse:
        state.known, _ = reuse.ask(
            client,
            state.cfg.model,
            state.program,
            state.target,
            state.compiler,
            state.cfg.min_writers,
            state.cfg.deadline,
        )
    return ""


def _with_row(rows: Rows, config: Sequence[float]) -> tuple[Rows, int]:
    """``rows`` holding ``config`` (appended unless sampled already) and its index."""
    row = np.asarray(config, np.float32)
    if row.shape != rows.shape[1:]:
        raise CostModelError(
            f"decided config has {row.size} values, not {rows.shape[1]}"
        )
    same = np.flatnonzero((rows == row).all(axis=1))
    if same.size:
        return rows, int(same[0])
    return np.vstack([rows, row[None]]), len(rows)


def _check_known(state: RunState, run: Rounds, log: Log) -> Candidate | None:
    """Check the fleet's decision before any search: a fresh one that holds ends the
    run (``state.reused``; the kept config, None for the default); one that does
    not hold, or a stale one, is adopted as the run's first measured config."""
    known, row = state.known, state.known_row
    if known is None or row is None:
        return None
    fresh = reuse.fresh(known, state.compiler)
    if known.is_default:
        state.reused = fresh  # nothing to compile: the default is the decision
        if fresh:
            log(
                f"reusing the fleet's decision: the default ({known.writers} writer(s))"
            )
        return None
    options = xla_cpu.to_options(run.rows[row])
    log(f"checking the fleet's decision ({'fresh' if fresh else 'stale'}) first")
    m = run.verify(row, options)
    if m is None:
        run.notes.append("the fleet's decision did not compile here: tuned instead")
        return None
    v = m.verdict
    assert v is not None  # verify() always compares
    state.verified = {
        "kept": v.kept,
        "speedup": v.speedup,
        "speedup_low": v.speedup_low,
        "p_value": v.p_value,
        "pairs": v.pairs,
        "stale": not fresh,
    }
    run.adopt(m)  # the run's first measured config, whatever follows
    if fresh and v.kept:
        state.reused = True
        state.why = (
            f"the fleet's decision ({known.writers} writer(s)), verified here (not "
            f"slower than the default): {v.speedup:.3f}x the default's speed in "
            f"{v.pairs} interleaved pairs (p = {v.p_value:.3g}): reused"
        )
        return m
    why = "decided under " + str(known.compiler) if not fresh else "did not hold"
    run.notes.append(f"the fleet's decision {why}: tuned with it measured first")
    return None


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


def _tell(
    state: RunState,
    client: CostModelClient,
    run: Rounds,
    rows: Rows,
    chosen: Candidate | None,
    default_ns: int,
    best_ns: int,
) -> None:
    """Send the final decision, and the kept config's paired runtimes as feedback;
    a refusal (no writer token, ...) is a note, never a failure of the run."""
    assert state.program is not None
    cfg = state.cfg
    row = rows[0] if chosen is None else rows[chosen.row]
    options = {} if chosen is None else xla_cpu.to_options(row)
    verdict = None if chosen is None else chosen.verdict
    strategy = "reuse" if state.reused else cfg.strategy
    made = reuse.decision(
        state.program,
        row,
        options,
        verdict,
        target=state.target,
        compiler=state.compiler,
        budget=cfg.budget,
        strategy=strategy,
    )
    model_version = state.model_version
    try:
        if chosen is not None:
            client.feedback(
                cfg.model,
                state.graph if state.graph is not None else state.program.graph_id,
                np.asarray([default_ns, best_ns], np.int64),
                configs=np.stack([rows[0], row]),
                model_version=model_version,
                target=state.target,
                compiler=state.compiler,
                deadline=cfg.deadline,
            )
        client.record_decision(
            cfg.model, made, model_version=model_version, deadline=cfg.deadline
        )
        state.decision_stored = True
    except CostModelError as exc:
        state.decision_stored = False
        run.notes.append(f"the decision was not stored ({exc})")
