"""Writes the monitoring files that are derived rather than written by hand.

    python deploy/monitoring/generate.py           rewrite both
    python deploy/monitoring/generate.py --check   exit 1 if either is out of date

- ``deploy/monitoring/dashboard.json``: the Grafana dashboard, from the panel list
  below (a generator keeps 30 panels' ids, grid positions and datasource references
  consistent, which hand-edited JSON does not);
- ``deploy/k8s/monitoring/prometheusrule.yaml``: ``rules.yml`` as a Prometheus
  Operator ``PrometheusRule``, so the cluster runs exactly the rules
  ``promtool test rules`` tested.

Standard library and PyYAML only; tests/monitoring/ checks that the committed files
are what this writes and that every expression parses and names real metrics.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
DASHBOARD = HERE / "dashboard.json"
RULES = HERE / "rules.yml"
PROMETHEUS_RULE = HERE.parent / "k8s" / "monitoring" / "prometheusrule.yaml"

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
M = '{model=~"$model"}'  # the dashboard's model filter
WIDTH = 24  # Grafana's grid width


@dataclass(frozen=True)
class Panel:
    title: str
    exprs: tuple[tuple[str, str], ...]  # (PromQL, legend)
    unit: str = "short"
    kind: str = "timeseries"
    width: int = 12
    height: int = 8
    description: str = ""


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)


def _p(title: str, *exprs: tuple[str, str], **kw: Any) -> Panel:
    return Panel(title, exprs, **kw)


ROWS = (
    Row(
        "Overview",
        (
            _p(
                "Instances ready",
                ("sum(costmodel_ready)", "ready"),
                ('count(up{job="costmodel"} == 1)', "up"),
                kind="stat",
                width=6,
                height=4,
            ),
            _p(
                "Requests /s (/v1)",
                ("sum(costmodel:requests:rate5m)", "req/s"),
                unit="reqps",
                kind="stat",
                width=6,
                height=4,
            ),
            _p(
                "Error ratio (/v1, 5xx)",
                ("costmodel:request_errors:ratio_rate5m", "5xx"),
                unit="percentunit",
                kind="stat",
                width=6,
                height=4,
            ),
            _p(
                "Fleet gain (best target)",
                ("max(costmodel:fleet_gain:max)", "x"),
                unit="none",
                kind="stat",
                width=6,
                height=4,
            ),
        ),
    ),
    Row(
        "Traffic",
        (
            _p(
                "Requests /s by route",
                ("sum by (route) (costmodel:requests:rate5m)", "{{route}}"),
                unit="reqps",
            ),
            _p(
                "Configs ranked /s by model",
                (
                    f"sum by (model) (rate(costmodel_configs_ranked_total{M}[5m]))",
                    "{{model}}",
                ),
                unit="short",
            ),
        ),
    ),
    Row(
        "Latency",
        (
            _p(
                "p50 by route and model",
                (
                    f"costmodel:request_duration_seconds:p50_5m{M}",
                    "{{route}} {{model}}",
                ),
                unit="s",
            ),
            _p(
                "p99 by route and model",
                (
                    f"costmodel:request_duration_seconds:p99_5m{M}",
                    "{{route}} {{model}}",
                ),
                unit="s",
                description="CostmodelRankLatencyHigh fires above 0.5 s on "
                "/v1/rank for 10 minutes.",
            ),
            _p(
                "Encoder and scorer p99 by model",
                (
                    "histogram_quantile(0.99, sum by (model, le) (rate("
                    f"costmodel_encode_duration_seconds_bucket{M}[5m])))",
                    "encode {{model}}",
                ),
                (
                    "histogram_quantile(0.99, sum by (model, le) (rate("
                    f"costmodel_score_duration_seconds_bucket{M}[5m])))",
                    "score {{model}}",
                ),
                unit="s",
            ),
            _p(
                "Configs per rank request, p50 by model",
                (
                    "histogram_quantile(0.5, sum by (model, le) (rate("
                    f"costmodel_rank_batch_size_bucket{M}[5m])))",
                    "{{model}}",
                ),
                unit="short",
            ),
        ),
    ),
    Row(
        "Errors",
        (
            _p(
                "Error ratio by route (5xx)",
                ("costmodel_route:request_errors:ratio_rate5m", "{{route}}"),
                unit="percentunit",
            ),
            _p(
                "Responses /s by status (/v1)",
                ("sum by (status) (costmodel:requests:rate5m)", "{{status}}"),
                unit="reqps",
            ),
            _p(
                "Requests in flight",
                ("sum(costmodel_inflight_requests)", "in flight"),
                unit="short",
            ),
        ),
    ),
    Row(
        "Caches",
        (
            _p(
                "Embedding cache hit ratio by level",
                (
                    "sum by (level) (rate(costmodel_cache_hits_total[5m])) / (sum by (level) "
                    "(rate(costmodel_cache_hits_total[5m])) + sum by (level) "
                    "(rate(costmodel_cache_misses_total[5m])))",
                    "{{level}}",
                ),
                unit="percentunit",
            ),
            _p(
                "Redis: bypassed ratio and errors /s",
                ("costmodel:redis_bypass:ratio_rate5m", "bypassed ratio"),
                (
                    "sum by (op) (rate(costmodel_cache_errors_total[5m]))",
                    "errors {{op}}",
                ),
                unit="short",
            ),
            _p(
                "In-process cache",
                ("sum(costmodel_cache_memory_bytes)", "bytes"),
                unit="bytes",
            ),
        ),
    ),
    Row(
        "Database",
        (
            _p(
                "Measurements stored /s by model",
                (
                    f"sum by (model) (rate(costmodel_feedback_measurements_total{M}[5m]))",
                    "{{model}}",
                ),
                unit="short",
            ),
            _p(
                "Feedback refused ratio and database errors /s",
                ("costmodel:feedback_unavailable:ratio_rate5m", "feedback refused"),
                (
                    "sum by (op) (rate(costmodel_store_errors_total[5m]))",
                    "errors {{op}}",
                ),
                unit="short",
            ),
            _p(
                "Rankings adapted to measurements (share)",
                (
                    f'sum by (model) (rate(costmodel_rankings_total{{model=~"$model", '
                    f'adapted="true"}}[5m])) / sum by (model) (rate('
                    f"costmodel_rankings_total{M}[5m]))",
                    "{{model}}",
                ),
                unit="percentunit",
            ),
            _p(
                "Adaptation fit p99 by model",
                (
                    "histogram_quantile(0.99, sum by (model, le) (rate("
                    f"costmodel_adaptation_fit_duration_seconds_bucket{M}[5m])))",
                    "{{model}}",
                ),
                unit="s",
            ),
        ),
    ),
    Row(
        "Model versions",
        (
            _p(
                "Version serving unpinned requests",
                (f"costmodel:model_serving:max{M}", "{{model}} v{{version}}"),
                kind="table",
                unit="none",
            ),
            _p(
                "Reloads by result (1 h)",
                (
                    f"sum by (model, result) (increase(costmodel_model_reloads_total{M}[1h]))",
                    "{{model}} {{result}}",
                ),
                unit="short",
            ),
        ),
    ),
    Row(
        "Online quality",
        (
            _p(
                "Kendall tau of fed-back runtimes (running mean)",
                (f"costmodel:online_kendall_tau:avg{M}", "{{model}} v{{version}}"),
                unit="none",
                description="CostmodelOnlineQualityDropped fires when the "
                "serving version is 0.1 below an earlier one for 30 minutes.",
            ),
            _p(
                "Top-1 slowdown of fed-back configs (running mean)",
                (f"costmodel:online_top1_slowdown:avg{M}", "{{model}} v{{version}}"),
                unit="percentunit",
            ),
        ),
    ),
    Row(
        "Fleet gain per target",
        (
            _p(
                "Geometric-mean gain (default / best runtime)",
                (f"costmodel:fleet_gain:max{M}", "{{model}} {{target}}"),
                unit="none",
                description="Over the graphs whose default config was measured; 1.25 = "
                "tuning found configs 1.25x faster than the compiler's default.",
            ),
            _p(
                "Best / default per graph: median and p90",
                (
                    f"costmodel:fleet_best_over_default:p50{M}",
                    "p50 {{model}} {{target}}",
                ),
                (
                    f"costmodel:fleet_best_over_default:p90{M}",
                    "p90 {{model}} {{target}}",
                ),
                unit="none",
            ),
            _p(
                "Graphs tuned and measured",
                (f"costmodel:fleet_graphs_tuned:max{M}", "tuned {{model}} {{target}}"),
                (f"costmodel:fleet_graphs:max{M}", "measured {{model}} {{target}}"),
                unit="short",
            ),
            _p(
                "Measurements stored",
                (f"costmodel:fleet_measurements:max{M}", "{{model}} {{target}}"),
                unit="short",
            ),
        ),
    ),
    Row(
        "Resources",
        (
            _p(
                "Memory used / limit by instance",
                ("costmodel:memory_used:ratio", "{{instance}}"),
                unit="percentunit",
                description="CostmodelMemoryNearLimit fires above 90 % for 10 minutes.",
            ),
            _p(
                "Resident memory by instance",
                ("costmodel_process_resident_memory_bytes", "rss {{instance}}"),
                ("costmodel_memory_limit_bytes", "limit {{instance}}"),
                unit="bytes",
            ),
        ),
    ),
)


# The data source to read, and the models to show (all by default).
TEMPLATING = [
    {
        "name": "datasource",
        "type": "datasource",
        "query": "prometheus",
        "label": "Data source",
        "current": {},
        "hide": 0,
    },
    {
        "name": "model",
        "type": "query",
        "datasource": DATASOURCE,
        "label": "Model",
        "query": "label_values(costmodel_model_info, model)",
        "definition": "label_values(costmodel_model_info, model)",
        "includeAll": True,
        "allValue": ".*",
        "multi": True,
        "refresh": 2,
        "current": {"text": "All", "value": "$__all"},
        "hide": 0,
    },
]


def panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    targets = [
        {
            "datasource": DATASOURCE,
            "expr": expr,
            "legendFormat": legend,
            "refId": chr(ord("A") + i),
        }
        for i, (expr, legend) in enumerate(panel.exprs)
    ]
    out: dict[str, Any] = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {},
        "targets": targets,
    }
    if panel.description:
        out["description"] = panel.description
    if panel.kind == "table":
        out["targets"][0] |= {"instant": True, "format": "table"}
    return out


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y = 0
    for row in ROWS:
        panels.append(
            {
                "id": len(panels) + 1,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": WIDTH, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        x, height = 0, 0
        for panel in row.panels:
            if x + panel.width > WIDTH:
                x, y = 0, y + height
                height = 0
            panels.append(panel_json(panel, len(panels) + 1, x, y))
            x, height = x + panel.width, max(height, panel.height)
        y += height
    return {
        "uid": "costmodel-overview",
        "title": "costmodel",
        "description": "The costmodel service: traffic, latency, errors, caches, "
        "database, model versions, online quality and the fleet's tuning gain per "
        "target. Generated by deploy/monitoring/generate.py; reads the recording "
        "rules of deploy/monitoring/rules.yml.",
        "tags": ["costmodel"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": TEMPLATING},
        "annotations": {"list": []},
        "panels": panels,
    }


def prometheus_rule() -> str:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "costmodel",
            "labels": {
                "app.kubernetes.io/name": "costmodel",
                "app.kubernetes.io/component": "monitoring",
            },
        },
        "spec": {"groups": groups},
    }
    header = (
        "# Generated by deploy/monitoring/generate.py from deploy/monitoring/rules.yml"
        " (do not edit):\n# the rules promtool tests, for the Prometheus Operator.\n"
    )
    return header + yaml.dump(rule, Dumper=_BlockDumper, sort_keys=False, width=100)


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (PromQL) as ``|`` blocks, as rules.yml writes them."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str)


def outputs() -> dict[Path, str]:
    return {
        DASHBOARD: json.dumps(dashboard(), indent=2) + "\n",
        PROMETHEUS_RULE: prometheus_rule(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare")
    args = parser.parse_args(argv)
    stale = [
        p for p, text in outputs().items() if not p.is_file() or p.read_text() != text
    ]
    if args.check:
        for path in stale:
            print(f"out of date: {path} (run python {Path(__file__).name})")
        return 1 if stale else 0
    for path, text in outputs().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
