"""``python -m xla_costmodel.collection.datasheet DIR``: DIR/DATASHEET.md from the sidecars.

Every number in the datasheet is computed here from the ``<name>.json`` sidecars the
collector wrote, so the tables match the files exactly.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from xla_costmodel.collection import cross_cpu, zoo
from xla_costmodel.tpugraphs import machine, xla_cpu

COLUMN_MEANING = {
    "ynn": "`xla_cpu_experimental_ynn_fusion_type` contains `LIBRARY_FUSION_TYPE_{}`",
    "disable": "`xla_disable_hlo_passes` contains `{}`",
    "scheduler": "`xla_cpu_scheduler_type` = `CPU_SCHEDULER_TYPE_{}` (one-hot)",
}


def load(folder: Path) -> list[dict[str, Any]]:
    """Sidecars of ``folder`` in zoo order (unknown names last, sorted)."""
    order = {p.name: k for k, p in enumerate(zoo.PROGRAMS)}
    sides = [json.loads(p.read_text()) for p in folder.glob("*.json")]
    return sorted(sides, key=lambda s: (order.get(s["name"], len(order)), s["name"]))


def _q(values: list[float], fmt: str = "{:.3f}") -> str:
    if not values:
        return "-"
    qs = np.quantile(values, [0.0, 0.25, 0.5, 0.75, 1.0])
    return " / ".join(fmt.format(q) for q in qs)


def _column_rows() -> list[str]:
    lines = ["| col | name | 1 means | default |", "|---|---|---|---|"]
    default = xla_cpu.default_row()
    for k, name in enumerate(xla_cpu.COLUMNS):
        group, _, rest = name.partition("_")
        if group in COLUMN_MEANING:
            value = rest.upper() if group != "disable" else xla_cpu.PASSES[k - 5]
            meaning = COLUMN_MEANING[group].format(value)
        elif name == "use_fusion_emitters":
            meaning = "`xla_cpu_use_fusion_emitters` = true"
        else:
            meaning = "`xla_cpu_copy_insertion_use_region_analysis` = true"
        lines.append(f"| {k} | `{name}` | {meaning} | {int(default[k])} |")
    return lines


def _program_rows(ok: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| program | family | what | nodes | configs (failed) | default ms | best/default "
        "| worst/best | distinct executables | noise | rounds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in ok:
        distinct = len({h for h in s["optimized_hlo_sha1"] if h})
        lines.append(
            f"| {s['name']} | {s['family']} | {s['description']} | {s['nodes']} | "
            f"{s['configs_measured']} ({len(s['compile_failures'])}) | {s['default_ms']:.2f} | "
            f"{s['best_over_default']:.3f} | {s['worst_over_best']:.2f} | {distinct} | "
            f"{100 * s['noise']:.1f} % | {s['rounds']} |"
        )
    return lines


def _family_rows(ok: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| family | programs | default ms (range) | best/default (median) |",
        "|---|---|---|---|",
    ]
    fams: dict[str, list[dict[str, Any]]] = {}
    for s in ok:
        fams.setdefault(s["family"], []).append(s)
    for fam, members in fams.items():
        ms = [s["default_ms"] for s in members]
        ratio = float(np.median([s["best_over_default"] for s in members]))
        lines.append(
            f"| {fam} | {len(members)} | {min(ms):.1f}-{max(ms):.1f} | {ratio:.3f} |"
        )
    return lines


def best_single_config(ok: list[dict[str, Any]]) -> tuple[int, float, int] | None:
    """The sampled row with the lowest geometric-mean runtime/default over the programs
    that measured it: (row, geomean, programs). A reference point, chosen in-sample."""
    logs: dict[int, list[float]] = {}
    for s in ok:
        default = s["config_runtime_ns"][0]
        for row, ns in zip(s["rows"], s["config_runtime_ns"], strict=True):
            logs.setdefault(row, []).append(float(np.log(ns / default)))
    if not logs:
        return None
    full = max(len(v) for v in logs.values())
    row = min(
        (r for r, v in logs.items() if len(v) == full), key=lambda r: np.mean(logs[r])
    )
    return row, float(np.exp(np.mean(logs[row]))), full


def _failures(sides: list[dict[str, Any]]) -> list[str]:
    counts: Counter[str] = Counter()
    for s in sides:
        for f in s.get("compile_failures", []):
            counts[f["error"].split(":")[0] + ": " + str(f["options"])[:120]] += 1
    if not counts:
        return ["No config failed to compile."]
    return [f"- {n} x {what}" for what, n in counts.most_common(10)]


def _restarts(folder: Path) -> int:
    log = folder / "progress.log"
    return log.read_text().count("restarting") if log.exists() else 0


def _wall(folder: Path) -> str:
    log = folder / "progress.log"
    if not log.exists():
        return "?"
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    return f"{lines[0][:19]} to {lines[-1][:19]} (progress.log)"


def _max_diff(side: dict[str, Any]) -> float:
    diffs = [d for d in side.get("max_rel_diff", []) if d is not None]
    return max(diffs, default=0.0)


def _option_effects(ok: list[dict[str, Any]]) -> list[str]:
    """Per column: median over programs of geomean(runtime | bit 1) / geomean(bit 0)."""
    lines = [
        "| column | median effect of setting it (1 vs 0) | programs where it helps > 5 % |",
        "|---|---|---|",
    ]
    for k, name in enumerate(xla_cpu.COLUMNS):
        effects = []
        for s in ok:
            bits = xla_cpu.sample(max(s["rows"]) + 1, int(s["seed"]))[s["rows"], k]
            logs = np.log(np.asarray(s["config_runtime_ns"], np.float64))
            if bits.min() != bits.max():
                effects.append(
                    float(np.exp(logs[bits == 1].mean() - logs[bits == 0].mean()))
                )
        if effects:
            helps = sum(e < 0.95 for e in effects)
            lines.append(
                f"| `{name}` | {np.median(effects):.3f} | {helps} of {len(effects)} |"
            )
    return lines


def render(folder: Path) -> str:
    sides = load(folder)
    ok = [s for s in sides if s["status"] == "ok"]
    first = sides[0] if sides else {}
    out = [
        *_overview(ok, first),
        *_spread(ok, first),
        *_noise_and_protocol(folder, sides, ok, first),
        *_machine_and_failures(folder, sides, ok, first),
    ]
    return "\n".join(out)


def _overview(ok: list[dict[str, Any]], first: dict[str, Any]) -> list[str]:
    """What the dataset is: its files, programs, families and config columns."""
    return [
        "# xla_cpu dataset: datasheet",
        "",
        "Generated by `python -m xla_costmodel.collection.datasheet` from the sidecars in this folder; "
        "collected with `costmodel collect` (`make collect`).",
        "",
        "## What it is",
        f"{len(ok)} real JAX / keras programs in {len({s['family'] for s in ok})} architecture families, "
        f"each compiled by XLA:CPU under {max((s['configs_measured'] for s in ok), default=0)} sampled "
        f"compiler-option sets (spec `{xla_cpu.SPEC}`, row 0 = XLA's defaults) and measured on one core "
        f"of one machine: {sum(s['configs_measured'] for s in ok)} (program, config) runtimes. "
        "Per program: `<name>.npz` in TpuGraphs format (`node_feat`, `node_opcode`, `edge_index`, "
        "`node_splits` from the pre-optimization HLO; `config_feat` [C,17] float32; `config_runtime` "
        "int64 ns; `config_runtime_normalizers` = the default config's runtime; `config_spec` = "
        f'`"{xla_cpu.SPEC}"`), `<name>.hlo.txt` (pre-optimization HLO) and `<name>.json` (options per '
        "row, compile failures, per-round minima, controls, hashes of the optimized HLO, machine, "
        "versions, phase times). The same sampled rows (seed "
        f"{first.get('seed')}) are used for every program, so a fixed option set can be compared across programs.",
        "",
        "## Programs and families",
        "Evaluation should hold out whole families. *noise* is the controls' disagreement (below); "
        "*distinct executables* counts different optimized-HLO texts among the sampled configs "
        "(configs whose options XLA ignores for this program compile to the same executable).",
        "",
        *_family_rows(ok),
        "",
        *_program_rows(ok),
        "",
        "## Configs: the `xla_cpu/1` columns",
        "Every column is a 0/1 bit; only non-default options are passed to XLA "
        "(`xla_cpu.to_options(default_row()) == {}`). The default ynn set {REDUCE, INDIVIDUAL_DOT, "
        "INDIVIDUAL_CONVOLUTION} was determined by comparing optimized HLO under every subset with "
        "the default compile. Sampling (`xla_cpu.sample`): each ynn bit p=0.5, each pass disabled "
        "p=0.2, scheduler uniform, fusion emitters off p=0.25, region analysis on p=0.3; rows distinct.",
        "",
        *_column_rows(),
        "",
        "Left out: `xla_cpu_enable_fast_math` (changes numerics); `xla_cpu_max_isa`, "
        "`xla_cpu_prefer_vector_width`, `xla_cpu_use_xnnpack`, the xnn fusion options (no change to "
        "the optimized HLO or runtime in probes); `dot_decomposer` (can fail to compile).",
        "",
    ]


def _spread(ok: list[dict[str, Any]], first: dict[str, Any]) -> list[str]:
    """How much the configs change runtimes, and which options matter."""
    single = best_single_config(ok)
    out = [
        "## Runtime spread",
        "Quantiles (min / 25 % / median / 75 % / max) over programs:",
        "",
        f"- best config / default: {_q([s['best_over_default'] for s in ok])}",
        f"- worst / best: {_q([s['worst_over_best'] for s in ok], '{:.2f}')}",
        f"- default runtime, ms: {_q([s['default_ms'] for s in ok], '{:.1f}')}",
        f"- programs where some config beats the default by > 5 %: "
        f"{sum(s['best_over_default'] < 0.95 for s in ok)} of {len(ok)}",
        f"- distinct optimized-HLO texts among the configs, per program: "
        f"{_q([len({h for h in s['optimized_hlo_sha1'] if h}) for s in ok], '{:.0f}')}",
    ]
    if single is not None:
        row, geo, n = single
        out.append(
            f"- the single sampled option set with the best geometric mean over all {n} programs "
            f"(row {row}, chosen in-sample, so optimistic): {geo:.3f} x default; its options: "
            f"`{xla_cpu.to_options(xla_cpu.sample(row + 1, int(first.get('seed', 0)))[row])}`"
        )
    out += [
        "",
        "Which options matter (runtime ratio of configs with the bit set to those without, "
        "geometric means within a program, median over programs; < 1 = faster):",
        "",
        *_option_effects(ok),
    ]
    return out


def _noise_and_protocol(
    folder: Path,
    sides: list[dict[str, Any]],
    ok: list[dict[str, Any]],
    first: dict[str, Any],
) -> list[str]:
    """How the runtimes were measured and how much repeated measurements disagree."""
    noise = [s["noise"] for s in ok]
    return [
        "",
        "## Noise",
        "Each program has its default config compiled three times (row 0 plus two controls, each "
        "spelled with one spec option at its default value so jax's compile cache, keyed by the "
        "options, compiles it anew; their optimized HLO is identical to row 0's: "
        f"{all(s.get('controls_same_optimized_hlo') for s in ok)} for every program); all are "
        "measured like every other config. Disagreement = slowest / fastest of the three - 1. Row 0's runtime (and so the "
        "normaliser) is their median. A program whose controls disagreed by more than "
        f"{100 * first.get('protocol', {}).get('noise_threshold', 0.05):.0f} % was measured again, "
        "and dropped if they still did.",
        "",
        f"- disagreement over programs (min / 25 % / median / 75 % / max): {_q([100 * n for n in noise], '{:.1f} %')}",
        f"- programs measured twice: {sum(len(s['attempts']) > 1 for s in ok)}",
        "",
        "## Protocol",
        "All configs of a program (and its controls) are compiled first; then rounds: each round "
        "visits every executable in a fresh random order, runs it once untimed, then "
        f"{first.get('protocol', {}).get('runs')} timed runs with `block_until_ready`, keeping the "
        f"minimum. {first.get('protocol', {}).get('min_rounds')}-{first.get('protocol', {}).get('max_rounds')} "
        "rounds (fewer when the run's time budget is short); the runtime is the median of the round "
        "minima. The process is pinned to one CPU before jax starts, so XLA:CPU's intra-op thread "
        "pool has one thread there; while compiling, the main thread may use both CPUs. Other work "
        "ran on the machine during collection (load averages: "
        f"{_q([s['load_average_start'][0] for s in sides if s.get('load_average_start')], '{:.2f}')} "
        "at program starts, min / 25 % / median / 75 % / max).",
        "",
        "Crash safety: an option set can make XLA:CPU segfault. Every compile and first run is "
        "bracketed in an fsync'ed journal; `costmodel collect` runs a worker process and restarts "
        "it after a crash, and the new worker leaves the crashed config out (recorded as a compile "
        "failure). In a first attempt, `ynn_eltwise` together with `disable_algsimp` crashed 3 of "
        "10 such configs on keras ResNet50, so `xla_cpu.sample` never draws that pair. "
        f"Restarts in this run: {_restarts(folder)}. Each config's first run is also compared with "
        "the default's output: largest relative difference over all configs, per program "
        f"(min / 25 % / median / 75 % / max): {_q([_max_diff(s) for s in ok], '{:.1e}')}.",
    ]


def _machine_and_failures(
    folder: Path,
    sides: list[dict[str, Any]],
    ok: list[dict[str, Any]],
    first: dict[str, Any],
) -> list[str]:
    """Where and with what the runtimes were measured, and what was left out."""
    mach = first.get("machine", {})
    dropped = [s for s in sides if s["status"] != "ok"]
    total_s = sum(s["phase_s"]["total"] for s in sides)
    return [
        "",
        "## Machine and versions",
        f"- CPU: {mach.get('cpu_model')} (family {mach.get('cpu_family')}, model {mach.get('cpu_model_id')}), "
        f"{mach.get('cores')} cores; ISA flags: {', '.join(mach.get('isa_flags', []))}",
        f"- measurement pinned to CPU {first.get('pinned_cpus')}; compile threads on {first.get('compile_cpus')}",
        f"- {mach.get('platform')}",
        f"- versions: {', '.join(f'{k} {v}' for k, v in first.get('versions', {}).items())}",
        compiler_line(sides),
        f"- collected {min((s['date'] for s in sides), default='?')} to {max((s['date'] for s in sides), default='?')}; "
        f"program time summed over sidecars: {total_s / 60:.1f} min; wall: {_wall(folder)}",
        "",
        "## Dropped and failed",
        *(
            [f"- {s['name']} ({s['family']}): {s.get('reason')}" for s in dropped]
            or ["No program was dropped."]
        ),
        "",
        "Compile failures (count x error: options):",
        *_failures(sides),
        "",
        *_other_cpu(folder, ok),
    ]


def compiler_line(sides: list[dict[str, Any]]) -> str:
    """The compiler the runtimes were measured under, as the service names it
    (``jaxlib X``: XLA:CPU is built into jaxlib), from every sidecar's versions."""
    found = sorted(
        {
            str(s["versions"]["jaxlib"])
            for s in sides
            if "jaxlib" in s.get("versions", {})
        }
    )
    if not found:
        return "- compiler: unknown (no sidecar records a jaxlib version)"
    missing = sum("jaxlib" not in s.get("versions", {}) for s in sides)
    names = " / ".join(f"jaxlib {v}" for v in found)
    tail = f"; {missing} sidecars record none" if missing else ""
    return (
        f"- compiler: {names} (XLA:CPU as built into jaxlib; the shipped seeds' "
        f"`compiler` in the model manifest){tail}"
    )


def _other_cpu(folder: Path, ok: list[dict[str, Any]]) -> list[str]:
    """The dataset's other targets (sibling folders ``../<target>/``): programs
    measured with the same protocol and sample on another CPU, compared with this
    folder's."""
    siblings = [
        d for d in folder.resolve().parent.glob("*/") if d.resolve() != folder.resolve()
    ]
    return cross_cpu.section([(sub.name, load(sub)) for sub in sorted(siblings)], ok)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0] if args else "datasets/xla_cpu/" + machine.target())
    (folder / "DATASHEET.md").write_text(render(folder))
    print(folder / "DATASHEET.md")


if __name__ == "__main__":
    main()
