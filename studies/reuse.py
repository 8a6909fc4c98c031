"""``python -m xla_costmodel.studies.reuse``: tuned once, fast everywhere, for real.

Two tuners of this machine with separate state (their own crash journals and jax
caches) and separate writer tokens, against one ``costmodel serve`` that requires
tokens (``COSTMODEL_FEEDBACK_AUTH=token``, an empty SQLite database):

1. Tuner A tunes each program of ``examples/fleet_programs.py`` with ``costmodel
   tune FILE:NAME --budget 8 --json`` (strategy model): its decisions are stored.
2. Tuner B (another machine of the same CPU, as far as the service can tell) runs
   the same command on the same programs afterwards; ``--reuse`` is the default, so
   it verifies A's decision instead of searching (compiled and output-checked in
   its process, timed in a fresh one: ``clients/xla/confirm.py``).
3. Both choices are measured again in this process against two separately compiled
   copies of the default (``real_fleet.remeasure``).
4. For each program, a fresh Python process calls the drop-in ``jit(fn,
   server=URL)`` once and reports ``f.report``; the service's
   ``costmodel_best_lookups_total`` counts the requests it made.

Writes ``studies/results/reuse.json`` and prints a Markdown table. Goals
(issue 26): B compiles at most 1 candidate per program A decided, keeps >= 95 % of
A's speedup, and spends <= 30 % of A's tuning wall time; ``jit`` makes one request
and adds <= 50 ms. Measure on a quiet machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from xla_costmodel.bench import require_harness
from xla_costmodel.clients.xla.programs import short
from xla_costmodel.studies.fleet import geomean
from xla_costmodel.studies.real_fleet import COMMAND, PROGRAMS, names, remeasure
from xla_costmodel.tpugraphs import machine

OUT = Path("studies/results/reuse.json")
BUDGET = 8
# One jit call in a fresh process: the program's first call, reported as JSON.
JIT_CODE = """
import dataclasses, json, sys
from xla_costmodel.clients.xla import jit
from xla_costmodel.clients.xla.programs import load_program
fn, args = load_program(sys.argv[1])
f = jit(fn, server=sys.argv[2])
f(*args)
text = f.lower(*args).as_text(dialect="hlo")
report = dataclasses.asdict(f.report)
report["instructions"] = sum(" = " in line for line in text.splitlines())
print(json.dumps(report))
"""


def token(workdir: Path, name: str) -> str:
    """``costmodel tokens create NAME`` on the service's database: the token."""
    env = {**os.environ, "COSTMODEL_DATA_DIR": str(workdir / "data")}
    done = subprocess.run(
        [*COMMAND, "tokens", "create", name, "--target", machine.target()],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def tune(name: str, url: str, secret: str, cache: Path) -> dict[str, Any]:
    """``costmodel tune`` as one tuner runs it; adds ``wall_s`` (the whole command)."""
    argv = [*COMMAND, "tune", f"{PROGRAMS}:{name}", "--server", url]
    argv += ["--budget", str(BUDGET), "--json"]
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "COSTMODEL_TOKEN": secret}
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    report = dict(json.loads(done.stdout))
    report["wall_s"] = time.monotonic() - started
    return report


def lookups(url: str) -> float:
    """``costmodel_best_lookups_total`` summed over its labels."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    pattern = r"^costmodel_best_lookups_total\{[^}]*\} ([0-9.e+]+)$"
    return sum(float(v) for v in re.findall(pattern, text, re.MULTILINE))


def jit_once(name: str, url: str) -> dict[str, Any]:
    before = lookups(url)
    argv = [sys.executable, "-c", JIT_CODE, f"{PROGRAMS}:{name}", url]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    report = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    report["requests"] = lookups(url) - before
    return report


def compiles(report: dict[str, Any]) -> int:
    """Candidate configs a run compiled (the default's controls not counted)."""
    return len(report["measured"]) + len(report["failed"])


def main() -> None:
    # Before any import of the process harness: an install without it says so.
    require_harness("python -m xla_costmodel.studies.reuse")
    from xla_costmodel.harness import ServiceServer

    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="reuse-") as tmp:
        workdir = Path(tmp)
        env = {
            "COSTMODEL_DATA_DIR": str(workdir / "data"),
            "COSTMODEL_FEEDBACK_AUTH": "token",
        }
        server = ServiceServer(workdir, env, argv=[*COMMAND, "serve"]).start()
        try:
            tokens = {t: token(workdir, f"tuner-{t}") for t in ("a", "b")}
            programs = names()
            first = {
                n: tune(n, server.url, tokens["a"], workdir / "a") for n in programs
            }
            second = {
                n: tune(n, server.url, tokens["b"], workdir / "b") for n in programs
            }
            for i, name in enumerate(programs):
                a, b = first[name], second[name]
                speed, _ = remeasure(
                    name, {"a": a["compiler_options"], "b": b["compiler_options"]}, i
                )
                jitted = jit_once(name, server.url)
                rows.append(_row(name, a, b, speed, jitted))
                print(_line(rows[-1]), file=sys.stderr, flush=True)
        finally:
            server.stop()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    result = summary(rows, time.monotonic() - started)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))


def _row(
    name: str,
    a: dict[str, Any],
    b: dict[str, Any],
    speed: dict[str, float],
    jitted: dict[str, Any],
) -> dict[str, Any]:
    return {
        "program": name,
        "a": speed["a"],
        "b": speed["b"],
        "a_options": short(a["compiler_options"]),
        "b_options": short(b["compiler_options"]),
        "a_decided": bool(a.get("decision_stored")),
        "b_reused": b["reused"],
        "b_verified": b["verified"],
        "b_refuted": b.get("refuted"),
        "a_confirmed": a.get("confirmed"),
        "load": {"a": a.get("load"), "b": b.get("load")},
        "a_compiles": compiles(a),
        "b_compiles": compiles(b),
        "a_tune_s": a["seconds"],
        "b_tune_s": b["seconds"],
        "a_wall_s": a["wall_s"],
        "b_wall_s": b["wall_s"],
        "compiler": b["compiler"],
        "jit": {
            k: jitted.get(k)
            for k in (
                "source",
                "added_ms",
                "lower_ms",
                "compile_ms",
                "requests",
                "instructions",
                "reason",
            )
        },
    }


def _line(r: dict[str, Any]) -> str:
    return (
        f"{r['program']}: A {r['a']:.3f} ({r['a_compiles']} compiles, "
        f"{r['a_tune_s']:.1f} s)  B {r['b']:.3f} ({r['b_compiles']}, "
        f"{r['b_tune_s']:.1f} s, reused={r['b_reused']})  jit {r['jit']['source']} "
        f"+{r['jit']['added_ms']:.1f} ms"
    )


def summary(rows: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    decided = [r for r in rows if r["a_decided"]]
    ga, gb = geomean([r["a"] for r in rows]), geomean([r["b"] for r in rows])
    return {
        "target": machine.target(),
        "cpu": machine.describe(),
        "compiler": machine.compiler(),
        "budget": BUDGET,
        "programs": rows,
        "geomean": {"a": ga, "b": gb},
        # Of the gain over the default, B keeps this share (1.0 when A had none).
        "b_keeps": (gb - 1) / (ga - 1) if ga > 1 else 1.0,
        "b_over_a": gb / ga,
        "b_compiles_max_where_decided": max(
            (r["b_compiles"] for r in decided), default=None
        ),
        "reused": sum(r["b_reused"] for r in rows),
        "tune_s": {
            "a": sum(r["a_tune_s"] for r in rows),
            "b": sum(r["b_tune_s"] for r in rows),
        },
        "wall_s": {
            "a": sum(r["a_wall_s"] for r in rows),
            "b": sum(r["b_wall_s"] for r in rows),
        },
        "jit_added_ms_max": max(r["jit"]["added_ms"] for r in rows),
        "jit_requests": sorted({r["jit"]["requests"] for r in rows}),
        "jit_sources": sorted({r["jit"]["source"] for r in rows}),
        "study_s": round(wall_s, 1),
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        "| program | A | B | B compiles | A s | B s | jit | jit +ms | instr. |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["programs"]:
        j = r["jit"]
        lines.append(
            f"| {r['program']} | {r['a']:.3f} | {r['b']:.3f} | {r['b_compiles']} | "
            f"{r['a_tune_s']:.1f} | {r['b_tune_s']:.1f} | {j['source']} | "
            f"{j['added_ms']:.1f} | {j['instructions']} |"
        )
    g, t = result["geomean"], result["tune_s"]
    lines.append(
        f"| **geomean / total** | **{g['a']:.3f}** | **{g['b']:.3f}** | "
        f"max {result['b_compiles_max_where_decided']} | {t['a']:.0f} | "
        f"{t['b']:.0f} | | max {result['jit_added_ms_max']:.1f} | |"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
