"""Trust, round two (issue 27): each attack performed against real servers.

- ``auto`` feedback auth judges the socket the server listens on, not
  ``COSTMODEL_HOST``; a malformed ``Authorization`` is 401, never anonymous; anonymous
  writes to a loopback server must name it (DNS rebinding); anonymous rows are
  purgeable as ``anonymous``, a name no token can take.
- Redis is not trusted with integrity: a forged remembered batch, a planted embedding
  and forged or replayed invalidations are ignored (and counted).
- Re-uploading a named graph with permuted names never re-maps another client's raw
  layout configs.

The servers are ``costmodel serve`` (or uvicorn's factory, the form app.py advertises)
with the session's redis-server; all traffic goes to 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import redis
import sqlalchemy as sa
from servicekit import ARTIFACTS, SERVE, TILE, metric
from typer.testing import CliRunner

from xla_costmodel.cli import build_app
from xla_costmodel.harness import RedisServer, ServiceServer
from xla_costmodel.service.core.events import CHANNEL
from xla_costmodel.service.core.recent import MAX_POLLS, new_ranking_id
from xla_costmodel.service.core.recent import dumps as dump_batch
from xla_costmodel.service.core.redis_store import embedding_key, recent_key
from xla_costmodel.service.store.schema import measurements
from xla_costmodel.tpugraphs.arrays import Sample
from xla_costmodel.tpugraphs.hlo import featurize_hlo
from xla_costmodel.tpugraphs.reader import load_npz

OTHER_TILE = TILE.replace("fusion.191_4ae805e53b8d2b8a", "fusion.205_11d55dfd21d1a19c")
TRANSFORMER = "hlo/jax/transformer_layer_infer.hlo.txt"
SEAL_KEY = "trust-round-two-seal"
cli = CliRunner()


class OnEveryInterface(ServiceServer):
    """uvicorn's factory on 0.0.0.0 (app.py's advertised form); probed on loopback."""

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "xla_costmodel.service.app:app_from_env",
            "--host",
            "0.0.0.0",  # the point: every interface
            "--port",
            str(self.port),
            "--log-level",
            "warning",
        ]


@dataclass
class Pair:
    """Two processes of one deployment: a ranking on ``a``, feedback on ``b``."""

    a: ServiceServer
    b: ServiceServer
    database: str
    redis: redis.Redis


def tile_env(root: Path, database: str, redis_url: str) -> dict[str, str]:
    return {
        "COSTMODEL_MODEL_DIR": str(root / "artifacts"),
        "COSTMODEL_MODELS": "tile",
        "COSTMODEL_DATABASE_URL": database,
        "COSTMODEL_REDIS_URL": redis_url,
        "COSTMODEL_REDIS_HMAC_KEY": SEAL_KEY,
        "COSTMODEL_REDIS_COOLDOWN_S": "0",
    }


@pytest.fixture(scope="module")
def tile_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("trust")
    shutil.copytree(ARTIFACTS / "tile" / "1", root / "artifacts" / "tile" / "1")
    return root


@pytest.fixture(scope="module")
def pair(tile_root: Path, redis_server: RedisServer) -> Iterator[Pair]:
    if redis_server.proc is None:
        redis_server.start()
    database = f"sqlite:///{tile_root / 'costmodel.db'}"
    env = tile_env(tile_root, database, redis_server.url)
    (tile_root / "a").mkdir()
    (tile_root / "b").mkdir()
    with (
        ServiceServer(tile_root / "a", env, argv=SERVE) as a,
        ServiceServer(tile_root / "b", env, argv=SERVE) as b,
    ):
        client = redis.Redis.from_url(redis_server.url)
        yield Pair(a, b, database, client)
        client.close()


@pytest.fixture(scope="module")
def other_kernel(shared_data: Path) -> Sample:
    return load_npz(shared_data / OTHER_TILE)


def graph_body(sample: Sample) -> dict[str, Any]:
    g = sample.graph
    return {
        "node_feat": g.node_feat.tolist(),
        "node_opcode": g.node_opcode.tolist(),
        "edge_index": g.edge_index.tolist(),
    }


def rank(url: str, sample: Sample, configs: np.ndarray) -> dict[str, Any]:
    body = {"model": "tile", "graph": graph_body(sample), "adapt": False}
    r = httpx.post(
        url + "/v1/rank", json={**body, "configs": configs.tolist()}, timeout=60
    )
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def feedback(url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(url + "/v1/feedback", json=body, headers=headers, timeout=60)


def stored(database: str) -> list[dict[str, Any]]:
    engine = sa.create_engine(database)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.select(measurements).order_by(measurements.c.id))
            return [dict(r._mapping) for r in rows]
    finally:
        engine.dispose()


def config(row: dict[str, Any]) -> np.ndarray:
    shape = tuple(int(d) for d in row["config_shape"].split(","))
    return np.frombuffer(row["config"], row["config_dtype"]).reshape(shape)


def metrics(server: ServiceServer) -> str:
    return httpx.get(server.url + "/metrics", timeout=10).text


def wait_for_key(client: redis.Redis, key: str) -> bytes:
    for _ in range(200):
        value = client.get(key)
        if value is not None:
            return value  # type: ignore[no-any-return]
        time.sleep(0.01)
    raise AssertionError(f"{key} never written")


# -- finding 4: who may write -------------------------------------------------------


def test_auto_judges_the_bound_socket_not_the_host_setting(
    tmp_path: Path, tile_root: Path, kernel: Sample
) -> None:
    # No COSTMODEL_FEEDBACK_AUTH, COSTMODEL_HOST left at 127.0.0.1: only the socket
    # (0.0.0.0) says the network can reach it. The probe goes to 127.0.0.1.
    env = tile_env(tile_root, f"sqlite:///{tmp_path / 'c.db'}", "")
    env.pop("COSTMODEL_REDIS_URL")
    with OnEveryInterface(tmp_path, env) as server:
        body = {
            "model": "tile",
            "graph": graph_body(kernel),
            "configs": kernel.configs[:2].tolist(),
            "runtimes_ns": [int(x) for x in kernel.runtimes[:2]],
        }
        r = feedback(server.url, body)
        assert (r.status_code, r.json()["error"]["code"]) == (401, "unauthorized")
        assert r.headers["www-authenticate"] == "Bearer"
        assert stored(f"sqlite:///{tmp_path / 'c.db'}") == []


@pytest.mark.parametrize(
    "authorization", ["Token x", "Basic dXNlcjpwYXNz", "Bearer", "Bearer a b", "cmw_x"]
)
def test_an_authorization_that_is_not_bearer_is_401_never_anonymous(
    pair: Pair, kernel: Sample, authorization: str
) -> None:
    # pair's servers listen on loopback: anonymous feedback is open there, so a
    # mistyped scheme used to be written as anonymous rows.
    before = len(stored(pair.database))
    body = {
        "model": "tile",
        "graph": graph_body(kernel),
        "configs": kernel.configs[:1].tolist(),
        "runtimes_ns": [int(kernel.runtimes[0])],
    }
    r = feedback(pair.a.url, body, Authorization=authorization)
    assert (r.status_code, r.json()["error"]["field"]) == (401, "Authorization")
    assert len(stored(pair.database)) == before


def test_anonymous_writes_to_a_loopback_server_must_name_it(
    pair: Pair, kernel: Sample
) -> None:
    body = {
        "model": "tile",
        "graph": graph_body(kernel),
        "configs": kernel.configs[:1].tolist(),
        "runtimes_ns": [int(kernel.runtimes[0])],
    }
    port = pair.a.port
    for rebound in (f"attacker.example:{port}", "attacker.example", f"10.0.0.1:{port}"):
        r = feedback(pair.a.url, body, Host=rebound)  # what a rebinding page sends
        assert (r.status_code, r.json()["error"]["field"]) == (403, "Host"), rebound
    for local in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
        assert feedback(pair.a.url, body, Host=local).status_code == 200, local


def test_anonymous_rows_are_purged_as_anonymous_a_reserved_name(
    pair: Pair, kernel: Sample
) -> None:
    body = {
        "model": "tile",
        "graph": graph_body(kernel),
        "configs": kernel.configs[3:5].tolist(),
        "runtimes_ns": [int(x) for x in kernel.runtimes[3:5]],
    }
    assert feedback(pair.a.url, body).status_code == 200
    anonymous = [r for r in stored(pair.database) if r["writer"] is None]
    assert len(anonymous) >= 2
    app = build_app()
    purged = cli.invoke(
        app,
        [
            "measurements",
            "purge",
            "--writer",
            "anonymous",
            "--database-url",
            pair.database,
        ],
    )
    assert purged.exit_code == 0, purged.output
    assert int(purged.stdout.splitlines()[-1]) == len(anonymous)
    assert [r for r in stored(pair.database) if r["writer"] is None] == []
    for name in ("anonymous", "Anonymous"):
        made = cli.invoke(
            app, ["tokens", "create", name, "--database-url", pair.database]
        )
        assert made.exit_code == 2 and "reserved" in made.output, made.output


# -- finding 7: Redis is not trusted with integrity ----------------------------------


def test_a_forged_remembered_batch_never_becomes_a_writers_measurements(
    pair: Pair, kernel: Sample
) -> None:
    honest, attacker = kernel.configs[:4], kernel.configs[-4:]
    answer = rank(pair.a.url, kernel, honest)
    key = recent_key("tile", "1", answer["graph_id"], answer["ranking_id"])
    wait_for_key(pair.redis, key)  # a's batch, shared for b
    scores = np.zeros(len(attacker), np.float32)
    pair.redis.set(key, dump_batch(attacker, scores))  # the attacker's configs
    before = len(stored(pair.database))
    r = feedback(
        pair.b.url,
        {
            "model": "tile",
            "graph_id": answer["graph_id"],
            "ranking_id": answer["ranking_id"],
            "config_indices": [0, 1],
            "runtimes_ns": [1000, 2000],
        },
    )
    rows = stored(pair.database)[before:]
    attacker_rows = [
        r for r in rows if any(np.array_equal(config(r), c) for c in attacker)
    ]
    assert attacker_rows == []
    # b never saw the batch itself: the honest one is not to be had, so 409.
    assert (r.status_code, r.json()["error"]["code"]) == (409, "ranking_not_found")
    text = metrics(pair.b)
    assert metric(text, "costmodel_redis_integrity_failures_total", kind="ranking") >= 1


def test_a_planted_embedding_is_ignored(
    pair: Pair, kernel: Sample, other_kernel: Sample
) -> None:
    # a ranks both graphs honestly; their embeddings land in Redis (sealed). The
    # attacker copies the other graph's (well-shaped, sealed for its own key) over
    # the kernel's; b, which never embedded the kernel, must not use it.
    configs = kernel.configs[:16]
    honest = rank(pair.a.url, kernel, configs)
    other = rank(pair.a.url, other_kernel, other_kernel.configs[:2])
    target = embedding_key("tile", "1", honest["graph_id"])
    source = embedding_key("tile", "1", other["graph_id"])
    planted = wait_for_key(pair.redis, source)
    wait_for_key(pair.redis, target)
    pair.redis.set(target, planted)
    failures = metric(
        metrics(pair.b), "costmodel_redis_integrity_failures_total", kind="embedding"
    )
    answer = rank(pair.b.url, kernel, configs)
    assert answer["cache"] == "miss"  # computed, not read from Redis
    np.testing.assert_allclose(answer["scores"], honest["scores"], rtol=1e-6)
    after = metric(
        metrics(pair.b), "costmodel_redis_integrity_failures_total", kind="embedding"
    )
    assert after == failures + 1


def invalidations(server: ServiceServer) -> float:
    return metric(
        metrics(server), "costmodel_generation_invalidations_total", source="remote"
    )


def test_forged_and_replayed_invalidations_are_dropped(
    pair: Pair, kernel: Sample
) -> None:
    subscriber = pair.redis.pubsub()
    subscriber.subscribe(CHANNEL)
    subscriber.get_message(timeout=1)  # the subscribe confirmation
    # A genuine message from b (its feedback), captured as an attacker would.
    body = {
        "model": "tile",
        "graph": graph_body(kernel),
        "configs": kernel.configs[7:8].tolist(),
        "runtimes_ns": [int(kernel.runtimes[7])],
    }
    assert feedback(pair.b.url, body).status_code == 200
    genuine = None
    for _ in range(50):
        message = subscriber.get_message(timeout=0.1)
        if message and message["type"] == "message":
            genuine = message["data"]
            break
    subscriber.close()
    assert genuine is not None
    time.sleep(0.2)  # a has heard it
    heard = invalidations(pair.a)
    forged = 0
    for i in range(40):
        # The old wire format, an announcement (drop everything), and a well-formed
        # new one without the key's seal.
        pair.redis.publish(CHANNEL, json.dumps([f"x{i}", None, None, None]))
        pair.redis.publish(
            CHANNEL, json.dumps([f"y{i}", 1, int(time.time() * 1000), None, None, None])
        )
        pair.redis.publish(CHANNEL, genuine)  # a replay
        forged += 3
    time.sleep(0.5)
    assert invalidations(pair.a) == heard  # not one entry dropped
    text = metrics(pair.a)
    dropped = metric(
        text, "costmodel_redis_integrity_failures_total", kind="message"
    ) + metric(text, "costmodel_redis_integrity_failures_total", kind="replay")
    assert dropped >= forged


def test_a_fresh_looking_unknown_ranking_id_costs_a_few_redis_gets(
    pair: Pair, kernel: Sample
) -> None:
    # Anyone may send an id that claims to be a millisecond old: b then waits for
    # a SET that never comes, with doubling waits, not a GET every 5 ms.
    gid = rank(pair.a.url, kernel, kernel.configs[:2])["graph_id"]

    def gets() -> int:
        stats: dict[str, Any] = pair.redis.info("commandstats")  # type: ignore[assignment]
        return int(stats.get("cmdstat_get", {}).get("calls", 0))

    before = gets()
    r = feedback(
        pair.b.url,
        {
            "model": "tile",
            "graph_id": gid,
            "ranking_id": new_ranking_id(),
            "config_indices": [0],
            "runtimes_ns": [1000],
        },
    )
    assert (r.status_code, r.json()["error"]["code"]) == (409, "ranking_not_found")
    assert gets() - before <= 1 + MAX_POLLS  # the first look, then the polls


# -- finding 8: a named graph's record is never replaced ----------------------------


def swap_names(text: str, one: str, two: str) -> str:
    """The same module with two instructions' names exchanged everywhere."""
    names = "|".join(re.escape(n) for n in (one, two))
    pattern = re.compile(rf"(?<![\w.])(?:{names})(?![\w.])")
    return pattern.sub(lambda m: two if m[0] == one else one, text)


@pytest.fixture(scope="module")
def layout_pair(
    tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer
) -> Iterator[tuple[ServiceServer, ServiceServer]]:
    root = tmp_path_factory.mktemp("names")
    shutil.copytree(ARTIFACTS / "layout" / "1", root / "artifacts" / "layout" / "1")
    if redis_server.proc is None:
        redis_server.start()
    env = tile_env(root, f"sqlite:///{root / 'c.db'}", redis_server.url)
    env["COSTMODEL_MODELS"] = "layout"
    (root / "a").mkdir()
    (root / "b").mkdir()
    with (
        ServiceServer(root / "a", env, argv=SERVE) as a,
        ServiceServer(root / "b", env, argv=SERVE) as b,
    ):
        yield a, b


def test_permuted_names_never_remap_another_clients_raw_configs(
    layout_pair: tuple[ServiceServer, ServiceServer], shared_data: Path
) -> None:
    # The victim uploads its module to one replica, the attacker the same module
    # with two names exchanged to another; the victim's next rank by id reaches
    # the attacker's replica (records are shared through Redis).
    victim = (shared_data / TRANSFORMER).read_text()
    hlo = featurize_hlo(victim, configurable=None)
    one, two = "dot.9", "dot.10"  # both f32[1024, n]{1,0}: rank 2, configurable
    assert {one, two} <= set(hlo.node_names)
    attacker = swap_names(victim, one, two)
    assert featurize_hlo(attacker, configurable=None).node_names != hlo.node_names
    raw = [{one: {"output": [1, 0]}}, {two: {"output": [1, 0]}}, {}]
    mine, theirs = (server.url + "/v1" for server in layout_pair)
    headers = {"content-type": "text/x-hlo"}

    def put(url: str, body: str) -> str:
        r = httpx.put(
            url + "/graphs", params={"model": "layout"}, content=body, headers=headers
        )
        assert r.status_code == 200, r.text
        return str(r.json()["graph_id"])

    def ranked(url: str, **graph: Any) -> httpx.Response:
        body = {"model": "layout", "raw_configs": raw, "adapt": False, **graph}
        return httpx.post(url + "/rank", json=body, timeout=60)

    gid = put(mine, victim)
    meant = ranked(mine, hlo=victim)  # what the victim's names mean
    assert meant.status_code == 200, meant.text
    assert ranked(mine, graph_id=gid).json()["scores"] == meant.json()["scores"]
    assert put(theirs, attacker) == gid  # same arrays, names permuted
    by_id = ranked(theirs, graph_id=gid)
    if by_id.status_code == 200:  # never a silent re-map
        assert by_id.json()["scores"] == meant.json()["scores"]
    else:
        error = by_id.json()["error"]
        assert (by_id.status_code, error["code"], error["field"]) == (
            409,
            "graph_metadata_ambiguous",
            "raw_configs",
        )
    # Inline, each module's own names count, whatever was uploaded before.
    assert ranked(theirs, hlo=victim).json()["scores"] == meant.json()["scores"]
    swapped = ranked(mine, hlo=attacker).json()["scores"]
    expected = meant.json()["scores"]
    assert swapped == [expected[1], expected[0], expected[2]]  # its own names
