"""docs/reference.md names exactly the fields the code returns.

Each ``## `NAME` ...`` section's table lists fields (first column, in backticks; a
cell may name several); the test compares them with the dataclass fields or with the
keys the command builds.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from xla_costmodel.bench.report import KEYS
from xla_costmodel.clients.rank_cli import to_json
from xla_costmodel.clients.replay import ReplayReport
from xla_costmodel.clients.wire import FeedbackResult, RankResult
from xla_costmodel.clients.xla.tune import TuneReport
from xla_costmodel.service.schemas.decisions import BestOut, DecisionOut
from xla_costmodel.service.schemas.feedback import FeedbackOut
from xla_costmodel.service.schemas.graphs import GraphOut
from xla_costmodel.service.schemas.health import (
    LiveOut,
    ReadyOut,
    V2LiveOut,
    V2ReadyOut,
)
from xla_costmodel.service.schemas.models import ModelsOut, ReloadOut, TargetsOut
from xla_costmodel.service.schemas.rank import RankOut

REPO = Path(__file__).resolve().parents[2]
PAGE = (REPO / "docs" / "reference.md").read_text()


def section(title: str) -> str:
    """The text of the ``## ...`` section whose heading starts with ``title``."""
    parts = re.split(r"^## ", PAGE, flags=re.M)
    found = [p for p in parts if p.startswith(title)]
    assert len(found) == 1, title
    return found[0]


def fields(title: str) -> set[str]:
    """The names in the first column of the section's table."""
    rows = [line for line in section(title).splitlines() if line.startswith("| `")]
    return {n for row in rows for n in re.findall(r"`([a-z_]+)`", row.split("|")[1])}


def answer_fields(title: str) -> set[str]:
    """The names in the first column of ``## HTTP answers``' ``### title`` table."""
    parts = re.split(r"^### ", section("HTTP answers"), flags=re.M)
    (found,) = [p for p in parts if p.startswith(title)]
    rows = [line for line in found.splitlines() if line.startswith("| `")]
    return {n for r in rows for n in re.findall(r"`([a-z_0-9]+)`", r.split("|")[1])}


# Each route's section and the wire schemas of its 2xx JSON answers.
ANSWERS: dict[str, tuple[type[BaseModel], ...]] = {
    "`GET /livez`": (LiveOut, V2LiveOut, V2ReadyOut),
    "`GET /readyz`": (ReadyOut,),
    "`GET /v1/models`": (ModelsOut,),
    "`POST /v1/models/{name}/reload`": (ReloadOut,),
    "`PUT /v1/graphs`": (GraphOut,),
    "`POST /v1/rank`": (RankOut,),
    "`POST /v1/feedback`": (FeedbackOut,),
    "`POST /v1/decisions`": (DecisionOut,),
    "`GET /v1/best`": (BestOut,),
    "`GET /v1/targets`": (TargetsOut,),
}


def wire_fields(schema: type[BaseModel]) -> set[str]:
    """Every property of ``schema``'s answer, nested objects' included."""
    json_schema = schema.model_json_schema()
    objects = [json_schema, *json_schema.get("$defs", {}).values()]
    return {name for o in objects for name in o.get("properties", {})}


def names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_the_client_results() -> None:
    assert fields("`RankResult`") == names(RankResult)
    assert fields("`FeedbackResult`") == names(FeedbackResult)


def test_the_tune_report_and_its_json() -> None:
    assert fields("`TuneReport`") == names(TuneReport)


def test_costmodel_rank_json() -> None:
    result = RankResult(
        ranking=(1, 0),
        top_k=(1,),
        scores=(0.5, 0.1),
        model="xla_cpu",
        model_version="1",
        graph_id="0" * 64,
        cache="miss",
        ranking_id="r",
    )
    built = to_json(result, [None, None], None)
    assert fields("`costmodel rank --json`") == set(built)
    entry = section("`costmodel rank --json`")
    assert all(f"`{k}`" in entry for k in built["top_k"][0])


def test_costmodel_replay_json() -> None:
    assert fields("`costmodel replay --json`") == set(ReplayReport().to_json()) | {
        "rounds"  # with --rounds only
    }


def test_costmodel_simulate_json() -> None:
    """Against the committed output of ``costmodel simulate --out`` (make xla-tuning)."""
    ran = json.loads((REPO / "studies" / "results" / "budgets.json").read_text())
    assert fields("`costmodel simulate --json`") == set(ran)
    target = next(iter(ran["targets"].values()))
    text = section("`costmodel simulate --json`")
    keys = {*target, *target["by_history"][0], *next(iter(ran["goals"].values()))}
    assert sorted(k for k in keys if f"`{k}`" not in text) == []


def test_costmodel_bench_json_names_every_figure() -> None:
    text = section("`costmodel bench --json`")
    assert sorted(k for k in KEYS if f"`{k}`" not in text) == []


@pytest.mark.parametrize("title", sorted(ANSWERS))
def test_every_field_of_an_http_answer(title: str) -> None:
    wire = set().union(*(wire_fields(schema) for schema in ANSWERS[title]))
    documented = answer_fields(title)
    assert sorted(wire - documented) == [], f"docs/reference.md {title}"


def test_every_route_with_a_json_answer_has_its_section() -> None:
    from xla_costmodel.service.app import create_app
    from xla_costmodel.service.settings import Settings

    api = create_app(Settings()).openapi()
    answered = set()
    for ops in api["paths"].values():
        for op in ops.values():
            for status, response in op["responses"].items():
                schema = response.get("content", {}).get("application/json", {})
                ref = schema.get("schema", {}).get("$ref", "")
                if status.startswith("2") and ref:
                    answered.add(ref.rpartition("/")[2])
    covered = {schema.__name__ for schemas in ANSWERS.values() for schema in schemas}
    assert sorted(answered - covered) == []
