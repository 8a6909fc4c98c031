"""``python -m xla_costmodel.studies.real_fleet``: real programs tuned one after
another against one fresh service, against random search and the best fixed set.

1. ``costmodel serve`` starts with the shipped models and an empty database.
2. Each program of ``examples/fleet_programs.py`` (``NAMES``, in order) is tuned with
   ``costmodel tune FILE:NAME --budget 8 --json`` (strategy model: its feedback is
   what the next programs learn from), then with ``--strategy random`` (seeded per
   program; it never talks to the service).
3. The best fixed option set is chosen on the training data only: the option set with
   the best geometric-mean runtime over this CPU's collected programs
   (``datasets/xla_cpu/<target>/``; the default where this CPU was not collected).
4. Every choice is measured again in this process against two separately compiled
   copies of the default, all of them in shuffled round-robin rounds (``measure.py``:
   min per round, median over rounds): speedup = default / choice.

Writes ``studies/results/real_fleet.json`` and prints a Markdown table. Wall time
on a 2-core machine: a few minutes. Measure on a quiet machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from xla_costmodel import paths
from xla_costmodel.clients.xla import probe
from xla_costmodel.clients.xla.measure import TimingProtocol, measure
from xla_costmodel.clients.xla.tune_cli import load_program, short
from xla_costmodel.models import xla_cpu_recipe as recipe
from xla_costmodel.procs import ServiceServer
from xla_costmodel.studies.fleet import geomean
from xla_costmodel.tpugraphs import machine, xla_cpu

PROGRAMS = Path("examples/fleet_programs.py")  # from the repository root
OUT = Path("studies/results/real_fleet.json")
BUDGET = 8
CHECK = TimingProtocol(runs=3, min_rounds=7, max_rounds=7, budget_s=60.0)
COMMAND = [sys.executable, "-c", "from xla_costmodel.cli import main; main()"]


def names() -> list[str]:
    """``NAMES`` of the programs file, imported as ``costmodel tune`` imports it."""
    spec = importlib.util.spec_from_file_location("fleet_programs", PROGRAMS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.NAMES)


def fixed_options(target: str) -> dict[str, Any]:
    folder = paths.XLA_CPU_DATA / target
    if not folder.is_dir():
        return {}
    row, _ = recipe.fixed_row(recipe.load_programs(folder))
    return xla_cpu.to_options(row)


def serve(workdir: Path) -> ServiceServer:
    """``costmodel serve`` with the shipped models and an empty database."""
    # The fleet figures (GET /v1/targets) refresh every second, for the run's end.
    env = {
        "COSTMODEL_DATA_DIR": str(workdir / "data"),
        "COSTMODEL_FLEET_REFRESH_S": "1",
    }
    return ServiceServer(workdir, env, argv=[*COMMAND, "serve"])


def tune(name: str, url: str, strategy: str, seed: int, cache: Path) -> dict[str, Any]:
    argv = [
        *COMMAND,
        "tune",
        f"{PROGRAMS}:{name}",
        "--server",
        url,
        "--budget",
        str(BUDGET),
        "--strategy",
        strategy,
        "--seed",
        str(seed),
        "--json",
    ]
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    return dict(json.loads(done.stdout))


def timed_call(jax: Any, executable: Any, args: Any) -> Callable[[], object]:
    """One run of a compiled program, waited on (what ``measure`` times)."""
    return lambda: jax.block_until_ready(executable(*args))


def remeasure(
    name: str, choices: dict[str, dict[str, Any]], seed: int
) -> dict[str, float]:
    """Speedup of each choice over the default, measured together (module docstring)."""
    import jax

    fn, args = load_program(f"{PROGRAMS}:{name}")
    lowered = jax.jit(fn).lower(*args)
    distinct = {json.dumps(o, sort_keys=True): o for o in choices.values() if o}
    spellings = [{}, probe.CONTROL_OPTIONS[0], *distinct.values()]
    compiled = [lowered.compile(compiler_options=o or None) for o in spellings]
    runners = [timed_call(jax, c, args) for c in compiled]
    for run in runners:
        run()
    medians = measure(runners, CHECK, np.random.default_rng(seed)).median_ns
    default = float(np.median(medians[:2]))
    at = {key: default / float(m) for key, m in zip(distinct, medians[2:], strict=True)}
    return {
        s: at[json.dumps(o, sort_keys=True)] if o else 1.0 for s, o in choices.items()
    }


def main() -> None:
    target = machine.target()
    fixed = fixed_options(target)
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="real-fleet-") as tmp:
        workdir = Path(tmp)
        server = serve(workdir).start()
        url = server.url
        try:
            for i, name in enumerate(names()):
                model = tune(name, url, "model", 0, workdir / "cache")
                rand = tune(name, url, "random", i + 1, workdir / "cache")
                choices = {
                    "model": model["compiler_options"],
                    "random": rand["compiler_options"],
                    "fixed": fixed,
                }
                speed = remeasure(name, choices, i)
                row = {
                    "program": name,
                    **speed,
                    "model_options": short(choices["model"]),
                    "random_options": short(choices["random"]),
                    "model_rounds": [r.get("shaping") for r in model["rounds"]],
                    "tune_s": {
                        "model": round(model["seconds"], 1),
                        "random": round(rand["seconds"], 1),
                    },
                }
                rows.append(row)
                print(
                    f"{name}: model {speed['model']:.3f}  random {speed['random']:.3f}  "
                    f"fixed {speed['fixed']:.3f}",
                    file=sys.stderr,
                    flush=True,
                )
            time.sleep(2)  # one more fleet refresh after the last feedback
            targets = httpx.get(f"{url}/v1/targets", timeout=10).json()
        finally:
            server.stop()
    result = {
        "target": target,
        "cpu": machine.describe(),
        "budget": BUDGET,
        "fixed_options": short(fixed),
        "programs": rows,
        "geomean": {
            s: geomean([r[s] for r in rows]) for s in ("model", "random", "fixed")
        },
        "worst": {s: min(r[s] for r in rows) for s in ("model", "random", "fixed")},
        "service_targets": targets,
        "wall_s": round(time.monotonic() - started, 1),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))


def table(result: dict[str, Any]) -> str:
    lines = [
        "| program | model | random | fixed | model's options |",
        "|---|---|---|---|---|",
    ]
    for r in result["programs"]:
        lines.append(
            f"| {r['program']} | {r['model']:.3f} | {r['random']:.3f} | "
            f"{r['fixed']:.3f} | {r['model_options']} |"
        )
    g = result["geomean"]
    lines.append(
        f"| **geomean** | **{g['model']:.3f}** | **{g['random']:.3f}** | "
        f"**{g['fixed']:.3f}** | fixed: {result['fixed_options']} |"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
