"""The run's result: the flat JSON object ``--json`` prints, and the same as a table.

Every figure in ``KEYS`` is a number (or null for torch without torch); ratios are
computed here from figures measured in the same run. ``GOALS`` are the issue's targets;
the table marks each as met or missed, the JSON lists them under ``goals``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

# key -> (unit, what it is)
KEYS: dict[str, tuple[str, str]] = {
    "raw_scorer_configs_per_s": (
        "configs/s",
        "tile scorer alone, onnxruntime in process",
    ),
    "torch_eager_configs_per_s": (
        "configs/s",
        "same tile scorer, PyTorch eager in process",
    ),
    "http_binary_configs_per_s": ("configs/s", "POST /v1/rank, npz body, real client"),
    "http_json_configs_per_s": ("configs/s", "POST /v1/rank, JSON body, real client"),
    "http_over_raw": ("x", "http_binary / raw"),
    "peer_kserve_configs_per_s": (
        "configs/s",
        "KServe 0.21, same scorer, v2 REST binary tensors",
    ),
    "ours_over_kserve": ("x", "http_binary / peer_kserve"),
    "empty_route_ms": ("ms", "GET /livez round trip, keep-alive"),
    "rank_1_config_ms": ("ms", "POST /v1/rank of 1 config, real client"),
    "binary_over_json": ("x", "http_binary / http_json"),
    "layout_cold_ms": ("ms", "nlp graph, 64 configs, empty caches"),
    "layout_cached_ms": ("ms", "nlp graph, 64 configs, embedding cached in process"),
    "cache_speedup": ("x", "layout_cold / layout_cached"),
    "layout_redis_hit_ms": ("ms", "nlp graph, 64 configs, Redis hit only"),
    "layout_all_configs_ms": ("ms", "nlp graph, all 1,001 configs, cached"),
    "encoder_ms_nlp": ("ms", "layout encoder alone on the nlp graph"),
    "load_clients": ("", "concurrent clients"),
    "load_seconds": ("s", "load duration"),
    "load_requests": ("", "requests completed"),
    "load_errors": ("", "requests failed"),
    "load_p50_ms": ("ms", "latency median"),
    "load_p99_ms": ("ms", "latency 99th percentile"),
    "load_rps": ("req/s", "throughput"),
    "server_rss_mb_before": ("MB", "server RSS before load"),
    "server_rss_mb_after": ("MB", "server RSS after load"),
    "statements_per_rank": (
        "",
        "database statements per rank of a cached graph, PostgreSQL",
    ),
    "staleness_ms": (
        "ms",
        "feedback acked by one process to an adapted rank in another, max",
    ),
    "staleness_p50_ms": ("ms", "the same, median over the trials"),
    "throughput_2w_postgres_rps": (
        "req/s",
        "2 workers on PostgreSQL, 64-config ranks, peer clients",
    ),
    "throughput_2w_nodb_rps": ("req/s", "the same, 2 workers on a SQLite file"),
    "postgres_over_nodb": ("x", "throughput_2w_postgres / throughput_2w_nodb"),
}


@dataclass(frozen=True)
class Goal:
    text: str
    check: Callable[[Mapping[str, Any]], bool]


def _num(result: Mapping[str, Any], key: str) -> float:
    value = result.get(key)
    return float(value) if isinstance(value, int | float) else math.nan


GOALS: dict[str, Goal] = {
    "http_over_raw": Goal(">= 0.7", lambda r: _num(r, "http_over_raw") >= 0.7),
    "binary_over_json": Goal(">= 5", lambda r: _num(r, "binary_over_json") >= 5),
    "cache_speedup": Goal(">= 20", lambda r: _num(r, "cache_speedup") >= 20),
    "encoder_ms_nlp": Goal("< 1000", lambda r: _num(r, "encoder_ms_nlp") < 1000),
    "load_errors": Goal("== 0", lambda r: _num(r, "load_errors") == 0),
    # The "serving at scale" issue's goals: against a peer and against fixed costs.
    "ours_over_kserve": Goal(">= 3", lambda r: _num(r, "ours_over_kserve") >= 3),
    # The hot-path issue's: ahead of KServe at every size, p50 and under load, and
    # 3x under load at 10,000 configs.
    "ours_over_kserve_every_size": Goal(
        ">= 1 under load at every size",
        lambda r: _every_size_ratio(r, "ours_over_kserve_by_size") >= 1,
    ),
    "ours_over_kserve_p50_every_size": Goal(
        ">= 1 in p50 at every size",
        lambda r: _every_size_ratio(r, "ours_over_kserve_p50_by_size") >= 1,
    ),
    "ours_over_kserve_at_10000": Goal(
        ">= 3 under load at 10,000 configs",
        lambda r: _num(r.get("ours_over_kserve_by_size") or {}, "10000") >= 3,
    ),
    "statements_per_rank": Goal("== 0", lambda r: _num(r, "statements_per_rank") == 0),
    "staleness_ms": Goal("<= 100", lambda r: _num(r, "staleness_ms") <= 100),
    "postgres_over_nodb": Goal(
        ">= 0.9", lambda r: _num(r, "postgres_over_nodb") >= 0.9
    ),
    "rank_1_config_ms": Goal(
        "<= 1.5 x empty_route",
        lambda r: _num(r, "rank_1_config_ms") <= 1.5 * _num(r, "empty_route_ms"),
    ),
    "http_over_raw_at_scale": Goal(">= 0.4", lambda r: _num(r, "http_over_raw") >= 0.4),
    "load_p99_ms": Goal(
        "<= 3 x p50", lambda r: _num(r, "load_p99_ms") <= 3 * _num(r, "load_p50_ms")
    ),
}


def _every_size_ratio(result: Mapping[str, Any], key: str) -> float:
    """The smallest ours / KServe ratio over the peers phase's sizes."""
    ratios = result.get(key) or {}
    values = [v for v in ratios.values() if isinstance(v, int | float)]
    return min(values) if values and len(values) == len(ratios) else math.nan


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def add_ratios(result: dict[str, Any]) -> None:
    """The derived figures, from figures of this same run."""
    result["http_over_raw"] = ratio(
        result.get("http_binary_configs_per_s"), result.get("raw_scorer_configs_per_s")
    )
    result["binary_over_json"] = ratio(
        result.get("http_binary_configs_per_s"), result.get("http_json_configs_per_s")
    )
    result["cache_speedup"] = ratio(
        result.get("layout_cold_ms"), result.get("layout_cached_ms")
    )
    result["ours_over_kserve"] = ratio(
        result.get("http_binary_configs_per_s"), result.get("peer_kserve_configs_per_s")
    )
    rates = result.get("peer_throughput_configs_per_s") or {}
    result["ours_over_kserve_by_size"] = {
        size: ratio(row.get("ours"), row.get("kserve")) for size, row in rates.items()
    }
    latency = result.get("peer_latency_ms") or {}
    result["ours_over_kserve_p50_by_size"] = {
        size: ratio(row.get("kserve"), row.get("ours")) for size, row in latency.items()
    }
    result["goals"] = {key: goal.check(result) for key, goal in GOALS.items()}


# Null (with ``peer_kserve_note`` saying why) when KServe's virtualenv cannot be made.
PEER_KEYS = frozenset({"peer_kserve_configs_per_s", "ours_over_kserve"})
# Null (with ``fleet_note``) when PostgreSQL cannot run here.
FLEET_KEYS = frozenset(
    {
        "statements_per_rank",
        "staleness_ms",
        "staleness_p50_ms",
        "throughput_2w_postgres_rps",
        "throughput_2w_nodb_rps",
        "postgres_over_nodb",
    }
)


def missing_keys(result: Mapping[str, Any]) -> list[str]:
    """Keys absent or not numbers. The torch figure may be null, with the reason in
    ``torch_eager_note``: torch not installed, or no checkpoint of the served model;
    the KServe figures likewise, with ``peer_kserve_note``."""
    bad = []
    for key in KEYS:
        value = result.get(key)
        if key == "torch_eager_configs_per_s" and value is None:
            if not result.get("torch_eager_note"):
                bad.append(key)
            continue
        if key in PEER_KEYS and value is None:
            if not result.get("peer_kserve_note"):
                bad.append(key)
            continue
        if key in FLEET_KEYS and value is None:
            if not result.get("fleet_note"):
                bad.append(key)
            continue
        if not isinstance(value, int | float) or isinstance(value, bool):
            bad.append(key)
    return bad


def to_json(result: Mapping[str, Any]) -> str:
    return json.dumps(result, indent=2, sort_keys=False, default=str)


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:,.3g}" if abs(value) < 10 else f"{value:,.1f}"


def table(result: Mapping[str, Any]) -> Table:
    t = Table(title=f"costmodel bench ({result.get('mode')}) - {result.get('date')}")
    for col in ("metric", "value", "unit", "goal", "what"):
        t.add_column(
            col, justify="right" if col == "value" else "left", no_wrap=col != "what"
        )
    goals = result.get("goals", {})
    for key, (unit, what) in KEYS.items():
        goal = GOALS.get(key)
        mark = (
            ""
            if goal is None
            else f"{goal.text} {'ok' if goals.get(key) else 'MISSED'}"
        )
        t.add_row(key, _fmt(result.get(key)), unit, mark, what)
    return t


def peer_tables(result: Mapping[str, Any]) -> list[Table]:
    """Latency and throughput per batch size (raw, ours, KServe); 1 vs 2 workers."""
    clients = result.get("peer_clients")
    t = Table(title=f"ours vs KServe vs raw onnxruntime ({clients} clients)")
    for col in (
        "configs",
        "raw ms",
        "ours ms",
        "kserve ms",
        "raw cfg/s",
        "ours cfg/s",
        "kserve cfg/s",
        "ours/kserve",
    ):
        t.add_column(col, justify="right")
    latency = result.get("peer_latency_ms") or {}
    rates = result.get("peer_throughput_configs_per_s") or {}
    ratios = result.get("ours_over_kserve_by_size") or {}
    for size, row in latency.items():
        rate = rates.get(size, {})
        t.add_row(
            size,
            *(_fmt(row.get(k)) for k in ("raw", "ours", "kserve")),
            *(_fmt(rate.get(k)) for k in ("raw", "ours", "kserve")),
            _fmt(ratios.get(size)),
        )
    w = Table(
        title=f"our service, configs/s under {clients} clients, by uvicorn workers"
    )
    rows = result.get("workers_table") or []
    sizes = [k for k in (rows[0] if rows else {}) if k != "workers"]
    for col in ("workers", *sizes):
        w.add_column(col, justify="right")
    for row in rows:
        w.add_row(str(row["workers"]), *(_fmt(row.get(k)) for k in sizes))
    return [t, w]


def print_table(result: Mapping[str, Any], console: Console) -> None:
    console.print(table(result))
    for extra in peer_tables(result):
        console.print(extra)
    meta = (
        "cpu_count",
        "machine",
        "loadavg_before",
        "loadavg_after",
        "wall_s",
        "torch_eager_note",
        "peer_kserve_note",
        "fleet_note",
        "plot",
    )
    for key in meta:
        console.print(f"{key}: {result.get(key)}")


def markdown(result: Mapping[str, Any]) -> str:
    """The table as Markdown (for the README), with the run's provenance."""
    goals = result.get("goals", {})
    lines = ["| figure | value | unit | goal |", "|---|---:|---|---|"]
    for key, (unit, what) in KEYS.items():
        goal = GOALS.get(key)
        mark = (
            ""
            if goal is None
            else f"{goal.text}: {'met' if goals.get(key) else '**missed**'}"
        )
        lines.append(
            f"| `{key}` ({what}) | {_fmt(result.get(key))} | {unit} | {mark} |"
        )
    lines += ["", *_peer_markdown(result)]
    load = ", ".join(f"{x:.1f}" for x in result.get("loadavg_before", []))
    lines.append("")
    lines.append(
        f"{result.get('mode')} run, {result.get('date')}, {result.get('machine')}, "
        f"{result.get('cpu_count')} cores, load average before {load}, "
        f"{result.get('wall_s')} s."
    )
    return "\n".join(lines) + "\n"


def _peer_markdown(result: Mapping[str, Any]) -> list[str]:
    """``peer_tables`` as Markdown: per batch size, then by workers."""
    latency = result.get("peer_latency_ms") or {}
    if not latency:
        return []
    rates = result.get("peer_throughput_configs_per_s") or {}
    ratios = result.get("ours_over_kserve_by_size") or {}
    lines = [
        f"Ours vs KServe vs raw onnxruntime: latency of one request, and configs/s "
        f"under {result.get('peer_clients')} clients:",
        "",
        "| configs | raw ms | ours ms | KServe ms | raw configs/s | ours configs/s "
        "| KServe configs/s | ours / KServe |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, row in latency.items():
        rate = rates.get(size, {})
        cells = [
            *(_fmt(row.get(k)) for k in ("raw", "ours", "kserve")),
            *(_fmt(rate.get(k)) for k in ("raw", "ours", "kserve")),
            _fmt(ratios.get(size)),
        ]
        lines.append(f"| {int(size):,} | " + " | ".join(cells) + " |")
    rows = result.get("workers_table") or []
    if rows:
        sizes = [k for k in rows[0] if k != "workers"]
        lines += [
            "",
            f"Our service, configs/s under {result.get('peer_clients')} clients, "
            "by uvicorn workers:",
            "",
            "| workers | " + " | ".join(f"{int(k):,} configs" for k in sizes) + " |",
            "|---:|" + "---:|" * len(sizes),
            *(
                f"| {row['workers']} | "
                + " | ".join(_fmt(row.get(k)) for k in sizes)
                + " |"
                for row in rows
            ),
        ]
    return lines


def main() -> None:
    """``python -m xla_costmodel.bench.report RESULT.json``: print a saved run as Markdown."""
    import sys

    print(markdown(json.loads(Path(sys.argv[1]).read_text())), end="")


if __name__ == "__main__":
    main()
