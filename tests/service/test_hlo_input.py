"""HLO text and raw configs as inputs: ``text/x-hlo`` uploads, ``hlo`` and
``raw_configs`` in rank requests, against the real app and real modules."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from servicekit import NPZ, AppClient, graph_npz, npz_bytes

from xla_costmodel.tpugraphs.arrays import Sample
from xla_costmodel.tpugraphs.configs import decode_layout, decode_tiles
from xla_costmodel.tpugraphs.hlo import featurize_hlo
from xla_costmodel.tpugraphs.hlo.cli import featurize_file

pytestmark = pytest.mark.anyio

HLO = {"content-type": "text/x-hlo"}
TRANSFORMER = "hlo/jax/transformer_layer_infer.hlo.txt"
MLP = "hlo/jax/mlp_infer.hlo.txt"
UNET_TEXT = "hlo/unet_3d.4x4.bf16.hlo.txt"
TILE_TEXT = "hlo/tile/fusion.191_4ae805e53b8d2b8a.hlo.txt"


def text(shared_data: Path, name: str) -> str:
    return (shared_data / name).read_text()


async def put_hlo(
    client: httpx.AsyncClient, body: str, model: str = "layout", **params: Any
) -> httpx.Response:
    return await client.put(
        "/v1/graphs", params={"model": model, **params}, content=body, headers=HLO
    )


async def scores(client: httpx.AsyncClient, body: dict[str, Any]) -> list[float]:
    answer = await client.post("/v1/rank", json=body)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["scores"])


def layouts_by_name(sample: Sample, names: list[str], count: int) -> list[Any]:
    """The sample's first ``count`` layout configs, raw, keyed by instruction name."""
    ids = sample.graph.node_config_ids
    assert ids is not None
    configs = decode_layout(sample.configs[:count], ids)
    return [
        {names[node]: dataclasses.asdict(layout) for node, layout in config.items()}
        for config in configs
    ]


async def test_jax_text_and_its_featurized_npz_share_one_graph(
    client: httpx.AsyncClient, shared_data: Path, tmp_path: Path
) -> None:
    first = await put_hlo(client, text(shared_data, TRANSFORMER))
    assert first.status_code == 200, first.text
    assert first.json()["cached"] is False
    assert first.json()["configurable_nodes"] == 8  # its dot instructions
    out = tmp_path / "transformer.npz"
    featurize_file(shared_data / TRANSFORMER, out, None)  # costmodel featurize
    again = await client.put(
        "/v1/graphs", params={"model": "layout"}, content=out.read_bytes(), headers=NPZ
    )
    assert again.status_code == 200, again.text
    assert again.json()["graph_id"] == first.json()["graph_id"]
    assert again.json()["cached"] is True


async def test_tile_model_featurizes_without_configurable_nodes(
    client: httpx.AsyncClient, shared_data: Path
) -> None:
    body = text(shared_data, MLP)
    hlo = featurize_hlo(body, configurable=None)
    arrays = npz_bytes(
        node_feat=hlo.node_feat, node_opcode=hlo.node_opcode, edge_index=hlo.edge_index
    )
    as_arrays = await client.put("/v1/graphs?model=tile", content=arrays, headers=NPZ)
    as_text = await put_hlo(client, body, "tile")
    assert as_text.status_code == 200, as_text.text
    assert as_text.json()["graph_id"] == as_arrays.json()["graph_id"]
    assert as_text.json()["configurable_nodes"] == 0 and as_text.json()["cached"]


async def test_unet_text_is_the_real_unet_graph(
    client: httpx.AsyncClient, shared_data: Path, unet: Sample
) -> None:
    real = await client.put(
        "/v1/graphs?model=layout", content=graph_npz(unet), headers=NPZ
    )
    from_text = await put_hlo(client, text(shared_data, UNET_TEXT))
    assert from_text.status_code == 200, from_text.text
    assert from_text.json() == {**real.json(), "cached": True}
    assert from_text.json()["configurable_nodes"] == 62


async def test_raw_tile_configs_rank_like_the_feature_arrays(
    client: httpx.AsyncClient, shared_data: Path, kernel: Sample
) -> None:
    real = await client.put(
        "/v1/graphs?model=tile", content=graph_npz(kernel), headers=NPZ
    )
    uploaded = await put_hlo(client, text(shared_data, TILE_TEXT), "tile")
    gid = uploaded.json()["graph_id"]
    assert gid == real.json()["graph_id"]
    raw = [dataclasses.asdict(t) for t in decode_tiles(kernel.configs)]
    base = {"model": "tile", "graph_id": gid}
    by_arrays = await scores(client, {**base, "configs": kernel.configs.tolist()})
    assert await scores(client, {**base, "raw_configs": raw}) == by_arrays
    assert len(by_arrays) == 579


async def test_raw_layout_configs_by_name_rank_like_node_config_feat(
    client: httpx.AsyncClient, shared_data: Path, unet: Sample
) -> None:
    body = text(shared_data, UNET_TEXT)
    gid = (await put_hlo(client, body)).json()["graph_id"]
    raw = layouts_by_name(unet, featurize_hlo(body).node_names, 300)
    base = {"model": "layout", "graph_id": gid}
    by_arrays = await scores(client, {**base, "configs": unet.configs[:300].tolist()})
    assert await scores(client, {**base, "raw_configs": raw}) == by_arrays
    # Inline: the text and the raw configs in one request, the same graph and scores.
    inline = await client.post(
        "/v1/rank", json={"model": "layout", "hlo": body, "raw_configs": raw[:20]}
    )
    assert inline.json()["graph_id"] == gid and inline.json()["cache"] == "memory"
    assert inline.json()["scores"] == by_arrays[:20]


async def test_graph_sent_as_arrays_takes_layouts_by_node_id(
    client: httpx.AsyncClient, small_layout: Sample
) -> None:
    up = await client.put(
        "/v1/graphs?model=layout", content=graph_npz(small_layout), headers=NPZ
    )
    ids = small_layout.graph.node_config_ids
    assert ids is not None
    raw = [
        {str(node): dataclasses.asdict(layout) for node, layout in config.items()}
        for config in decode_layout(small_layout.configs[:50], ids)
    ]
    base = {"model": "layout", "graph_id": up.json()["graph_id"]}
    by_arrays = await scores(
        client, {**base, "configs": small_layout.configs[:50].tolist()}
    )
    assert await scores(client, {**base, "raw_configs": raw}) == by_arrays
    by_name = await client.post(
        "/v1/rank", json={**base, "raw_configs": [{"convolution.1": {"output": [0]}}]}
    )
    assert by_name.status_code == 422
    assert by_name.json()["error"]["field"] == "raw_configs[0].convolution.1"
    assert "node id" in by_name.json()["error"]["message"]


async def test_explicit_configurable_names(
    client: httpx.AsyncClient, shared_data: Path
) -> None:
    body = text(shared_data, TRANSFORMER)
    names = featurize_hlo(body).node_names
    pair = ["dot.9", "dot.12"]
    assert set(pair) <= set(names)
    comma = await put_hlo(client, body, configurable="dot.12,dot.9")
    repeated = await put_hlo(client, body, configurable=pair)
    assert comma.status_code == 200, comma.text
    assert comma.json()["configurable_nodes"] == 2
    assert repeated.json()["graph_id"] == comma.json()["graph_id"]
    default = await put_hlo(client, body)
    assert default.json()["graph_id"] != comma.json()["graph_id"]
    raw = [{"dot.9": {"output": [1, 0]}}, {"dot.12": {"output": [0, 1]}}, {}]
    inline = await client.post(
        "/v1/rank",
        json={"model": "layout", "hlo": body, "configurable": pair, "raw_configs": raw},
    )
    assert inline.status_code == 200, inline.text
    assert inline.json()["graph_id"] == comma.json()["graph_id"]
    other = await client.post(
        "/v1/rank",
        json={
            "model": "layout",
            "graph_id": comma.json()["graph_id"],
            "raw_configs": [{"dot.10": {"output": [1, 0]}}],
        },
    )
    assert other.status_code == 422
    assert other.json()["error"]["field"] == "raw_configs[0].dot.10"


@pytest.mark.parametrize(
    ("params", "model", "field", "fragment"),
    [
        ({"configurable": "dot.9,no_such.1"}, "layout", "configurable[1]", "no_such.1"),
        ({"configurable": ","}, "layout", "configurable", "at least one"),
        ({"configurable": "dot.9"}, "tile", "configurable", "tile model"),
    ],
)
async def test_bad_configurable_is_named(
    client: httpx.AsyncClient,
    shared_data: Path,
    params: dict[str, str],
    model: str,
    field: str,
    fragment: str,
) -> None:
    answer = await put_hlo(client, text(shared_data, TRANSFORMER), model, **params)
    assert answer.status_code == 422
    assert answer.json()["error"]["field"] == field
    assert fragment in answer.json()["error"]["message"]


async def test_configurable_needs_a_text_body_and_a_configurable_module(
    client: httpx.AsyncClient, shared_data: Path, small_layout: Sample
) -> None:
    npz = await client.put(
        "/v1/graphs?model=layout&configurable=dot.1",
        content=graph_npz(small_layout),
        headers=NPZ,
    )
    assert npz.status_code == 422 and npz.json()["error"]["field"] == "configurable"
    copy = text(shared_data, "hlo/tile/copy.24_715d6c5d784f9262.hlo.txt")
    none = await put_hlo(client, copy)  # no convolution, dot or reshape
    assert none.status_code == 422
    assert none.json()["error"]["field"] == "configurable"
    assert (await put_hlo(client, copy, "tile")).status_code == 200


BROKEN = "HloModule m\n\nENTRY e {\n  a = f32[2]{0} parameter(0)\n  ROOT b = f32[2 negate(a)\n}\n"


async def test_bad_hlo_is_a_422_naming_the_line(client: httpx.AsyncClient) -> None:
    upload = await put_hlo(client, BROKEN)
    assert upload.status_code == 422
    error = upload.json()["error"]
    assert error["code"] == "invalid_request" and error["field"] == "body"
    assert "line 5:" in error["message"]
    inline = await client.post(
        "/v1/rank", json={"model": "tile", "hlo": BROKEN, "configs": [[1.0] * 24]}
    )
    assert inline.status_code == 422
    assert inline.json()["error"]["field"] == "hlo"
    assert "line 5:" in inline.json()["error"]["message"]
    binary = await put_hlo(client, "\x00\xff garbage")
    assert binary.status_code == 422 and "line 1:" in binary.json()["error"]["message"]


TILE_CASES = [
    ([{"kernel_bounds": [0]}], "raw_configs[0].kernel_bounds[0]", "positive"),
    ([{}, {"kernel": [1]}], "raw_configs[1].kernel", "unknown field"),
    ([{"output_bounds": "8,128"}], "raw_configs[0].output_bounds", "list"),
    ([[1, 2]], "raw_configs[0]", "object"),
    ([], "raw_configs", "non-empty"),
]
LAYOUT_CASES = [
    ([{"dot.9": {"output": [0, 2]}}], "raw_configs[0].dot.9.output", "rank 2"),
    ([{}, {"dot.9": {"output": [0, 0]}}], "raw_configs[1].dot.9.output", "distinct"),
    ([{"dot.9": {"layout": [0]}}], "raw_configs[0].dot.9.layout", "unknown field"),
    ([{"add.1": {"output": [0]}}], "raw_configs[0].add.1", "no configurable"),
    ([{"dot.9": {}, "99999": {}}], "raw_configs[0].99999", "not a configurable node"),
    ([{"dot.9": [0, 1]}], "raw_configs[0].dot.9", "object"),
]


@pytest.mark.parametrize(("raw", "field", "fragment"), TILE_CASES + LAYOUT_CASES)
async def test_bad_raw_configs_name_the_field(
    client: httpx.AsyncClient,
    shared_data: Path,
    raw: Any,
    field: str,
    fragment: str,
) -> None:
    model = "tile" if (raw, field, fragment) in TILE_CASES else "layout"
    body = text(shared_data, TILE_TEXT if model == "tile" else TRANSFORMER)
    answer = await client.post(
        "/v1/rank", json={"model": model, "hlo": body, "raw_configs": raw}
    )
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_request", field)
    assert fragment in error["message"]


async def test_a_node_set_twice_by_name_and_by_id(
    client: httpx.AsyncClient, shared_data: Path
) -> None:
    body = text(shared_data, TRANSFORMER)
    node = featurize_hlo(body).node_names.index("dot.9")
    raw = [{"dot.9": {"output": [0, 1]}, str(node): {"output": [1, 0]}}]
    answer = await client.post(
        "/v1/rank", json={"model": "layout", "hlo": body, "raw_configs": raw}
    )
    assert answer.status_code == 422
    assert answer.json()["error"]["field"] == f"raw_configs[0].{node}"
    assert "twice" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"graph_id": "0" * 64}, "graph_id"),  # hlo and graph_id
        ({"configs": [[[-1.0] * 18] * 8]}, "configs"),  # configs and raw_configs
        (
            {"hlo": None, "graph_id": "0" * 64, "configurable": ["dot.9"]},
            "configurable",
        ),
    ],
)
async def test_rank_body_combinations(
    client: httpx.AsyncClient, shared_data: Path, extra: dict[str, Any], field: str
) -> None:
    body = {
        "model": "layout",
        "hlo": text(shared_data, TRANSFORMER),
        "raw_configs": [{}],
        **extra,
    }
    answer = await client.post(
        "/v1/rank", json={k: v for k, v in body.items() if v is not None}
    )
    assert answer.status_code == 422
    assert answer.json()["error"]["field"] == field


async def test_names_reach_another_replica_through_redis(
    make_client: AppClient, shared_data: Path, unet: Sample, redis_url: str
) -> None:
    one = await make_client(redis_url=redis_url)
    two = await make_client(redis_url=redis_url)  # a fresh process: empty memory
    body = text(shared_data, UNET_TEXT)
    gid = (await put_hlo(one, body)).json()["graph_id"]
    await two.put("/v1/graphs?model=layout", content=graph_npz(unet), headers=NPZ)
    raw = layouts_by_name(unet, featurize_hlo(body).node_names, 10)
    rank = {"model": "layout", "graph_id": gid, "raw_configs": raw}
    answer = await two.post("/v1/rank", json=rank)  # the arrays upload kept the names
    assert answer.status_code == 200, answer.text
    shared = redis.Redis.from_url(redis_url)  # every record of the graph expires
    shared.delete(*shared.keys(f"costmodel:meta:v2:{gid}*"))
    three = await make_client(redis_url=redis_url)
    missing = await three.post("/v1/rank", json=rank)
    assert missing.status_code == 409
    error = missing.json()["error"]
    assert (error["code"], error["field"]) == (
        "graph_metadata_not_found",
        "raw_configs",
    )
    by_arrays = {"model": "layout", "graph_id": gid, "configs": [[[-1] * 18] * 62]}
    assert (await three.post("/v1/rank", json=by_arrays)).status_code == 200


async def test_openapi_documents_hlo_and_raw_configs(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    content = spec["paths"]["/v1/graphs"]["put"]["requestBody"]["content"]
    assert "text/x-hlo" in content
    params = {p["name"] for p in spec["paths"]["/v1/graphs"]["put"]["parameters"]}
    assert "configurable" in params
    rank_in = spec["components"]["schemas"]["RankIn"]
    assert {"hlo", "configurable", "raw_configs"} <= set(rank_in["properties"])
    example = rank_in["examples"][2]  # HLO text with raw layout configs
    answer = await client.post("/v1/rank", json=example)
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["ranking"]) == len(example["raw_configs"])
    tile = await client.post("/v1/rank", json=rank_in["examples"][1])
    assert tile.json()["error"]["code"] == "graph_not_found"  # valid, just unknown
    upload = await client.put(
        "/v1/graphs?model=layout", content=content["text/x-hlo"]["example"], headers=HLO
    )
    assert upload.status_code == 200, upload.text


async def test_hlo_bodies_obey_the_size_limit(
    make_client: AppClient, shared_data: Path
) -> None:
    small = await make_client(max_body_bytes=100_000)
    answer = await put_hlo(small, text(shared_data, UNET_TEXT))  # 602,614 bytes
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "payload_too_large"
