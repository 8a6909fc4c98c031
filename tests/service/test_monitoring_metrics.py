"""Every metric a rule of deploy/monitoring/rules.yml or a panel of the dashboard reads
is one the service exports on /metrics (recording rules are checked against
rules.yml in tests/deploy/test_monitoring.py)."""

from __future__ import annotations

import re

import pytest
from monitorkit import SYNTHETIC, dashboard_exprs, metric_names, rules
from servicekit import AppClient

pytestmark = pytest.mark.anyio
# The series a family of each type is scraped as (prometheus_client's text format
# declares a counter by its _total name, older versions by the bare one).
SUFFIXES = {
    "counter": ("", "_total"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "untyped": ("",),
}


def exported(text: str) -> set[str]:
    """Series names /metrics offers, from its TYPE lines (labelled families are
    declared even before their first sample)."""
    families = re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)
    return {name + suffix for name, kind in families for suffix in SUFFIXES[kind]}


async def test_every_metric_the_rules_and_dashboard_read_is_exported(
    make_client: AppClient,
) -> None:
    client = await make_client()
    text = (await client.get("/metrics")).text
    exprs = [rule["expr"] for rule in rules()] + dashboard_exprs()
    read = {name for expr in exprs for name in metric_names(expr)}
    raw = {name for name in read if ":" not in name} - SYNTHETIC
    assert raw, "no metric names found: the extraction is broken"
    assert raw - exported(text) == set()


def test_the_name_extraction_finds_selectors_only() -> None:
    expr = (
        'sum by (route, le) (rate(costmodel_requests_total{route=~"/v1/.*"}[5m]))'
        " / on (model) group_left () costmodel:fleet_gain:max or up == 0"
    )
    assert metric_names(expr) == {
        "costmodel_requests_total",
        "costmodel:fleet_gain:max",
        "up",
    }
