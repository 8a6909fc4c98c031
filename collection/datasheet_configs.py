"""The datasheet's config sections: which specs the sidecars hold, what each column
means, which options matter, the best single option set.

A folder may hold programs collected in several specs (``xla_cpu/1`` files beside
``xla_cpu/2`` ones): every row is read in today's width (``specs.side_rows``), so a
column's effect pools the programs where it varied and an option set is matched
across programs by content, never by its index in one spec's sample.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from xla_costmodel.clients.xla import spec_rows
from xla_costmodel.collection import specs
from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2

COLUMN_MEANING = {
    "ynn": "`xla_cpu_experimental_ynn_fusion_type` contains `LIBRARY_FUSION_TYPE_{}`",
    "disable": "`xla_disable_hlo_passes` contains `{}`",
    "scheduler": "`xla_cpu_scheduler_type` = `CPU_SCHEDULER_TYPE_{}` (one-hot)",
    "small": f"`{xla_cpu2.EXTRA_KEY}` holds `{xla_cpu2.THRESHOLD_KEY}={{}}` (one-hot)",
}
PASS_OF = {f"disable_{p.replace('-', '_')}": p for p in xla_cpu.PASSES}
LEVEL_OF = {
    f"small_while_loop_{n}": level
    for n, level in zip(
        xla_cpu2.THRESHOLD_NAMES, xla_cpu2.THRESHOLD_LEVELS, strict=True
    )
}


def spec_label(side: dict[str, Any]) -> str:
    """A sidecar's spec and its column count, e.g. ``xla_cpu/2 (20)``."""
    return f"{side['spec']} ({len(side['columns'])})"


def specs_held(sides: list[dict[str, Any]]) -> str:
    """The specs of ``sides``, newest first: "`xla_cpu/2` [C,20]: 15 programs; ..."."""
    counts = Counter((str(s["spec"]), len(s["columns"])) for s in sides)
    return "; ".join(
        f"`{spec}` [C,{width}]: {n} programs"
        for (spec, width), n in sorted(counts.items(), reverse=True)
    )


def _meaning(name: str) -> str:
    group, _, rest = name.partition("_")
    if name in PASS_OF:
        return COLUMN_MEANING["disable"].format(PASS_OF[name])
    if name in LEVEL_OF:
        level = LEVEL_OF[name]
        if level == xla_cpu2.THRESHOLD_DEFAULT:
            return f"no `{xla_cpu2.THRESHOLD_KEY}` entry: XLA's {level} bytes (one-hot)"
        return COLUMN_MEANING["small"].format(level)
    if group in COLUMN_MEANING:
        return COLUMN_MEANING[group].format(rest.upper())
    if name == "use_fusion_emitters":
        return "`xla_cpu_use_fusion_emitters` = true"
    return "`xla_cpu_copy_insertion_use_region_analysis` = true"


def section() -> list[str]:
    """The datasheet's "Configs" section: today's spec's columns and sampling."""
    return [
        f"## Configs: the `{specs.TODAY}` columns",
        "Every column is a 0/1 bit; only non-default options are passed to XLA "
        "(`to_options(default_row())` is empty). Columns 0-16 are the "
        f"`{xla_cpu.SPEC}` columns in the same order; an `{xla_cpu.SPEC}` row reads "
        f"as the `{xla_cpu2.SPEC}` row with `small_while_loop_default` set (the "
        "threshold at XLA's default). The default ynn set {REDUCE, INDIVIDUAL_DOT, "
        "INDIVIDUAL_CONVOLUTION} was determined by comparing optimized HLO under every "
        "subset with the default compile. Sampling (`xla_cpu.sample`, "
        "`xla_cpu2.sample`): each ynn bit p=0.5, each pass disabled p=0.2, scheduler "
        "uniform, fusion emitters off p=0.25, region analysis on p=0.3; in "
        f"`{xla_cpu2.SPEC}` each non-default threshold level p=0.25, rows 1 and 2 the "
        "default with the threshold at 65536 and at 1e9; rows distinct. A row setting "
        "a column the collecting jaxlib rejects is never compiled (see Dropped and "
        "failed).",
        "",
        *column_rows(),
        "",
        "Left out: `xla_cpu_enable_fast_math` and `xla_cpu_opt_preset` (change "
        "numerics); `xla_cpu_max_isa`, `xla_cpu_prefer_vector_width`, "
        "`xla_cpu_use_xnnpack`, the xnn fusion options (no change to the optimized HLO "
        "or runtime in probes); `dot_decomposer` (can fail to compile); the LLVM "
        f"options of `{xla_cpu2.EXTRA_KEY}` (mostly slower).",
        "",
    ]


def column_rows() -> list[str]:
    """Today's spec's columns: index, name, the option a 1 sets, the default bit."""
    spec = specs.today()
    lines = ["| col | name | 1 means | default |", "|---|---|---|---|"]
    default = spec.default_row()
    for k, name in enumerate(spec.COLUMNS):
        lines.append(f"| {k} | `{name}` | {_meaning(name)} | {int(default[k])} |")
    return lines


def best_single_config(ok: list[dict[str, Any]]) -> tuple[Any, float, int] | None:
    """The row (today's width) with the lowest geometric-mean runtime/default over
    the programs that measured it: (row, geomean, programs). A reference point,
    chosen in-sample; rows matched by content across specs."""
    logs: dict[bytes, list[float]] = {}
    for s in ok:
        default = s["config_runtime_ns"][0]
        for row, ns in zip(specs.side_rows(s), s["config_runtime_ns"], strict=True):
            logs.setdefault(row.tobytes(), []).append(float(np.log(ns / default)))
    if not logs:
        return None
    full = max(len(v) for v in logs.values())
    key = min(
        (r for r, v in logs.items() if len(v) == full), key=lambda r: np.mean(logs[r])
    )
    return np.frombuffer(key, np.float32), float(np.exp(np.mean(logs[key]))), full


def best_single_line(ok: list[dict[str, Any]]) -> list[str]:
    """The datasheet line on ``best_single_config`` (none without programs)."""
    single = best_single_config(ok)
    if single is None:
        return []
    row, geo, n = single
    flat = spec_rows.options(row, specs.today()).flat()
    return [
        f"- the single sampled option set with the best geometric mean over all {n} "
        f"programs that measured it (chosen in-sample, so optimistic): {geo:.3f} x "
        f"default; its options: `{flat}`"
    ]


def option_effects(ok: list[dict[str, Any]]) -> list[str]:
    """Per column: median over programs of geomean(runtime | bit 1) / geomean(bit 0)."""
    lines = [
        "| column | median effect of setting it (1 vs 0) | programs where it helps > 5 % |",
        "|---|---|---|",
    ]
    rows = [specs.side_rows(s) for s in ok]
    for k, name in enumerate(specs.today().COLUMNS):
        effects = []
        for s, r in zip(ok, rows, strict=True):
            bits = r[:, k]
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


def skipped_lines(sides: list[dict[str, Any]]) -> list[str]:
    """The columns the collecting jaxlib rejected (rows setting one never compiled)."""
    said: dict[str, set[str]] = {}
    for s in sides:
        for column, why in s.get("skipped_columns", {}).items():
            said.setdefault(f"`{column}` ({s['spec']}): {why}", set()).add(s["name"])
    if not said:
        return ["No column was rejected by the collecting jaxlib."]
    return [
        f"- {what}; rows setting it were not compiled ({len(names)} programs)"
        for what, names in sorted(said.items())
    ]
