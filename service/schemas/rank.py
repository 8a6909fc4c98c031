"""``POST /v1/rank``: the request (JSON body, or query parameters beside an npz
body), the answer, and the headers that carry the answer's fields beside an npz."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from xla_costmodel.service.schemas.common import (
    COMPILER,
    HEX64,
    RANKING_ID,
    TARGET,
    TARGET_DOC,
    VERSION,
    StrictWire,
    TopK,
    Wire,
    header,
)
from xla_costmodel.service.schemas.graphs import (
    EXAMPLE_HLO,
    ONE_GRAPH,
    Configs,
    ConfigurableNames,
    GraphIn,
    RawConfigsDoc,
    exactly_one,
)

_RANK_COMPILER_DOC = (
    "the compiler build the configs will run under: measurements of another count "
    "less and never dominate; null or absent: that of the target's newest rows"
)
_ADAPT_DOC = (
    "combine the model with a fit on this graph's measurements (on this target) "
    "once there are enough; false: the model's prior alone"
)


class RankIn(StrictWire):
    """Rank configs for one graph: exactly one of ``graph_id``, ``graph`` and ``hlo``,
    and exactly one of ``configs`` (feature arrays) and ``raw_configs``."""

    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                ONE_GRAPH,
                exactly_one({"configs": "array", "raw_configs": "array"}),
            ],
            "examples": [
                {
                    "model": "tile",
                    "graph_id": "0" * 64,
                    "configs": [[0.0] * 24],
                    "top_k": 1,
                },
                {
                    "model": "tile",
                    "graph_id": "0" * 64,
                    "raw_configs": [
                        {
                            "kernel_bounds": [1, 128],
                            "output_bounds": [8, 128],
                            "input_bounds": [8, 128],
                        }
                    ],
                },
                {
                    "model": "layout",
                    "hlo": EXAMPLE_HLO,
                    "raw_configs": [
                        {
                            "dot.1": {
                                "output": [0, 1],
                                "input": [1, 0],
                                "kernel": [0, 1],
                            }
                        },
                        {"dot.1": {"output": [1, 0], "input": None, "kernel": None}},
                        {},
                    ],
                },
            ],
        }
    )
    model: str = Field(min_length=1, max_length=64)
    model_version: str | None = Field(None, pattern=VERSION)
    graph_id: str | None = Field(None, pattern=HEX64)
    graph: GraphIn | None = None
    hlo: str | None = Field(None, min_length=1, description="the module as HLO text")
    configurable: ConfigurableNames | None = Field(
        None,
        description="with hlo, for a layout model: the configurable instructions "
        "(default: every convolution, dot and reshape)",
    )
    configs: Configs | None = None
    raw_configs: RawConfigsDoc | None = None
    top_k: TopK | None = Field(None, description="default: all configs")
    target: str | None = Field(None, pattern=TARGET, description=TARGET_DOC)
    compiler: str | None = Field(None, pattern=COMPILER, description=_RANK_COMPILER_DOC)
    adapt: bool = Field(True, description=_ADAPT_DOC)
    portfolio: bool = Field(
        False,
        description="also answer `portfolio`: every index in exploration order "
        "(configs that won on other programs of the target first, then spread-out "
        "ones); a tuner's first round measures its head",
    )


class RankOut(Wire):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "tile",
                    "model_version": "1",
                    "graph_id": "0" * 64,
                    "cache": "memory",
                    "ranking": [1, 0, 2],
                    "scores": [0.4, 0.1, 0.9],
                    "top_k": [1],
                    "adapted": 0,
                    "ranking_id": "0" * 32,
                }
            ]
        }
    )
    model: str
    model_version: str
    graph_id: str
    cache: Literal["memory", "redis", "miss"]
    adapted: int = Field(
        ge=0,
        description="distinct measured configs of this graph that shaped the scores "
        "(per-graph adaptation); 0: the model's prior alone",
    )
    ranking_id: str = Field(
        pattern=RANKING_ID,
        description="names this answer: feedback by config_indices sends it, so its "
        "indices mean this answer's configs",
    )
    ranking: list[int] = Field(
        description="all config indices, best first; ties by index"
    )
    scores: list[float] = Field(description="scores[i] is config i's; lower = faster")
    top_k: list[int] = Field(description="the first top_k entries of ranking")
    target_programs: int = Field(
        0,
        ge=0,
        description="programs in the target's knowledge (learned across every graph "
        "measured on the target, and at reduced trust on other targets)",
    )
    target_measurements: int = Field(0, ge=0, description="their measurements")
    knowledge_weight: float = Field(
        0.0, ge=0, le=1, description="the target knowledge's share of the prior"
    )
    prior_weight: float = Field(
        1.0,
        ge=0,
        le=1,
        description="the model's weight: 1, or less when it was not trained on "
        "runtimes of this target",
    )
    portfolio: list[int] | None = Field(
        None, description="with portfolio=true: every index, exploration order"
    )


RANK_NPZ_HEADERS = {
    name: header(f"npz answers only: {what}")
    for name, what in (
        ("X-Model", "model"),
        ("X-Model-Version", "model_version"),
        ("X-Cache", "cache"),
        ("X-Graph-ID", "graph_id"),
        ("X-Adapted", "adapted"),
        ("X-Ranking-ID", "ranking_id"),
        ("X-Target-Programs", "target_programs"),
        ("X-Target-Measurements", "target_measurements"),
        ("X-Knowledge-Weight", "knowledge_weight"),
        ("X-Prior-Weight", "prior_weight"),
    )
}


class RankQuery(BaseModel):
    """``POST /v1/rank``'s query parameters: for npz bodies they carry what JSON puts
    in the body (``adapt`` for any body). The route parses them itself
    (``parse_query``): FastAPI's per-parameter dependency solving was 8% of a
    1-config rank's server time, for parameters a JSON body never sends."""

    model_config = ConfigDict(extra="ignore", frozen=True, protected_namespaces=())

    model: str | None = Field(
        None, min_length=1, max_length=64, description="npz bodies"
    )
    graph_id: str | None = Field(None, pattern=HEX64, description="npz bodies")
    top_k: int | None = Field(None, ge=1, description="npz bodies")
    model_version: str | None = Field(None, pattern=VERSION, description="npz bodies")
    target: str | None = Field(None, pattern=TARGET, description="npz bodies")
    compiler: str | None = Field(None, pattern=COMPILER, description="npz bodies")
    adapt: bool | None = Field(
        None, description="false: the model's prior alone (any body)"
    )
    portfolio: bool | None = Field(None, description="npz bodies")
