"""``costmodel collect``: measure zoo programs under sampled XLA:CPU option sets.

Per program: build, lower, featurize the pre-optimization HLO, compile the sampled
configs (``xla_cpu.sample(n, seed)``, the same rows for every program, row 0 the
default) plus separately compiled default controls, then measure all of them with the
interleaved protocol of ``measure.py``. A program whose controls disagree beyond the
threshold is measured again, and dropped (recorded in its sidecar) if they still do.
Compile errors are recorded per config. Output per program: ``<name>.npz``
(TpuGraphs, ``config_spec="xla_cpu/1"``), ``<name>.hlo.txt``, ``<name>.json``.

The process pins itself to one CPU before jax starts (so XLA:CPU's thread pool has
one thread there); compile worker threads may use every CPU. jax is imported only
when the command runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from xla_costmodel.clients.xla.isolate import forwarded_argv, supervise
from xla_costmodel.clients.xla.measure import TimingProtocol
from xla_costmodel.collection.progress import make_log
from xla_costmodel.collection.zoo import Program, select


def collect(  # noqa: PLR0913 -- typer: one parameter per command-line option
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", help="Output folder (resumable)."),
    programs: str = typer.Option(
        "",
        "--programs",
        help="Comma-separated program names or families (default all).",
    ),
    configs: int = typer.Option(100, "--configs", help="Sampled configs per program."),
    time_budget: float = typer.Option(
        4500.0, "--time-budget", help="Seconds for the whole run; shortens rounds."
    ),
    seed: int = typer.Option(0, "--seed", help="Config sample and visit-order seed."),
    controls: int = typer.Option(2, "--controls", help="Extra default compiles."),
    runs: int = typer.Option(3, "--runs", help="Timed runs per visit."),
    max_rounds: int = typer.Option(5, "--max-rounds"),
    noise_threshold: float = typer.Option(
        0.05,
        "--noise-threshold",
        min=0.0,
        help="Controls disagreeing beyond this: measure again, then drop the program.",
    ),
    cpu: int = typer.Option(-1, "--cpu", help="CPU to pin to (-1: the last allowed)."),
    pin: bool = typer.Option(
        True, "--pin/--no-pin", help="Pin measurement to one CPU."
    ),
    restarts: int = typer.Option(
        60, "--restarts", help="Restarts of a worker that crashed (segfault)."
    ),
    worker: bool = typer.Option(False, "--worker", hidden=True),
) -> None:
    """Collect an xla_cpu/1 dataset: real programs, compiled and measured here."""
    chosen = _chosen(programs)
    if not worker:
        # Some option sets crash XLA itself: the work runs in a child process, which
        # is restarted after a crash and leaves the crashing config out (probe.py,
        # isolate.py).
        argv = [*forwarded_argv(ctx, ("restarts", "worker")), "--worker"]
        raise typer.Exit(supervise(argv, restarts, make_log(out / "progress.log")))
    # The worker imports jax: only the child process loads it, never at import.
    from xla_costmodel.collection.worker import run_collection

    all_cpus = sorted(os.sched_getaffinity(0))
    pinned = pin_to(cpu if cpu >= 0 else all_cpus[-1]) if pin else all_cpus
    protocol = TimingProtocol(
        runs=runs, max_rounds=max(3, max_rounds), noise_threshold=noise_threshold
    )
    run_collection(
        chosen,
        out,
        configs=configs,
        seed=seed,
        protocol=protocol,
        time_budget=time_budget,
        controls=controls,
        compile_cpus=all_cpus,
        pinned=pinned,
    )


def _chosen(programs: str) -> list[Program]:
    """The zoo programs named (names or families, comma-separated); exit 2 if unknown."""
    try:
        return select([p for p in programs.split(",") if p])
    except ValueError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from exc


def pin_to(cpu: int) -> list[int]:
    """Pin this process (threads started later inherit it) to ``cpu``."""
    os.sched_setaffinity(0, {cpu})
    return [cpu]
