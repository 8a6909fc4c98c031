"""``python -m xla_costmodel.studies.jit_cost``: what ``jit`` adds to a program's first
call, by program size, with a fresh decision stored for it.

For chains of 250 to 1,700 elementwise layers (about 1,500 to 10,200 HLO
instructions; elementwise so that XLA's own compile stays short), one
``costmodel serve`` (empty database) stores a decision for each program (found by
its graph id, featurized once here, and its HLO fingerprint); then, for each
program, ``REPEATS`` fresh Python processes call ``jit(fn, server=URL)`` once and
report ``f.report``: ``added_ms`` (printing and fingerprinting the HLO, the target
and compiler names, the one lookup) beside jax's own ``lower_ms`` and
``compile_ms``. Writes ``studies/results/jit_cost.json`` and prints a table.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from xla_costmodel.clients import CostModelClient, Decision, Hlo, prepare_graph
from xla_costmodel.clients.xla.reuse import fingerprint
from xla_costmodel.harness import ServiceServer
from xla_costmodel.studies.real_fleet import COMMAND
from xla_costmodel.tpugraphs import machine, xla_cpu

OUT = Path("studies/results/jit_cost.json")
LAYERS = (250, 1000, 1700)
REPEATS = 2
# The program, built the same way here and in each fresh process.
PROGRAM = """
import jax, jax.numpy as jnp

def build(layers):
    def fn(x, w):
        for i in range(layers):
            x = jnp.tanh(x * w[i % 4] + 0.5 * x)
        return x.sum()
    return fn, (jnp.ones((8, 32), jnp.float32), jnp.ones((4, 8, 32), jnp.float32))
"""
JIT_CODE = (
    PROGRAM
    + """
import dataclasses, json, sys
from xla_costmodel.clients.xla import jit
fn, args = build(int(sys.argv[1]))
f = jit(fn, server=sys.argv[2])
f(*args)
print(json.dumps(dataclasses.asdict(f.report)))
"""
)


def build(layers: int) -> tuple[Any, tuple[Any, ...]]:
    scope: dict[str, Any] = {}
    exec(PROGRAM, scope)  # the text the fresh processes run
    fn, args = scope["build"](layers)
    return fn, tuple(args)


def decide(url: str, layers: int) -> dict[str, Any]:
    """Store a decision for the ``layers`` program; its size and ids."""
    import jax

    fn, args = build(layers)
    lowered = jax.jit(fn).lower(*args)
    text = lowered.as_text(dialect="hlo")
    graph = prepare_graph(Hlo(text, configurable=None))
    # The default, decided: an option set made up for a program nobody tuned could
    # crash XLA (one did, at 2,000 layers); what jit adds does not depend on it.
    row = xla_cpu.default_row()
    decision = Decision(
        graph_id=graph.graph_id,
        config=tuple(float(v) for v in row),
        compiler_options={},
        speedup=1.0,
        speedup_low=1.0,
        pairs=0,
        budget=8,
        strategy="model",
        kept_default=True,
        target=machine.target(),
        compiler=machine.compiler(),
        hlo_fingerprint=fingerprint(lowered),
    )
    with CostModelClient(url) as client:
        client.record_decision("xla_cpu", decision)
    return {
        "layers": layers,
        "instructions": sum(" = " in line for line in text.splitlines()),
        "hlo_bytes": len(text),
    }


def first_call(url: str, layers: int) -> dict[str, Any]:
    argv = [sys.executable, "-c", JIT_CODE, str(layers), url]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="jit-cost-") as tmp:
        env = {"COSTMODEL_DATA_DIR": str(Path(tmp) / "data")}
        server = ServiceServer(Path(tmp), env, argv=[*COMMAND, "serve"]).start()
        try:
            for layers in LAYERS:
                row = decide(server.url, layers)
                reports = [first_call(server.url, layers) for _ in range(REPEATS)]
                row["sources"] = sorted({r["source"] for r in reports})
                for key in ("added_ms", "lower_ms", "compile_ms"):
                    row[key] = float(np.median([r[key] for r in reports]))
                row["added_ms_max"] = max(r["added_ms"] for r in reports)
                rows.append(row)
                print(row, file=sys.stderr, flush=True)
        finally:
            server.stop()
    result = {"cpu": machine.describe(), "compiler": machine.compiler(), "rows": rows}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(
        "| layers | instructions | HLO bytes | added ms (median, max) | lower ms | compile ms |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['layers']} | {r['instructions']} | {r['hlo_bytes']:,} | "
            f"{r['added_ms']:.1f}, {r['added_ms_max']:.1f} | {r['lower_ms']:.0f} | "
            f"{r['compile_ms']:.0f} |"
        )


if __name__ == "__main__":
    main()
