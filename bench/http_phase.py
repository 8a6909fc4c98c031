"""``POST /v1/rank`` on a cached tile graph, with an npz body and with a JSON body.

The npz path is the real ``CostModelClient.rank``. The client has no JSON mode, so the
JSON path sends the schema's JSON body (``RankIn``: model, graph_id, configs), encoded
with the client's own ``clients.wire.json_body``, over one keep-alive ``httpx.Client``,
and parses the answer with the client's own ``clients.wire.parse_rank``. The two paths
differ only in the request body; both include client-side encoding and decoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import httpx

from xla_costmodel.bench.data import F32
from xla_costmodel.bench.inproc import Budget, take_rows
from xla_costmodel.bench.timing import Timings, time_calls
from xla_costmodel.clients import CostModelClient, PreparedGraph, RankResult
from xla_costmodel.clients.wire import JSON, json_body, parse_rank

Body = Literal["binary", "json"]
BODIES: tuple[Body, ...] = ("binary", "json")
TIMEOUT = httpx.Timeout(120.0, connect=5.0)


class HttpRanker:
    """Both ways of asking the same server to rank the same configs."""

    def __init__(self, url: str, model: str) -> None:
        self.model = model
        self.client = CostModelClient(url, timeout=TIMEOUT)
        self.http = httpx.Client(base_url=url, timeout=TIMEOUT)

    def close(self) -> None:
        self.client.close()
        self.http.close()

    def rank(self, body: Body, graph: PreparedGraph, configs: F32) -> RankResult:
        if body == "binary":
            return self.client.rank(self.model, graph, configs, deadline=120.0)
        # The client's own JSON encoder and answer parser: only the body differs.
        payload = {
            "model": self.model,
            "graph_id": graph.graph_id,
            "configs": configs.tolist(),
        }
        response = self.http.post(
            "/v1/rank",
            content=json_body(payload),
            headers={"Content-Type": JSON, "Accept": JSON},
        )
        response.raise_for_status()
        return parse_rank(response, graph.graph_id, len(configs), uploaded=False)

    def timed(
        self, body: Body, graph: PreparedGraph, configs: F32, budget: Budget
    ) -> Timings:
        return time_calls(
            lambda: self.rank(body, graph, configs), budget.repeats, budget.seconds
        )

    def sweep(
        self,
        body: Body,
        graph: PreparedGraph,
        pool: F32,
        sizes: Sequence[int],
        budget: Budget,
    ) -> dict[int, Timings]:
        return {n: self.timed(body, graph, take_rows(pool, n), budget) for n in sizes}
