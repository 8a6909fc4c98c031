"""The blocking client against the fake service and transports that fail on purpose."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import httpx
import numpy as np
import pytest
from clientfakes import (
    FakeService,
    Sleeps,
    SlowTransport,
    error,
    silent_server,
    unused_url,
)

from xla_costmodel.clients import (
    CostModelClient,
    DeadlineExceeded,
    EndpointNotFound,
    GraphNotFound,
    InvalidRequest,
    ModelNotFound,
    ProtocolError,
    RetryPolicy,
    ServiceUnavailable,
    VersionNotLoaded,
    prepare_graph,
)
from xla_costmodel.tpugraphs.arrays import Sample


def test_rank_sends_an_unknown_graph_inline_once_then_ranks_by_id(
    client: CostModelClient, fake: FakeService, tile_sample: Sample
) -> None:
    first = client.rank("tile", tile_sample, tile_sample.configs, top_k=5)
    # the model's collection, then one request: the graph goes inline
    assert fake.paths() == ["GET /v1/models", "POST /v1/rank"]
    assert "graph_id" not in fake.ops[0].url.params
    assert first.uploaded and not first.degraded
    scores = tile_sample.configs.sum(axis=1)
    assert list(first.ranking) == np.argsort(scores, kind="stable").tolist()
    assert first.top_k == first.ranking[:5]
    assert first.scores is not None and np.allclose(first.scores, scores)
    assert (first.model_version, first.cache) == ("1", "miss")  # encoded just now

    second = client.rank("tile", tile_sample, tile_sample.configs)
    assert fake.paths()[2:] == ["POST /v1/rank"]  # the collection is known now
    assert fake.ops[1].url.params["graph_id"] == first.graph_id
    assert not second.uploaded and second.ranking == first.ranking
    assert second.cache == "memory"


def test_a_new_client_sends_the_graph_inline_even_if_the_service_has_it(
    fake: FakeService, sleeps: Sleeps, tile_sample: Sample
) -> None:
    for cache in ("miss", "memory"):
        with CostModelClient(transport=httpx.MockTransport(fake), sleep=sleeps) as c:
            result = c.rank("tile", tile_sample, tile_sample.configs)
        assert result.uploaded and result.cache == cache
    assert fake.paths() == ["GET /v1/models", "POST /v1/rank"] * 2


def test_a_lost_graph_is_uploaded_and_ranked_again_by_id(
    client: CostModelClient, fake: FakeService, tile_sample: Sample
) -> None:
    first = client.rank("tile", tile_sample, tile_sample.configs)
    fake.graphs.clear()  # the service evicted it, or restarted
    again = client.rank("tile", tile_sample, tile_sample.configs)
    assert fake.op_paths()[1:] == ["POST /v1/rank", "PUT /v1/graphs", "POST /v1/rank"]
    ranks = (fake.ops[1], fake.ops[3])
    assert all(r.url.params["graph_id"] == first.graph_id for r in ranks)
    assert again.uploaded and again.cache == "memory"  # embedded by the upload
    assert again.ranking == first.ranking


def test_rank_sends_binary_configs_and_ids_in_the_query(
    client: CostModelClient,
    fake: FakeService,
    tile_sample: Sample,
    layout_sample: Sample,
) -> None:
    client.rank("tile", tile_sample, tile_sample.configs, top_k=3)
    client.rank("tile", tile_sample, tile_sample.configs, top_k=3)
    client.rank("layout", layout_sample, layout_sample.configs[:50])
    inline, by_id, layout_rank = fake.ops
    gid = prepare_graph(tile_sample).graph_id
    assert dict(inline.url.params) == {"model": "tile", "top_k": "3"}
    assert dict(by_id.url.params) == {"model": "tile", "graph_id": gid, "top_k": "3"}
    assert by_id.headers["content-type"] == "application/x-npz"
    with np.load(io.BytesIO(inline.content)) as data:
        assert set(data.files) == {
            "node_feat",
            "node_opcode",
            "edge_index",
            "config_feat",
        }
        assert np.array_equal(data["node_feat"], tile_sample.graph.node_feat)
    with np.load(io.BytesIO(by_id.content)) as data:
        assert data.files == ["config_feat"]
        assert data["config_feat"].dtype == np.float32
    with np.load(io.BytesIO(layout_rank.content)) as data:
        sent = data["node_config_feat"]
        assert np.array_equal(
            data["node_config_ids"], layout_sample.graph.node_config_ids
        )
    # layout configs are small ints: sent as int8, a quarter of the float32 bytes
    assert sent.dtype == np.int8 and np.array_equal(sent, layout_sample.configs[:50])


def test_large_batches_ask_for_an_npz_answer(
    client: CostModelClient, fake: FakeService, tile_sample: Sample
) -> None:
    rows = np.resize(tile_sample.configs, (1000, 24))
    rows[:, 0] += np.arange(1000) % 7  # some ties, some not
    small = client.rank("tile", tile_sample, rows[:999], top_k=4)
    large = client.rank("tile", tile_sample, rows, top_k=4)
    json_answer, npz_answer = fake.ops
    assert json_answer.headers["accept"] == "application/json"
    assert npz_answer.headers["accept"] == "application/x-npz"
    scores = rows.sum(axis=1, dtype=np.float64)
    assert list(large.ranking) == np.argsort(scores, kind="stable").tolist()
    assert list(small.ranking) == np.argsort(scores[:999], kind="stable").tolist()
    assert large.top_k == large.ranking[:4] and small.scores == large.scores[:999]
    assert large.scores is not None
    assert np.array_equal(large.scores, scores.astype(np.float32))
    assert (large.model, large.model_version, large.cache) == ("tile", "1", "memory")
    assert (large.graph_id, large.uploaded) == (small.graph_id, False)


def test_graph_not_found_twice_is_raised_not_looped(
    client: CostModelClient, fake: FakeService, tile_sample: Sample
) -> None:
    client.rank("tile", tile_sample, tile_sample.configs)  # known from now on
    fake.graphs = _ForgetfulDict()
    with pytest.raises(GraphNotFound):
        client.rank("tile", tile_sample, tile_sample.configs)
    assert fake.op_paths()[1:] == ["POST /v1/rank", "PUT /v1/graphs", "POST /v1/rank"]
    # The id the service lost is no longer trusted: the next rank sends the graph.
    assert client.rank("tile", tile_sample, tile_sample.configs).uploaded
    assert fake.op_paths()[4:] == ["POST /v1/rank"]
    assert "graph_id" not in fake.ops[4].url.params


class _ForgetfulDict(dict):  # type: ignore[type-arg]
    """A graph store that evicts at once (a cache under pressure)."""

    def __setitem__(self, key: object, value: object) -> None:
        pass


def test_an_inline_body_too_large_falls_back_to_upload_then_rank_by_id(
    client: CostModelClient, fake: FakeService, tile_sample: Sample
) -> None:
    fake.script = [error(413, "payload_too_large", "body larger than 1024 bytes")]
    result = client.rank("tile", tile_sample, tile_sample.configs)
    assert fake.op_paths() == ["POST /v1/rank", "PUT /v1/graphs", "POST /v1/rank"]
    assert "graph_id" in fake.ops[2].url.params
    assert result.uploaded and result.cache == "memory"
    fake.script = [error(413, "payload_too_large", "configs too large")]
    with pytest.raises(InvalidRequest, match="configs too large"):  # by id: raised
        client.rank("tile", tile_sample, tile_sample.configs)


def test_503_retry_after_is_honoured(
    client: CostModelClient, fake: FakeService, sleeps: Sleeps, tile_sample: Sample
) -> None:
    fake.script = [
        error(503, "not_ready", retry_after="2"),
        error(429, "overloaded", retry_after="1"),
    ]
    result = client.rank("tile", tile_sample, tile_sample.configs)
    assert sleeps == [2.0, 1.0]
    assert not result.degraded


def test_backoff_without_retry_after_is_jittered_and_bounded(
    fake: FakeService, sleeps: Sleeps, tile_sample: Sample
) -> None:
    policy = RetryPolicy(max_attempts=4, backoff_base=0.1, backoff_max=0.15)
    fake.script = [httpx.ConnectError("refused")] * 3
    with CostModelClient(
        transport=httpx.MockTransport(fake), retry=policy, sleep=sleeps
    ) as c:
        c.rank("tile", tile_sample, tile_sample.configs)
    assert len(sleeps) == 3
    assert all(0 <= s <= cap for s, cap in zip(sleeps, [0.1, 0.15, 0.15], strict=True))


def test_retries_are_bounded_by_attempts(
    client: CostModelClient, fake: FakeService, sleeps: Sleeps, tile_sample: Sample
) -> None:
    fake.script = [error(503, "overloaded", retry_after="0")] * 10
    with pytest.raises(ServiceUnavailable) as info:
        client.rank("tile", tile_sample, tile_sample.configs)
    assert (info.value.status, info.value.code) == (503, "overloaded")
    assert len(fake.ops) == 4 and len(sleeps) == 3


def test_retry_after_beyond_the_deadline_fails_at_once(
    client: CostModelClient, fake: FakeService, sleeps: Sleeps, tile_sample: Sample
) -> None:
    fake.script = [error(503, "not_ready", retry_after="5")]
    with pytest.raises(DeadlineExceeded) as info:
        client.rank("tile", tile_sample, tile_sample.configs, deadline=1.0)
    assert sleeps == [] and isinstance(info.value.__cause__, ServiceUnavailable)


def test_connection_refused_retries_then_raises(
    sleeps: Sleeps, tile_sample: Sample
) -> None:
    url = unused_url()
    with (
        CostModelClient(url, retry=RetryPolicy(max_attempts=3), sleep=sleeps) as c,
        pytest.raises(ServiceUnavailable) as info,
    ):
        c.rank("tile", tile_sample, tile_sample.configs)
    # What every command prints for it (issue 36: not a bare ConnectError).
    said = f"no costmodel service at {url}: start one with `costmodel serve`"
    assert str(info.value) == said and len(sleeps) == 2
    assert isinstance(info.value.__cause__, httpx.ConnectError)


def test_connection_refused_with_fallback_is_degraded(tile_sample: Sample) -> None:
    with CostModelClient(unused_url(), retry=RetryPolicy(max_attempts=2)) as c:
        result = c.rank(
            "tile", tile_sample, tile_sample.configs, fallback=[7, 3], top_k=3
        )
    n = tile_sample.num_configs
    assert result.degraded and isinstance(result.error, ServiceUnavailable)
    assert result.ranking[:3] == (7, 3, 0) and sorted(result.ranking) == list(range(n))
    assert (
        result.top_k == (7, 3, 0)
        and result.scores is None
        and result.model_version is None
    )


def test_slow_answer_past_the_deadline(tile_sample: Sample) -> None:
    transport = SlowTransport(delay=5.0)
    with CostModelClient(transport=transport, retry=RetryPolicy(max_attempts=5)) as c:
        start = time.monotonic()
        with pytest.raises(DeadlineExceeded) as info:
            c.rank("tile", tile_sample, tile_sample.configs, deadline=0.3)
        elapsed = time.monotonic() - start
    assert 0.25 <= elapsed < 1.0
    assert transport.timeouts[0] <= 0.3  # the deadline cut the read timeout
    assert isinstance(info.value.__cause__, ServiceUnavailable)


def test_slow_answer_with_fallback_returns_the_callers_order_in_time(
    tile_sample: Sample,
) -> None:
    with CostModelClient(transport=SlowTransport(delay=5.0)) as c:
        start = time.monotonic()
        result = c.rank(
            "tile", tile_sample, tile_sample.configs, deadline=0.2, fallback=[]
        )
        assert time.monotonic() - start < 0.8
    assert result.degraded and result.ranking == tuple(range(tile_sample.num_configs))
    assert isinstance(result.error, DeadlineExceeded)


def test_silent_real_server_times_out_at_the_deadline(tile_sample: Sample) -> None:
    with silent_server() as url, CostModelClient(url) as c:
        start = time.monotonic()
        result = c.rank(
            "tile", tile_sample, tile_sample.configs, deadline=0.3, fallback=[0]
        )
        elapsed = time.monotonic() - start
    assert result.degraded and 0.25 <= elapsed < 1.5


def test_client_errors_are_raised_even_with_a_fallback(
    client: CostModelClient, fake: FakeService, sleeps: Sleeps, tile_sample: Sample
) -> None:
    with pytest.raises(ModelNotFound):
        client.rank("nope", tile_sample, tile_sample.configs, fallback=[0])
    fake.script = [error(422, "invalid_request", "bad configs")]
    with pytest.raises(InvalidRequest, match="bad configs"):
        client.rank("tile", tile_sample, tile_sample.configs, fallback=[0])
    assert sleeps == []


def test_bad_input_is_rejected_before_sending(
    client: CostModelClient, fake: FakeService, tile_sample: Sample
) -> None:
    with pytest.raises(InvalidRequest) as info:
        client.rank("tile", tile_sample, np.zeros((3, 18), np.float32), fallback=[0])
    assert info.value.field == "config_feat" and fake.ops == []  # models asked only


def test_500_is_not_retried_but_is_absorbed_by_a_fallback(
    client: CostModelClient, fake: FakeService, sleeps: Sleeps, tile_sample: Sample
) -> None:
    fake.script = [httpx.Response(500, text="boom")]
    result = client.rank("tile", tile_sample, tile_sample.configs, fallback=[1])
    assert result.degraded and sleeps == [] and len(fake.ops) == 1


def test_answer_breaking_the_contract_is_a_protocol_error(
    client: CostModelClient, fake: FakeService, tile_sample: Sample
) -> None:
    fake.script = [httpx.Response(200, json={"ranking": [0], "scores": [1.0]})]
    with pytest.raises(ProtocolError, match="permutation"):
        client.rank("tile", tile_sample, tile_sample.configs)


def test_session_pins_the_version_of_its_first_answer(
    client: CostModelClient, fake: FakeService, tile_sample: Sample
) -> None:
    session = client.session("tile")
    assert session.rank(tile_sample, tile_sample.configs).model_version == "1"
    fake.versions["tile"].append("2")  # a newer version is loaded mid-session
    assert session.rank(tile_sample, tile_sample.configs).model_version == "1"
    assert fake.requests[-1].url.params["model_version"] == "1"
    assert client.rank("tile", tile_sample, tile_sample.configs).model_version == "2"
    session.feedback(tile_sample, [5], configs=tile_sample.configs[:1])
    assert fake.feedback_rows[-1]["model_version"] == "1"
    fake.versions["tile"].remove("1")
    with pytest.raises(VersionNotLoaded):
        session.rank(tile_sample, tile_sample.configs)


def test_session_names_its_target_and_compiler_in_every_rank(
    client: CostModelClient, fake: FakeService, tile_sample: Sample
) -> None:
    session = client.session("tile", target="cpu", compiler="jax 0.4.31")
    session.rank(tile_sample, tile_sample.configs)  # inline: npz, in the query
    session.rank(tile_sample, tile_sample.configs[:2])  # by id: a JSON body
    query, body = fake.requests[-2].url.params, json.loads(fake.requests[-1].content)
    for sent in (query, body):
        assert (sent["target"], sent["compiler"]) == ("cpu", "jax 0.4.31")
    client.rank("tile", tile_sample, tile_sample.configs[:2])
    assert "compiler" not in json.loads(fake.requests[-1].content)


def test_degraded_answers_do_not_pin(fake: FakeService, tile_sample: Sample) -> None:
    fake.script = [httpx.ConnectError("refused")]
    with CostModelClient(
        transport=httpx.MockTransport(fake), retry=RetryPolicy(max_attempts=1)
    ) as c:
        session = c.session("tile")
        assert session.rank(tile_sample, tile_sample.configs, fallback=[0]).degraded
        assert session.model_version is None
        session.rank(tile_sample, tile_sample.configs)
        assert session.model_version == "1"


def test_feedback_sends_rows_and_uploads_an_unknown_graph(
    client: CostModelClient, fake: FakeService, layout_sample: Sample
) -> None:
    rows = layout_sample.configs[[4, 2]]
    result = client.feedback(
        "layout", layout_sample, layout_sample.runtimes[[4, 2]], configs=rows
    )
    assert result.stored == 2
    assert fake.op_paths() == [
        "POST /v1/feedback",
        "PUT /v1/graphs",
        "POST /v1/feedback",
    ]
    body = json.loads(fake.requests[-1].content)
    assert body["graph_id"] == prepare_graph(layout_sample).graph_id
    assert body["runtimes_ns"] == layout_sample.runtimes[[4, 2]].tolist()
    assert np.array_equal(body["configs"], rows) and "model_version" not in body


def test_feedback_by_indices_and_local_validation(
    client: CostModelClient, fake: FakeService, tile_sample: Sample
) -> None:
    client.rank("tile", tile_sample, tile_sample.configs)
    client.feedback("tile", tile_sample, np.array([10, 20]), config_indices=[3, 1])
    assert fake.feedback_rows[-1]["config_indices"] == [3, 1]
    for kwargs in ({}, {"config_indices": [1], "configs": tile_sample.configs[:1]}):
        with pytest.raises(InvalidRequest, match="exactly one"):
            client.feedback("tile", tile_sample, [1], **kwargs)
    with pytest.raises(InvalidRequest, match="2 configs but 1 runtimes"):
        client.feedback("tile", tile_sample, [1], config_indices=[0, 1])
    with pytest.raises(InvalidRequest, match="> 0"):
        client.feedback("tile", tile_sample, [0], config_indices=[0])


def test_feedback_after_a_lost_answer_is_resent_and_stored_once(
    client: CostModelClient, fake: FakeService, sleeps: Sleeps, tile_sample: Sample
) -> None:
    """The answer is lost after the service stored the rows: the resend carries the
    same Idempotency-Key, so the service answers it without storing it again."""
    client.rank("tile", tile_sample, tile_sample.configs)

    def store_then_lose(request: httpx.Request) -> httpx.Response:
        fake(request)  # stored
        raise httpx.ReadTimeout("answer lost", request=request)

    transport = httpx.MockTransport(
        lambda r: store_then_lose(r) if not fake.feedback_rows else fake(r)
    )
    with CostModelClient(
        "http://x", transport=transport, sleep=sleeps, retry=RetryPolicy(max_attempts=3)
    ) as c:
        c.known_graphs = client.known_graphs
        result = c.feedback("tile", tile_sample, [1], config_indices=[0])
    assert result.stored == 1 and len(fake.feedback_rows) == 1
    sent = [r for r in fake.requests if r.url.path == "/v1/feedback"]
    keys = {r.headers["idempotency-key"] for r in sent}
    assert len(sent) == 2 and len(keys) == 1 and len(keys.pop()) >= 16
    assert len(sleeps) == 1
    # Another call is another measurement: a new key.
    client.feedback("tile", tile_sample, [1], config_indices=[0])
    assert len(fake.feedback_rows) == 2


def test_a_service_without_feedback_raises_endpoint_not_found(
    tile_sample: Sample,
) -> None:
    fake = FakeService(feedback_route=False)
    with (
        CostModelClient(transport=httpx.MockTransport(fake)) as c,
        pytest.raises(EndpointNotFound),
    ):
        c.feedback("tile", tile_sample, [1], config_indices=[0])


def test_models_and_ready(client: CostModelClient) -> None:
    assert [(m.name, m.collection, m.version) for m in client.models()] == [
        ("tile", "tile", "1"),
        ("layout", "layout", "1"),
    ]
    assert client.ready()
    with CostModelClient(unused_url()) as down:
        assert not down.ready()


@pytest.mark.parametrize("status", [504, 502, 503, 429, 408])
def test_feedback_is_retried_like_a_rank_with_one_key(
    tile_sample: Sample, status: int
) -> None:
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers["idempotency-key"])
        return httpx.Response(status, text="upstream said no")

    retry = RetryPolicy(max_attempts=3)
    transport = httpx.MockTransport(handler)
    with (
        CostModelClient(
            "http://x", transport=transport, retry=retry, sleep=lambda s: None
        ) as client,
        pytest.raises(ServiceUnavailable),
    ):
        client.feedback("tile", tile_sample, [5], config_indices=[0])
    assert len(sent) == 3 and len(set(sent)) == 1


def test_feedback_configs_too_large_for_int64_are_sent_as_floats(
    tile_sample: Sample,
) -> None:
    """``astype(int64)`` wrapped 1e20 to -2**63 before the body left."""
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":  # the model's collection: tile
            model = {"name": "tile", "collection": "tile", "version": "1"}
            return httpx.Response(200, json={"models": [model]})
        bodies.append(json.loads(request.content))
        return httpx.Response(503)

    configs = np.stack([np.full(24, 1e20, np.float32), np.full(24, 3.0, np.float32)])
    transport = httpx.MockTransport(handler)
    retry = RetryPolicy(max_attempts=1)
    with (
        CostModelClient("http://x", transport=transport, retry=retry) as client,
        pytest.raises(ServiceUnavailable),
    ):
        client.feedback("tile", tile_sample, [5, 7], configs=configs)
    sent = bodies[0]["configs"]
    # All or nothing, as before: one value too large keeps the batch floats.
    assert sent[0] == [float(np.float32(1e20))] * 24 and sent[1] == [3.0] * 24
