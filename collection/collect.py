"""``costmodel collect``: measure zoo programs under sampled XLA:CPU option sets.

Per program: build, lower, featurize the pre-optimization HLO, compile the sampled
configs (``--spec``'s ``sample(n, seed)``, default ``xla_cpu/2``: the same rows for
every program, row 0 the default, less the rows setting a column this jaxlib
rejects) plus separately compiled default controls, then measure all of them with
the interleaved protocol of ``measure.py``. A program whose controls disagree beyond
the threshold is measured again, and dropped (recorded in its sidecar) if they still
do. Compile errors are recorded per config. Output per program: ``<name>.npz``
(TpuGraphs, ``config_spec`` the spec), ``<name>.hlo.txt``, ``<name>.json``.

A folder may hold several specs' files. Resuming skips every program with a
sidecar, except that a program selected by ``--programs`` whose sidecar is of
another spec than ``--spec`` is collected again (its files replaced); a run without
``--programs`` leaves other specs' files alone.

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
from xla_costmodel.clients.xla.spec_rows import spec_named
from xla_costmodel.collection import specs
from xla_costmodel.collection.progress import make_log
from xla_costmodel.collection.zoo import Program, select


def collect(  # noqa: PLR0913 -- typer: one parameter per command-line option
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", help="Output folder (resumable)."),
    programs: str = typer.Option(
        "",
        "--programs",
        help="Comma-separated program names or families (default all); those with "
        "files of another --spec are collected again.",
    ),
    configs: int = typer.Option(100, "--configs", help="Sampled configs per program."),
    spec: str = typer.Option(specs.TODAY, "--spec", help="Config spec to sample."),
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
    """Collect an xla_cpu dataset: real programs, compiled and measured here."""
    chosen = _chosen(programs, spec)
    if not worker:
        raise typer.Exit(_supervised(ctx, out, restarts))
    # The worker imports jax: only the child process loads it, never at import.
    from xla_costmodel.collection.worker import run_collection

    all_cpus = sorted(os.sched_getaffinity(0))
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
        spec=spec,
        # only programs asked for by name or family replace another spec's files
        recollect={p.name for p in chosen} if programs else (),
        controls=controls,
        compile_cpus=all_cpus,
        pinned=pin_to(cpu if cpu >= 0 else all_cpus[-1]) if pin else all_cpus,
    )


def _chosen(programs: str, spec: str) -> list[Program]:
    """The zoo programs named (names or families, comma-separated); exit 2 if one
    is unknown, or ``spec`` is not a spec collect samples."""
    try:
        spec_named(spec)
        return select([p for p in programs.split(",") if p])
    except ValueError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from exc


def _supervised(ctx: typer.Context, out: Path, restarts: int) -> int:
    """Run this command again as a supervised worker; its exit code.

    Some option sets crash XLA itself: the work runs in a child process, which is
    restarted after a crash and leaves the crashing config out (probe.py,
    isolate.py).
    """
    argv = [*forwarded_argv(ctx, ("restarts", "worker")), "--worker"]
    return supervise(argv, restarts, make_log(out / "progress.log"))


def pin_to(cpu: int) -> list[int]:
    """Pin this process (threads started later inherit it) to ``cpu``."""
    os.sched_setaffinity(0, {cpu})
    return [cpu]
