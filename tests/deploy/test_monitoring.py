"""deploy/monitoring and where it is deployed: the rules pass ``promtool check`` and
``promtool test`` with every alert exercised, every alert has a runbook, the dashboard
is what its generator writes and every query parses, and the Kubernetes and Compose
files scrape the service where it serves /metrics."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploykit import COMPOSE, K8S, dockerfile, get_paths
from k8s_render import render
from monitorkit import (
    DASHBOARD,
    MONITORING,
    OPERATIONS,
    RULES,
    RULES_TEST,
    alerts,
    dashboard_exprs,
    metric_names,
    records,
    rules,
    run_promtool,
)

MONITORING_K8S = K8S / "monitoring"


def test_promtool_checks_the_rules() -> None:
    done = run_promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_promtool_unit_tests_pass_and_fire_every_alert() -> None:
    done = run_promtool("test", "rules", str(RULES_TEST))
    assert done.returncode == 0, done.stdout + done.stderr
    cases = yaml.safe_load(RULES_TEST.read_text())["tests"]
    fired = {
        check["alertname"]
        for case in cases
        for check in case.get("alert_rule_test", [])
        if check.get("exp_alerts")
    }
    assert fired == set(alerts())


def test_the_unit_tests_can_fail(tmp_path: Path) -> None:
    """promtool really compares: a wrong expected summary is a failure."""
    text = RULES_TEST.read_text().replace("16.67% of /v1", "16.68% of /v1")
    (tmp_path / "rules.yml").write_text(RULES.read_text())
    (tmp_path / "rules_test.yml").write_text(text)
    done = run_promtool("test", "rules", "rules_test.yml", cwd=tmp_path)
    assert done.returncode != 0 and "16.68%" in done.stdout + done.stderr


def github_anchor(heading: str) -> str:
    """The fragment GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_has_a_summary_a_severity_and_a_runbook_section() -> None:
    headings = {
        github_anchor(line.lstrip("#"))
        for line in OPERATIONS.read_text().splitlines()
        if line.startswith("#")
    }
    for name, rule in alerts().items():
        assert rule["annotations"]["summary"], name
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        anchor = f"runbook-{name.lower()}"
        assert rule["annotations"]["runbook_url"] == f"docs/operations.md#{anchor}"
        assert anchor in headings, f"docs/operations.md has no section {anchor}"


def test_every_recording_rule_read_is_defined() -> None:
    exprs = [r["expr"] for r in rules()] + dashboard_exprs()
    read = {name for expr in exprs for name in metric_names(expr) if ":" in name}
    assert read - records() == set()
    # ... and every one the rules record is on the dashboard or in an alert.
    assert records() - read == set()


def test_the_dashboard_is_generated_and_every_query_parses(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(MONITORING / "generate.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    board = json.loads(DASHBOARD.read_text())
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        assert panel["type"] == "row" or panel["targets"], panel["title"]
    rows = {p["title"] for p in panels if p["type"] == "row"}
    for topic in (
        "Traffic",
        "Latency",
        "Errors",
        "Caches",
        "Database",
        "Model versions",
        "Online quality",
        "Fleet gain per target",
    ):
        assert topic in rows
    # promtool has no expression checker: each query as a recording rule does.
    queries = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": expr}
                    for i, expr in enumerate(dashboard_exprs())
                ],
            }
        ]
    }
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump(queries))
    done = run_promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_parse_check_can_fail(tmp_path: Path) -> None:
    path = tmp_path / "bad.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "g",
                        "rules": [
                            {"record": "x:y", "expr": "sum by (model (costmodel_ready)"}
                        ],
                    }
                ]
            }
        )
    )
    assert run_promtool("check", "rules", str(path)).returncode != 0


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((MONITORING_K8S / name).read_text())  # type: ignore[no-any-return]


def test_pods_carry_scrape_annotations_for_the_metrics_port() -> None:
    (deployment,) = [
        r
        for r in render(K8S)
        if r["kind"] == "Deployment" and r["metadata"]["name"] == "costmodel"
    ]
    template = deployment["spec"]["template"]
    notes = template["metadata"]["annotations"]
    (port,) = template["spec"]["containers"][0]["ports"]
    assert notes["prometheus.io/scrape"] == "true"
    assert (
        int(notes["prometheus.io/port"]) == port["containerPort"] == dockerfile().port
    )
    assert notes["prometheus.io/path"] == "/metrics" and "/metrics" in get_paths()


def test_the_monitoring_kustomization_lists_its_crds_with_the_tested_rules() -> None:
    """ServiceMonitor and PrometheusRule are CRDs, absent from the Kubernetes
    schemas, so their structure is checked here field by field."""
    kustomization = load("kustomization.yaml")
    on_disk = {p.name for p in MONITORING_K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == on_disk
    assert kustomization["namespace"] == "costmodel"

    rule = load("prometheusrule.yaml")
    assert (rule["apiVersion"], rule["kind"]) == (
        "monitoring.coreos.com/v1",
        "PrometheusRule",
    )
    assert set(rule) == {"apiVersion", "kind", "metadata", "spec"}
    assert rule["spec"] == {"groups": yaml.safe_load(RULES.read_text())["groups"]}


def test_the_service_monitor_selects_the_service_on_its_metrics_port() -> None:
    monitor = load("servicemonitor.yaml")
    assert (monitor["apiVersion"], monitor["kind"]) == (
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
    )
    assert set(monitor) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(monitor["spec"]) <= {
        "selector",
        "endpoints",
        "jobLabel",
        "namespaceSelector",
    }
    (service,) = [
        r
        for r in render(K8S)
        if r["kind"] == "Service" and r["metadata"]["name"] == "costmodel"
    ]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert all(service["metadata"]["labels"].get(k) == v for k, v in selector.items())
    # Only the costmodel Service matches (not Redis or PostgreSQL).
    matched = [
        r["metadata"]["name"]
        for r in render(K8S)
        if r["kind"] == "Service"
        and all(r["metadata"]["labels"].get(k) == v for k, v in selector.items())
    ]
    assert matched == ["costmodel"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme"}
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics" and endpoint["path"] in get_paths()
    # Prometheus refuses a scrape timeout longer than the interval.
    assert int(endpoint["scrapeTimeout"][:-1]) <= int(endpoint["interval"][:-1])


def test_compose_prometheus_profile_scrapes_every_replica_with_the_rules() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    prometheus = compose["services"]["prometheus"]
    assert prometheus["profiles"] == ["prometheus"]
    assert prometheus["healthcheck"]["test"][0] == "CMD"
    mounts = dict(
        m.rsplit(":", 1)[0].split(":", 1)
        for m in prometheus["volumes"]
        if m.startswith("./")
    )
    config_path = next(k for k, v in mounts.items() if v.endswith("prometheus.yml"))
    config = yaml.safe_load((COMPOSE.parent / config_path).read_text())
    # rules.yml is mounted beside the config, where its relative rule_files points.
    container_dir = Path(mounts[config_path]).parent
    for rule_file in config["rule_files"]:
        source = next(
            k for k, v in mounts.items() if v == str(container_dir / rule_file)
        )
        assert (COMPOSE.parent / source).resolve() == RULES
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "costmodel"  # what the rules' up{job=...} expects
    (dns,) = job["dns_sd_configs"]
    assert dns["names"] == ["service"] and dns["names"][0] in compose["services"]
    assert dns["port"] == dockerfile().port
    done = run_promtool("check", "config", str(COMPOSE.parent / config_path))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("alert", sorted(alerts()))
def test_each_runbook_says_what_to_do(alert: str) -> None:
    """Each runbook section has the parts an on-call engineer looks for."""
    text = OPERATIONS.read_text()
    start = text.index(f"Runbook: {alert}")
    section = text[start : text.find("\n### ", start + 1)]
    for part in ("Means", "Check", "Do"):
        assert f"**{part}**" in section, (alert, part)
