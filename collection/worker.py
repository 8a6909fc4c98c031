"""One collection run, in ``costmodel collect``'s child process: programs one at a
time, compile all configs, then measure.

The rows are drawn once per run (``specs.sampled``: the spec's sample, less the rows
setting a column this jaxlib rejects) and each is compiled through
``compile_options.compile_with`` (``probe.compile_one``), so a row's
``xla_backend_extra_options`` entries reach its compile and no other.

Imports jax at import time: only the collect command's worker and tests import it.
"""

from __future__ import annotations

import datetime as dt
import gc
import platform
import time
import zlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import jax
import numpy as np
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from xla_costmodel.clients.xla import probe, spec_rows
from xla_costmodel.clients.xla.measure import (
    Measurement,
    TimingProtocol,
    disagreement,
    measure,
)
from xla_costmodel.collection import record, specs
from xla_costmodel.collection.progress import make_log, pending, summary_line
from xla_costmodel.collection.specs import SampledRows
from xla_costmodel.collection.zoo import Program
from xla_costmodel.tpugraphs import machine
from xla_costmodel.tpugraphs.hlo.featurize import HloGraph, featurize_hlo
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions

# Test hook: (index, options) -> options actually compiled (e.g. to force a failure).
OptionsHook = Callable[[int, CompilerOptions], CompilerOptions]
# Starts of one program after which a program that keeps crashing is dropped.
MAX_ATTEMPTS = 4


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("jax", "jaxlib", "keras", "numpy"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    return out


def run_collection(  # noqa: PLR0913 -- keyword-only options, collect's flags
    programs: Sequence[Program],
    out: Path,
    *,
    configs: int,
    seed: int,
    protocol: TimingProtocol,
    time_budget: float,
    spec: str = specs.TODAY,
    recollect: Collection[str] = (),
    controls: int = 2,
    compile_cpus: Sequence[int] | None = None,
    pinned: Sequence[int] | None = None,
    options_hook: OptionsHook | None = None,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Collect every pending program into ``out`` in ``spec``; returns their sidecars.

    Pending: no sidecar yet, or named in ``recollect`` with a sidecar of another
    spec (``progress.pending``).
    """
    out.mkdir(parents=True, exist_ok=True)
    log = make_log(out / "progress.log")
    todo = pending(programs, out, spec, recollect)
    log(
        f"start: {len(todo)} of {len(programs)} programs pending, spec {spec}, "
        f"{configs} configs, pinned to {list(pinned or [])}, "
        f"load {machine.load_average()}"
    )
    if not todo:
        log("done: nothing pending")
        return []
    started = time.monotonic()
    rows = specs.sampled(spec, configs, seed, log)  # probes this jaxlib once
    sides: list[dict[str, Any]] = []
    with _bar(progress) as bar:
        task = bar.add_task("collect", total=len(todo))
        for i, program in enumerate(todo):
            bar.update(task, description=program.name)
            left = time_budget - (time.monotonic() - started)
            # Half of a program's share of the time left goes to measuring it.
            budget = max(5.0, 0.5 * left / (len(todo) - i))
            side = collect_program(
                program,
                out,
                rows,
                _replace_budget(protocol, budget),
                seed=seed,
                controls=controls,
                compile_cpus=compile_cpus,
                pinned=pinned,
                options_hook=options_hook,
                log=log,
            )
            sides.append(side)
            log(summary_line(side))
            bar.advance(task)
    log(f"done in {time.monotonic() - started:.0f} s")
    return sides


def _bar(shown: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        disable=not shown,
    )


def _replace_budget(protocol: TimingProtocol, budget: float) -> TimingProtocol:
    return replace(protocol, budget_s=min(protocol.budget_s, budget))


def collect_program(
    program: Program,
    out: Path,
    rows: SampledRows,
    protocol: TimingProtocol,
    *,
    seed: int,
    controls: int,
    compile_cpus: Sequence[int] | None,
    pinned: Sequence[int] | None,
    options_hook: OptionsHook | None,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Build, featurize, compile and measure one program; write its files."""
    phase: dict[str, float] = {}
    t = time.monotonic()
    side = _header(program, seed, compile_cpus, pinned) | rows.record()
    fn, args = program.build()
    phase["build"] = time.monotonic() - t
    t = time.monotonic()
    lowered = jax.jit(fn).lower(*args)
    hlo_text = lowered.as_text(dialect="hlo")
    graph = featurize_hlo(hlo_text, configurable=None)
    phase["lower_featurize"] = time.monotonic() - t
    side |= {"nodes": graph.num_nodes, "edges": len(graph.edge_index)}
    t = time.monotonic()
    options = [spec_rows.options(r, rows.spec) for r in rows.rows]
    if options_hook is not None:
        options = [options_hook(i, o) for i, o in enumerate(options)]
    n = len(options)
    journal = probe.Journal(out / f".{program.name}.journal")
    if journal.attempts() >= MAX_ATTEMPTS:
        return _drop_crashing(out, program.name, hlo_text, side, journal)
    journal.mark("attempt")
    entries = probe.compile_and_probe(
        lowered,
        [*options, *probe.controls(controls)],
        args,
        journal,
        compile_cpus,
    )
    compiled, ctrl = entries[:n], entries[n:]
    phase["compile"] = time.monotonic() - t
    log(f"{program.name}: compiled {n} + {controls} in {phase['compile']:.1f} s")
    ok = [k for k, c in enumerate(compiled) if c.executable is not None]
    side |= _compile_record(compiled, ctrl, options, rows.index)
    runners, defaults = _runners(compiled, ctrl, ok, args)
    rng = np.random.default_rng([seed, zlib.crc32(program.name.encode())])
    t = time.monotonic()
    attempts, m = _measure_attempts(runners, protocol, rng, defaults, ok)
    phase["measure"] = time.monotonic() - t
    side |= _measured_record(compiled, protocol, controls, attempts)
    npz = _outcome(side, m, protocol, graph, rows, ok, options, defaults)
    del runners, compiled, ctrl, entries, lowered, fn, args
    gc.collect()
    phase["total"] = sum(phase.values())
    side["phase_s"] = {k: round(v, 2) for k, v in phase.items()}
    record.write_program(out, program.name, hlo_text, npz, side)
    journal.remove()
    return side


def _drop_crashing(
    out: Path, name: str, hlo_text: str, side: dict[str, Any], journal: probe.Journal
) -> dict[str, Any]:
    """Give up on a program that crashed the worker ``MAX_ATTEMPTS`` times."""
    side |= {
        "status": "dropped",
        "reason": f"crashed the process {MAX_ATTEMPTS} times",
    }
    record.write_program(out, name, hlo_text, None, side)
    journal.remove()
    return side


def _header(
    program: Program,
    seed: int,
    compile_cpus: Sequence[int] | None,
    pinned: Sequence[int] | None,
) -> dict[str, Any]:
    """The sidecar's first fields: the program, the sample, versions and machine."""
    return {
        "name": program.name,
        "family": program.family,
        "description": program.description,
        "seed": seed,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "versions": versions(),
        "machine": machine.describe(),
        "pinned_cpus": list(pinned or []),
        "compile_cpus": list(compile_cpus or []),
        "load_average_start": machine.load_average(),
    }


def _compile_record(
    compiled: list[probe.Compiled],
    ctrl: list[probe.Compiled],
    options: list[CompilerOptions],
    index: Sequence[int],
) -> dict[str, Any]:
    """Compile failures (by sample row), and whether the controls compiled to row
    0's executable."""
    return {
        "compiled_rows": list(index),  # the sample row of each compile below
        "compile_failures": [
            {"row": index[k], "options": options[k].flat(), "error": c.error}
            for k, c in enumerate(compiled)
            if c.executable is None
        ],
        "controls_same_optimized_hlo": all(c.sha1 == compiled[0].sha1 for c in ctrl),
        "controls_distinct_executables": _distinct([compiled[0], *ctrl]),
    }


def _runners(
    compiled: list[probe.Compiled],
    ctrl: list[probe.Compiled],
    ok: list[int],
    args: tuple[Any, ...],
) -> tuple[list[Callable[[], object]], list[int]]:
    """One runner per compiled config then per control; the indices among them of
    the default config's copies (row 0 and the controls)."""
    runners = [_runner(compiled[k].executable, args) for k in ok]
    runners += [_runner(c.executable, args) for c in ctrl if c.executable]
    defaults = [len(ok) + j for j in range(len(runners) - len(ok))]
    if ok and ok[0] == 0:
        defaults = [0, *defaults]
    return runners, defaults


def _measure_attempts(
    runners: list[Callable[[], object]],
    protocol: TimingProtocol,
    rng: np.random.Generator,
    defaults: list[int],
    ok: list[int],
) -> tuple[list[dict[str, Any]], Measurement | None]:
    """Measure until the default's copies agree (at most ``protocol.attempts``
    times; never when the default config failed to compile)."""
    attempts: list[dict[str, Any]] = []
    m: Measurement | None = None
    for _ in range(protocol.attempts if ok and ok[0] == 0 else 0):
        m = measure(runners, protocol, rng)
        noise = disagreement(m.median_ns[defaults])
        attempts.append(
            {
                "noise": noise,
                "rounds": m.rounds,
                "seconds": round(m.seconds, 1),
                "default_copies_ns": m.median_ns[defaults].tolist(),
            }
        )
        if noise <= protocol.noise_threshold:
            break
    return attempts, m


def _measured_record(
    compiled: list[probe.Compiled],
    protocol: TimingProtocol,
    controls: int,
    attempts: list[dict[str, Any]],
) -> dict[str, Any]:
    """The measurement's sidecar fields: attempts, per-config compile facts, protocol."""
    return {
        "attempts": attempts,
        "load_average_end": machine.load_average(),
        "compile_s": [round(c.seconds, 3) for c in compiled],
        "optimized_hlo_sha1": [c.sha1 for c in compiled],
        "max_rel_diff": [c.max_rel_diff for c in compiled],
        "protocol": {
            "runs": protocol.runs,
            "min_rounds": protocol.min_rounds,
            "max_rounds": protocol.max_rounds,
            "budget_s": round(protocol.budget_s, 1),
            "noise_threshold": protocol.noise_threshold,
            "controls": controls,
        },
    }


def _outcome(
    side: dict[str, Any],
    m: Measurement | None,
    protocol: TimingProtocol,
    graph: HloGraph,
    rows: SampledRows,
    ok: list[int],
    options: list[CompilerOptions],
    defaults: list[int],
) -> bytes | None:
    """Mark ``side`` dropped or add its summary; the npz bytes when kept."""
    if m is None:
        side |= {"status": "dropped", "reason": "the default config failed to compile"}
        return None
    noise = side["attempts"][-1]["noise"]
    if noise > protocol.noise_threshold:
        side |= {"status": "dropped", "reason": f"controls disagree by {noise:.3f}"}
        return None
    # Per-round speed normalisation (tpugraphs.labels.normalised_medians); the noise
    # (the controls' disagreement) stays on the raw medians.
    runtimes = m.normalised_ns[: len(ok)].copy()
    # Row 0 is the default config; its runtime is the median of its copies.
    runtimes[0] = int(np.median(m.normalised_ns[defaults]))
    measured = [rows.index[k] for k in ok]
    side |= _summary(runtimes, measured, [options[k] for k in ok], m, defaults)
    return record.npz_bytes(graph, rows.rows[ok], runtimes, rows.spec.SPEC)


def _summary(
    runtimes: np.ndarray[Any, np.dtype[np.int64]],
    measured: list[int],
    options: list[CompilerOptions],
    m: Measurement,
    defaults: list[int],
) -> dict[str, Any]:
    """The sidecar fields of a kept program; ``measured``: the sample row of each
    npz row, ``options`` its options."""
    best = int(runtimes.min())
    return {
        "status": "ok",
        "rows": measured,  # the spec's sample row of each npz row
        "options": [o.flat() for o in options],
        "config_runtime_ns": runtimes.tolist(),
        "round_min_ns": m.round_min_ns[: len(measured)].tolist(),
        "default_copies_ns": m.median_ns[defaults].tolist(),
        "configs_measured": len(measured),
        "rounds": m.rounds,
        "noise": disagreement(m.median_ns[defaults]),
        "default_ms": runtimes[0] / 1e6,
        "best_ms": best / 1e6,
        "best_row": measured[int(runtimes.argmin())],
        "best_over_default": best / int(runtimes[0]),
        "worst_over_best": int(runtimes.max()) / best,
    }


def _runner(executable: Any, args: tuple[Any, ...]) -> Callable[[], object]:
    def run() -> object:
        return jax.block_until_ready(executable(*args))  # type: ignore[no-untyped-call]

    return run


def _distinct(compiled: list[probe.Compiled]) -> bool:
    ids = [id(c.executable.runtime_executable()) for c in compiled if c.executable]
    return len(set(ids)) == len(ids)
