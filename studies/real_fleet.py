"""``python -m xla_costmodel.studies.real_fleet``: real programs tuned one after
another at several budgets, against random search and the best fixed set.

``--strategies`` (default ``STRATEGIES``: model@2, model@4, model@8, random@8,
random@16) are run one after another, each over every program of
``examples/fleet_programs.py`` (``NAMES``, in order; ``--programs N``: the first N;
``--file``: another such module, e.g. ``examples/loop_programs.py``; ``--spec``: the
tuner's config space, ``xla_cpu/1`` to compare with the older one):

1. ``model@K``: a fresh ``costmodel serve`` (the shipped models, an empty database,
   its own data directory: no strategy learns from another's feedback), then
   ``costmodel tune FILE:NAME --budget K --no-reuse --json`` per program (the
   feedback of each is what the next programs learn from).
2. ``random@K``: ``--strategy random`` (seeded per program; it never talks to the
   service).
3. The best fixed option set is chosen on the training data only: the option set with
   the best geometric-mean runtime over this CPU's collected programs
   (``datasets/xla_cpu/<target>/``; the default where this CPU was not collected, or
   where that row sets an option this jaxlib rejects: ``spec_rows.judge``).
4. Every choice is measured again in this process against two separately compiled
   copies of the default, all of them in shuffled round-robin rounds (``measure.py``:
   min per round, median over rounds), each compiled with ``compile_with`` (the
   options as the reports spell them, ``CompilerOptions.flat``): speedup = default
   / choice. Each row also
   keeps what the tuner's own fresh-process confirmation measured (``confirmed``:
   every CPU and one CPU, ``clients/xla/confirm.py``) and the load its run saw.

Per strategy: the geometric-mean speedup, the worst program, the tuner's wall time
(each ``costmodel tune`` process, start to end) and the pairs its decisions spent.
Writes ``--out`` (default ``studies/results/real_fleet.json``) and prints a Markdown
table. Wall time on a 2-core machine: about 20 minutes for the 12 programs and the
five strategies. Measure on a quiet machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xla_costmodel import paths
from xla_costmodel.bench import require_harness
from xla_costmodel.clients.xla import outputs, probe, spec_rows
from xla_costmodel.clients.xla.compile_options import compile_with
from xla_costmodel.clients.xla.measure import TimingProtocol, measure
from xla_costmodel.clients.xla.programs import load_program, short
from xla_costmodel.models import xla_cpu_programs
from xla_costmodel.studies.fleet_report import geomean
from xla_costmodel.tpugraphs import machine
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions

if TYPE_CHECKING:
    from xla_costmodel.harness import ServiceServer

PROGRAMS = Path("examples/fleet_programs.py")  # from the repository root
OUT = Path("studies/results/real_fleet.json")
BUDGET = 8
STRATEGIES = ("model@2", "model@4", "model@8", "random@8", "random@16")
CHECK = TimingProtocol(runs=3, min_rounds=7, max_rounds=7, budget_s=60.0)
COMMAND = [sys.executable, "-c", "from xla_costmodel.cli import main; main()"]


def names(programs: Path = PROGRAMS) -> list[str]:
    """``NAMES`` of the programs file, imported as ``costmodel tune`` imports it."""
    spec = importlib.util.spec_from_file_location(programs.stem, programs)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.NAMES)


def strategy(name: str) -> tuple[str, int]:
    """``model@4`` -> ("model", 4)."""
    kind, _, budget = name.partition("@")
    if kind not in ("model", "random") or not budget.isdigit() or int(budget) < 1:
        raise ValueError(f"a strategy is model@K or random@K, not {name!r}")
    return kind, int(budget)


def fixed_options(target: str) -> dict[str, Any]:
    """The best fixed option set of this CPU's data, as ``flat`` spells it ({}:
    none collected, or its row is of no use with this jaxlib)."""
    folder = paths.XLA_CPU_DATA / target
    if not folder.is_dir():
        return {}
    row, _ = xla_cpu_programs.fixed_row(xla_cpu_programs.load_programs(folder))
    served = spec_rows.judge(row, spec_rows.spec_named(spec_rows.SPEC))
    if served.options is None:
        print(f"fixed option set: the default ({served.why})", file=sys.stderr)
        return {}
    return served.options.flat()


def serve(workdir: Path) -> ServiceServer:
    """``costmodel serve`` with the shipped models and an empty database."""
    from xla_costmodel.harness import ServiceServer

    # The fleet figures (GET /v1/targets) refresh every second, for the run's end.
    env = {
        "COSTMODEL_DATA_DIR": str(workdir / "data"),
        "COSTMODEL_FLEET_REFRESH_S": "1",
    }
    return ServiceServer(workdir, env, argv=[*COMMAND, "serve"])


def tune(
    name: str,
    url: str,
    kind: str,
    seed: int,
    cache: Path,
    budget: int = BUDGET,
    *,
    file: Path = PROGRAMS,
    spec: str = spec_rows.SPEC,
) -> dict[str, Any]:
    """One ``costmodel tune`` process; its report, with ``wall_s`` added."""
    argv = [
        *COMMAND,
        "tune",
        f"{file}:{name}",
        "--spec",
        spec,
        "--server",
        url,
        "--budget",
        str(budget),
        "--strategy",
        kind,
        "--seed",
        str(seed),
        "--no-reuse",  # every strategy searches: a stored decision is not its own
        "--json",
    ]
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    out = dict(json.loads(done.stdout))
    out["wall_s"] = time.monotonic() - started
    return out


def timed_call(jax: Any, executable: Any, args: Any) -> Callable[[], object]:
    """One run of a compiled program, waited on (what ``measure`` times)."""
    return lambda: jax.block_until_ready(executable(*args))


def remeasure(
    name: str,
    choices: dict[str, dict[str, Any]],
    seed: int,
    programs: Path = PROGRAMS,
) -> tuple[dict[str, float], dict[str, bool]]:
    """Speedup of each choice over the default, measured together (module
    docstring), and whether its outputs equal the default's (``outputs.compare``,
    the tuner's own check: NaN-aware, scale-aware)."""
    import jax

    fn, args = load_program(f"{programs}:{name}")
    lowered = jax.jit(fn).lower(*args)
    distinct = {json.dumps(o, sort_keys=True): o for o in choices.values() if o}
    spellings = [
        CompilerOptions(),
        CompilerOptions(compiler_options=probe.controls(1)[0]),
        *(CompilerOptions.from_flat(o) for o in distinct.values()),
    ]
    compiled = [compile_with(lowered, o) for o in spellings]
    runners = [timed_call(jax, c, args) for c in compiled]
    reference = runners[0]()
    same = {
        key: outputs.compare(run(), reference).ok
        for key, run in zip(distinct, runners[2:], strict=True)
    }
    medians = measure(runners, CHECK, np.random.default_rng(seed)).median_ns
    default = float(np.median(medians[:2]))
    at = {key: default / float(m) for key, m in zip(distinct, medians[2:], strict=True)}
    keys = {s: json.dumps(o, sort_keys=True) for s, o in choices.items()}
    return (
        {s: at[keys[s]] if o else 1.0 for s, o in choices.items()},
        {s: same[keys[s]] if o else True for s, o in choices.items()},
    )


def run_strategy(
    name: str,
    programs: Sequence[str],
    workdir: Path,
    log: Callable[[str], None],
    **tune_with: Any,
) -> dict[str, dict[str, Any]]:
    """Every program tuned by strategy ``name``, against its own fresh service
    (``tune_with``: the programs file and the spec, passed on to ``tune``)."""
    kind, budget = strategy(name)
    home = workdir / name.replace("@", "-")
    home.mkdir(parents=True)
    server = serve(home).start()
    try:
        out = {}
        for i, program in enumerate(programs):
            seed = 0 if kind == "model" else i + 1
            out[program] = tune(
                program, server.url, kind, seed, home / "cache", budget, **tune_with
            )
            log(f"{name} {program}: {out[program]['wall_s']:.1f} s")
        return out
    finally:
        server.stop()


def measured_rows(
    programs: Sequence[str],
    chosen: Sequence[str],
    reports: dict[str, dict[str, dict[str, Any]]],
    fixed: dict[str, Any],
    file: Path,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Per program: every strategy's choice measured again here, and what its
    tuner reported."""
    rows: list[dict[str, Any]] = []
    for i, program in enumerate(programs):
        choices = {s: reports[s][program]["compiler_options"] for s in chosen}
        speed, same = remeasure(program, {**choices, "fixed": fixed}, i, file)
        rows.append(
            {
                "program": program,
                **speed,
                "options": {s: short(o) for s, o in choices.items()},
                "outputs_equal": same,
                "tuner_speedup": {s: reports[s][program]["speedup"] for s in chosen},
                "wall_s": {s: round(reports[s][program]["wall_s"], 1) for s in chosen},
                "pairs": {s: reports[s][program].get("pairs") for s in chosen},
                # What the tuner's fresh process measured, and the load it saw.
                "confirmed": {s: _confirmed(reports[s][program]) for s in chosen},
                "load": {s: reports[s][program].get("load") for s in chosen},
            }
        )
        log(f"{program}: " + "  ".join(f"{s} {speed[s]:.3f}" for s in speed))
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--programs", type=int, default=None, help="the first N")
    parser.add_argument(
        "--file", type=Path, default=PROGRAMS, help="the programs (a NAMES module)"
    )
    parser.add_argument(
        "--spec", default=spec_rows.SPEC, help="the tuner's config space (tune --spec)"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    # Before any import of the process harness: an install without it says so.
    require_harness("python -m xla_costmodel.studies.real_fleet")
    chosen = [s for s in args.strategies.split(",") if s]
    for s in chosen:
        strategy(s)  # fail early on a typo
    programs = names(args.file)[: args.programs]
    target = machine.target()
    fixed = fixed_options(target)
    started = time.monotonic()

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="real-fleet-") as tmp:
        reports = {
            s: run_strategy(s, programs, Path(tmp), log, file=args.file, spec=args.spec)
            for s in chosen
        }
    rows = measured_rows(programs, chosen, reports, fixed, args.file, log)
    columns = [*chosen, "fixed"]
    result = {
        "target": target,
        "cpu": machine.describe(),
        "programs_file": str(args.file),
        "spec": args.spec,
        "strategies": chosen,
        "fixed_options": short(fixed),
        "programs": rows,
        "geomean": {s: geomean([r[s] for r in rows]) for s in columns},
        "worst": {s: min(r[s] for r in rows) for s in columns},
        "outputs_equal": {s: all(r["outputs_equal"][s] for r in rows) for s in columns},
        "wall_s_per_strategy": {
            s: round(sum(r["wall_s"][s] for r in rows), 1) for s in chosen
        },
        "wall_s": round(time.monotonic() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))


def _confirmed(report: dict[str, Any]) -> dict[str, Any] | None:
    """The finalist's fresh-process figures (``confirm.py``), if one was timed."""
    c = report.get("confirmed")
    if not c:
        return None
    keys = ("speedup", "p_value", "one_cpu_speedup", "controls", "error")
    return {k: c.get(k) for k in keys} | {"kept": bool(report["compiler_options"])}


def table(result: dict[str, Any]) -> str:
    columns = [*result["strategies"], "fixed"]
    lines = [
        "| program | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for r in result["programs"]:
        lines.append(
            f"| {r['program']} | " + " | ".join(f"{r[c]:.3f}" for c in columns) + " |"
        )
    g, w = result["geomean"], result["wall_s_per_strategy"]
    lines.append(
        "| **geomean** | " + " | ".join(f"**{g[c]:.3f}**" for c in columns) + " |"
    )
    lines.append(
        "| tuning wall s | "
        + " | ".join(f"{w[c]:.0f}" if c in w else "-" for c in columns)
        + " |"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
