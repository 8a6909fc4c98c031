"""The monitoring files as data, for the tests of deploy/ and service/: the rules, the
dashboard's expressions, the metric names they read, and ``promtool``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
MONITORING = REPO / "deploy" / "monitoring"
RULES = MONITORING / "rules.yml"
RULES_TEST = MONITORING / "rules_test.yml"
DASHBOARD = MONITORING / "dashboard.json"
OPERATIONS = REPO / "docs" / "operations.md"
# Series Prometheus makes itself, not the service.
SYNTHETIC = {"up"}
# Grafana's template variables, as a concrete query would have them.
VARIABLES = {"$model": ".*"}
# What a selector's name is not: label matchers, grouping clauses, function calls.
_MATCHERS = re.compile(r"\{[^}]*\}")
_GROUPING = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"
)
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*(?!\s*\()")


def promtool() -> str:
    """The promtool binary; missing fails the run (``make test`` installs it)."""
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed (run `make test`, which installs it)")
    return path


def run_promtool(
    *args: str, cwd: Path = MONITORING
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def rules() -> list[dict[str, Any]]:
    """Every rule of rules.yml, recording and alerting."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for r in rules() if "alert" in r}


def records() -> set[str]:
    return {r["record"] for r in rules() if "record" in r}


def dashboard_exprs() -> list[str]:
    """Every panel query of dashboard.json, variables filled in."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = [t["expr"] for p in panels for t in p.get("targets", [])]
    for name, value in VARIABLES.items():
        exprs = [e.replace(name, value) for e in exprs]
    return exprs


def metric_names(expr: str) -> set[str]:
    """The service's series an expression selects (``costmodel...`` and ``up``)."""
    bare = _GROUPING.sub(" ", _MATCHERS.sub(" ", expr))
    return {
        name
        for name in _IDENT.findall(bare)
        if name.startswith("costmodel") or name in SYNTHETIC
    }
