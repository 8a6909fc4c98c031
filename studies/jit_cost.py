"""``python -m xla_costmodel.studies.jit_cost``: what ``jit`` adds to a program's first
call, by program size, with a fresh decision stored for it, with and without the
output verification (``jit(..., verify=True)``, the default).

For chains of 250 to 1,700 elementwise layers (about 1,500 to 10,200 HLO
instructions; elementwise so that XLA's own compile stays short), one
``costmodel serve`` (empty database, writer tokens required) stores a measured
decision for each program, as a tuner would: the graph and the two rows' runtimes
as feedback first, then the decision with its paired runtimes (found by its graph
id, featurized once here, and its HLO fingerprint). Then, for each program and
each of ``verify`` off and on, ``--repeats`` fresh Python processes call
``jit(fn, server=URL, verify=...)`` once and report ``f.report``: ``added_ms``
(printing and fingerprinting the HLO, the target and compiler names, the one
lookup, and with ``verify`` compiling and running XLA's default and comparing
the outputs), ``verify_ms`` (that last part), jax's own ``lower_ms`` and
``compile_ms``, and ``first_call_ms``, the whole first call as the caller sees it.
The decided row (``ROW``: CSE off) changes nothing a 1,700-layer chain computes;
what it costs to verify does not depend on it. Timings the pairs claim do not
matter here (the study measures ``jit``, not the row). Writes
``studies/results/jit_cost.json`` (``--out``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from xla_costmodel.bench import require_harness
from xla_costmodel.clients import CostModelClient, Decision, Hlo, prepare_graph
from xla_costmodel.clients.xla.reuse import fingerprint
from xla_costmodel.studies.real_fleet import COMMAND
from xla_costmodel.studies.reuse import token
from xla_costmodel.tpugraphs import machine, xla_cpu2

OUT = Path("studies/results/jit_cost.json")
LAYERS = (250, 1000, 1700)
REPEATS = 2
MODEL = "xla_cpu"
# The decided row (``xla_cpu/2``): the default with CSE disabled (a valid, sampled
# row).
ROW = xla_cpu2.default_row()
ROW[xla_cpu2.COLUMNS.index("disable_cse")] = 1.0
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
import dataclasses, json, sys, time
from xla_costmodel.clients.xla import jit
fn, args = build(int(sys.argv[1]))
f = jit(fn, server=sys.argv[2], verify=sys.argv[3] == "on")
started = time.perf_counter()
jax.block_until_ready(f(*args))
first_call_ms = (time.perf_counter() - started) * 1e3
print(json.dumps({**dataclasses.asdict(f.report), "first_call_ms": first_call_ms}))
"""
)


def build(layers: int) -> tuple[Any, tuple[Any, ...]]:
    scope: dict[str, Any] = {}
    exec(PROGRAM, scope)  # the text the fresh processes run
    fn, args = scope["build"](layers)
    return fn, tuple(args)


def decide(url: str, secret: str, layers: int) -> dict[str, Any]:
    """Store a measured decision (``ROW``) for the ``layers`` program, as a tuner
    does: feedback for the graph, then the decision; its size and ids."""
    import jax

    fn, args = build(layers)
    lowered = jax.jit(fn).lower(*args)
    text = lowered.as_text(dialect="hlo")
    graph = prepare_graph(Hlo(text, configurable=None))
    target, compiler = machine.target(), machine.compiler()
    pairs = tuple((1_000_000 + 1_000 * i, 800_000 + 1_000 * i) for i in range(8))
    decision = Decision(
        graph_id=graph.graph_id,
        config=tuple(float(v) for v in ROW),
        paired_runtimes_ns=pairs,
        budget=8,
        strategy="model",
        kept_default=False,
        target=target,
        compiler=compiler,
        hlo_fingerprint=fingerprint(lowered),
    )
    with CostModelClient(url, token=secret) as client:
        client.feedback(
            MODEL,
            graph,
            np.asarray(pairs[0], np.int64),
            configs=np.stack([xla_cpu2.default_row(), ROW]),
            target=target,
            compiler=compiler,
        )
        client.record_decision(MODEL, decision)
    return {
        "layers": layers,
        "instructions": sum(" = " in line for line in text.splitlines()),
        "hlo_bytes": len(text),
    }


def first_call(url: str, layers: int, verify: bool) -> dict[str, Any]:
    argv = [sys.executable, "-c", JIT_CODE, str(layers), url, "on" if verify else "off"]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def measure(url: str, layers: int, verify: bool, repeats: int) -> dict[str, Any]:
    """``repeats`` fresh processes' first calls: medians and the worst."""
    reports = [first_call(url, layers, verify) for _ in range(repeats)]
    row: dict[str, Any] = {
        "verify": verify,
        "sources": sorted({r["source"] for r in reports}),
        "verified_ok": sorted({str((r["outputs"] or {}).get("ok")) for r in reports}),
    }
    for key in ("added_ms", "verify_ms", "lower_ms", "compile_ms", "first_call_ms"):
        row[key] = float(np.median([r[key] for r in reports]))
    row["added_ms_max"] = max(r["added_ms"] for r in reports)
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m xla_costmodel.studies.jit_cost",
        description="What jit adds to a program's first call, verify off and on.",
    )
    parser.add_argument("--layers", type=int, nargs="+", default=list(LAYERS))
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--out", type=Path, default=OUT)
    opts = parser.parse_args(argv)
    # Before any import of the process harness: an install without it says so.
    require_harness("python -m xla_costmodel.studies.jit_cost")
    from xla_costmodel.harness import ServiceServer

    rows = []
    with tempfile.TemporaryDirectory(prefix="jit-cost-") as tmp:
        env = {
            "COSTMODEL_DATA_DIR": str(Path(tmp) / "data"),
            "COSTMODEL_FEEDBACK_AUTH": "token",
        }
        server = ServiceServer(Path(tmp), env, argv=[*COMMAND, "serve"]).start()
        try:
            secret = token(Path(tmp), "jit-cost")
            for layers in opts.layers:
                program = decide(server.url, secret, layers)
                for verify in (False, True):
                    row = program | measure(server.url, layers, verify, opts.repeats)
                    rows.append(row)
                    print(row, file=sys.stderr, flush=True)
        finally:
            server.stop()
    result = {
        "cpu": machine.describe(),
        "compiler": machine.compiler(),
        "row": xla_cpu2.to_options(ROW).flat(),
        "rows": rows,
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(result, indent=1) + "\n")
    print(
        "| layers | instructions | verify | added ms (median, max) | of it verify ms "
        "| first call ms | lower ms | compile ms | source |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['layers']} | {r['instructions']} | {'on' if r['verify'] else 'off'} "
            f"| {r['added_ms']:.1f}, {r['added_ms_max']:.1f} | {r['verify_ms']:.1f} "
            f"| {r['first_call_ms']:.0f} | {r['lower_ms']:.0f} | {r['compile_ms']:.0f} "
            f"| {', '.join(r['sources'])} |"
        )


if __name__ == "__main__":
    main()
