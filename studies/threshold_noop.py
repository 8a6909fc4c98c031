"""``python -m xla_costmodel.studies.threshold_noop [--out FILE]``: does the loop
threshold of ``xla_cpu/2`` change the compile of a program without a while loop?

``xla_cpu2.for_program`` drops every row with a non-default threshold level for a
program whose graph has no while loop (they would be the same executables as their
default-level twins), so the tuner, the collection and the model see ``xla_cpu/1``'s
space there. This checks that rule on every zoo program: each is compiled with XLA's
defaults and with the threshold at each non-default level (``compile_with``), and the
optimized HLO texts are compared. No runtimes: compiles only (minutes). Writes
``studies/results/threshold_noop.json``.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from xla_costmodel.tpugraphs import machine, xla_cpu2

OUT = Path("studies/results/threshold_noop.json")


def _hash(compiled: Any) -> str:
    return hashlib.sha1(compiled.as_text().encode()).hexdigest()


def check_program(program: Any) -> dict[str, Any]:
    """One program's loops flag and whether each threshold level changed its HLO."""
    import jax

    from xla_costmodel.clients.xla.compile_options import compile_with
    from xla_costmodel.tpugraphs.hlo import featurize_hlo

    fn, args = program.build()
    lowered = jax.jit(fn).lower(*args)
    graph = featurize_hlo(lowered.as_text(dialect="hlo"), None)
    default = _hash(compile_with(lowered, xla_cpu2.CompilerOptions()))
    changed = {}
    for level in xla_cpu2.THRESHOLD_LEVELS[1:]:
        options = xla_cpu2.CompilerOptions(
            extra_options={xla_cpu2.THRESHOLD_KEY: str(level)}
        )
        changed[str(level)] = _hash(compile_with(lowered, options)) != default
    return {
        "name": program.name,
        "family": program.family,
        "loops": xla_cpu2.has_loops(graph.node_opcode),
        "changed": changed,
    }


def main(
    out: Annotated[Path, typer.Option("--out")] = OUT,
    programs: Annotated[str, typer.Option("--programs", help="Comma-separated.")] = "",
) -> None:
    from xla_costmodel.collection import zoo

    start = time.monotonic()
    rows = []
    for program in zoo.select([p for p in programs.split(",") if p] or None):
        rows.append(check_program(program))
        typer.echo(json.dumps(rows[-1]))
    without = [r for r in rows if not r["loops"]]
    result = {
        "machine": machine.describe(),
        "programs": len(rows),
        "without_loops": len(without),
        "without_loops_changed": [
            r["name"] for r in without if any(r["changed"].values())
        ],
        "with_loops_changed": sum(
            any(r["changed"].values()) for r in rows if r["loops"]
        ),
        "with_loops": len(rows) - len(without),
        "rows": rows,
        "wall_s": round(time.monotonic() - start, 1),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    typer.echo(json.dumps({k: v for k, v in result.items() if k != "rows"}))


if __name__ == "__main__":
    typer.run(main)
