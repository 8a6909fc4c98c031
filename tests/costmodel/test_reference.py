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

from xla_costmodel.bench.report import KEYS
from xla_costmodel.clients.rank_cli import to_json
from xla_costmodel.clients.replay import ReplayReport
from xla_costmodel.clients.wire import FeedbackResult, RankResult
from xla_costmodel.clients.xla.tune import TuneReport

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
