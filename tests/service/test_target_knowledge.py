"""Target knowledge in POST /v1/rank: what every graph measured on a target teaches
about a graph never measured, per target, the same on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import numpy as np
import pytest
from servicekit import REPO, AppClient, graph_json, metric

# xla_cpu/1 rows on purpose: what old clients send, upgraded by the service (the
# planted effects' asserts lean on the shipped model's prior over these rows).
from xla_costmodel.tpugraphs import xla_cpu
from xla_costmodel.tpugraphs.knowledge import SPREAD
from xla_costmodel.tpugraphs.reader import load_npz

pytestmark = pytest.mark.anyio
DATA = REPO / "datasets" / "xla_cpu" / "cpu-amd-25.1-avx2"
OPTION = 6  # disable_dot_library_rewriter: the planted effect's option
EFFECT = {"cpu-test-a": -0.5, "cpu-test-b": +0.5}  # log runtime when it is set
MEASURED = 12  # configs fed back per graph, the default among them


@pytest.fixture
def seedless(model_dir: Path) -> Path:
    """The shipped xla_cpu model without its seeds: knowledge from the database only."""
    path = model_dir / "xla_cpu" / "1" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["knowledge"] = None
    path.write_text(json.dumps(manifest))
    return model_dir


def graphs() -> list[dict[str, Any]]:
    """Real xla_cpu graphs (the zoo's MLP and CNN programs); the last one is never
    measured."""
    names = [
        "mlp_2x2048_b16",
        "mlp_3x1024_b256",
        "mlp_4x2048_b32",
        "mlp_train_3x1024_b64",
        "cnn_small_32_b32",
        "cnn_wide_32_b16",
        "cnn_train_32_b8",
        "mlp_train_4x1024_b16",
    ]
    return [graph_json(load_npz(DATA / f"{n}.npz", "xla_cpu")) for n in names]


def planted(target: str, rows: np.ndarray, seed: int) -> list[int]:
    noise = 0.02 * np.random.default_rng(seed).standard_normal(len(rows))
    log_rt = EFFECT[target] * rows[:, OPTION] + noise
    log_rt[(rows == xla_cpu.default_row()).all(1)] = 0.0
    return [int(x) for x in 1e6 * np.exp(log_rt)]


async def feed_target(
    client: httpx.AsyncClient, target: str, seen: list[dict[str, Any]]
) -> None:
    for i, graph in enumerate(seen):
        rows = xla_cpu.sample(MEASURED, seed=100 + i)  # row 0: the default
        body = {
            "model": "xla_cpu",
            "graph": graph,
            "configs": rows.tolist(),
            "runtimes_ns": planted(target, rows, i),
            "target": target,
        }
        r = await client.post("/v1/feedback", json=body)
        assert r.status_code == 200, r.text


async def rank(
    client: httpx.AsyncClient,
    graph: dict[str, Any],
    rows: np.ndarray,
    target: str,
    **extra: Any,
) -> dict[str, Any]:
    body = {
        "model": "xla_cpu",
        "graph": graph,
        "configs": rows.tolist(),
        "target": target,
        **extra,
    }
    r = await client.post("/v1/rank", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def learned(
    client: httpx.AsyncClient, graph: dict[str, Any], target: str, n: int
) -> dict[str, Any]:
    """Rank until the target's knowledge holds ``n`` programs (the refresher runs
    off the request path, woken by this process's feedback)."""
    rows = xla_cpu.sample(32, seed=7)
    with anyio.fail_after(20):
        while True:
            answer = await rank(client, graph, rows, target)
            if answer["target_programs"] >= n:
                return answer
            await anyio.sleep(0.05)


async def check_planted(client: httpx.AsyncClient) -> dict[str, list[float]]:
    *seen, unseen = graphs()
    for target in EFFECT:
        await feed_target(client, target, seen)
    rows = xla_cpu.sample(32, seed=7)
    with_option = rows[:, OPTION] == 1
    scores = {}
    for target, effect in EFFECT.items():
        answer = await learned(client, unseen, target, len(seen))
        assert answer["adapted"] == 0  # never measured: the knowledge alone
        assert answer["target_programs"] == len(seen)
        assert answer["target_measurements"] == len(seen) * MEASURED
        assert answer["prior_weight"] < 1.0  # the model never saw this target
        assert answer["knowledge_weight"] > 0.0
        s = np.asarray(answer["scores"])
        faster = with_option if effect < 0 else ~with_option
        assert faster[answer["ranking"][:5]].all(), target  # its best guesses
        assert s[faster].mean() < s[~faster].mean() - 0.25, target
        scores[target] = answer["scores"]
    # A target nobody measured learns nothing from the others: the prior alone.
    other = await rank(client, unseen, rows, "cpu-test-c")
    prior = await rank(client, unseen, rows, "cpu-test-c", adapt=False)
    assert other["target_programs"] == 0 and other["scores"] == prior["scores"]
    return scores


async def test_a_planted_effect_ranks_an_unseen_graph_per_target(
    make_client: AppClient, seedless: Path, tmp_path: Path
) -> None:
    client = await make_client(data_dir=tmp_path / "data")
    await check_planted(client)


async def test_ranks_never_fit_the_knowledge(
    make_client: AppClient, seedless: Path, tmp_path: Path
) -> None:
    """Fits happen in the refresher when measurements change, never in a rank."""
    client = await make_client(data_dir=tmp_path / "data")
    *seen, unseen = graphs()
    await feed_target(client, "cpu-test-a", seen)
    await learned(client, unseen, "cpu-test-a", len(seen))

    async def fits() -> float:
        text = (await client.get("/metrics")).text
        name = "costmodel_knowledge_fit_duration_seconds_count"
        return metric(text, name, model="xla_cpu")

    before = await fits()
    rows = xla_cpu.sample(32, seed=7)
    for graph in (unseen, *seen[:3]):
        await rank(client, graph, rows, "cpu-test-a", portfolio=True)
    await anyio.sleep(0.3)  # a refresher tick or two: nothing changed, nothing refits
    assert await fits() == before > 0


async def test_the_same_on_sqlite_and_postgresql(
    make_client: AppClient, seedless: Path, tmp_path: Path, postgres_url: str
) -> None:
    lite = await check_planted(await make_client(data_dir=tmp_path / "data"))
    pg = await check_planted(await make_client(database_url=postgres_url))
    assert lite == pg


async def test_the_first_round_portfolio_is_the_targets_winners_then_spread(
    make_client: AppClient, seedless: Path, tmp_path: Path
) -> None:
    client = await make_client(data_dir=tmp_path / "data")
    *seen, unseen = graphs()
    rows = xla_cpu.sample(64, seed=9)[1:]  # the tuner sends the non-default rows
    fresh = await rank(client, unseen, rows, "cpu-test-a", portfolio=True)
    head = rows[fresh["portfolio"][:4]]
    gaps = [np.abs(head[i] - head[j]).sum() for i in range(4) for j in range(i)]
    assert min(gaps) >= SPREAD  # no knowledge: spread out, not near-duplicates
    await feed_target(client, "cpu-test-a", seen)
    await learned(client, unseen, "cpu-test-a", len(seen))
    answer = await rank(client, unseen, rows, "cpu-test-a", portfolio=True)
    assert sorted(answer["portfolio"]) == list(range(len(rows)))
    assert rows[answer["portfolio"][0], OPTION] == 1  # the target's winner first


async def test_shipped_seeds_answer_before_any_measurement(
    make_client: AppClient, model_dir: Path, tmp_path: Path
) -> None:
    manifest = json.loads((model_dir / "xla_cpu" / "1" / "manifest.json").read_text())
    if not manifest.get("knowledge"):
        pytest.fail("the shipped xla_cpu model carries no knowledge seeds")
    client = await make_client(data_dir=tmp_path / "data")
    unseen = graphs()[-1]
    rows = xla_cpu.sample(32, seed=7)
    own = manifest["targets"][0]
    answer = await rank(client, unseen, rows, own)
    assert answer["prior_weight"] == 1.0  # trained on this target
    assert answer["target_programs"] >= manifest["knowledge"]["programs"][own]
    new = await rank(client, unseen, rows, "cpu-never-seen")
    assert new["prior_weight"] < 1.0 and new["target_programs"] > 0  # others' seeds


async def test_another_compilers_measurements_never_dominate(
    make_client: AppClient, seedless: Path, tmp_path: Path
) -> None:
    """Every graph measured under two compilers: the option helps under jaxlib A
    and hurts under jaxlib B (stored last). A rank ranks its compiler's way, and
    naming none, the way of the target's newest rows."""
    client = await make_client(data_dir=tmp_path / "data")
    *seen, unseen = graphs()
    for i, graph in enumerate(seen):
        for build, sign in (("jaxlib A", -1.0), ("jaxlib B", +1.0)):
            rows = xla_cpu.sample(MEASURED, seed=100 + i)
            # 0.8: strong enough that the knowledge, not the artifact's prior over
            # these rows, decides the head of the ranking (the prior moves with
            # every retraining)
            log_rt = sign * 0.8 * rows[:, OPTION]
            log_rt[(rows == xla_cpu.default_row()).all(1)] = 0.0
            body = {
                "model": "xla_cpu",
                "graph": graph,
                "configs": rows.tolist(),
                "runtimes_ns": [int(x) for x in 1e6 * np.exp(log_rt)],
                "target": "cpu-test-a",
                "compiler": build,
            }
            r = await client.post("/v1/feedback", json=body)
            assert r.status_code == 200, r.text
    await learned(client, unseen, "cpu-test-a", 2 * len(seen))
    rows = xla_cpu.sample(32, seed=7)
    helps = rows[:, OPTION] == 1
    cases: list[tuple[str | None, np.ndarray]] = [
        ("jaxlib A", helps),
        ("jaxlib B", ~helps),
        (None, ~helps),  # the target's newest rows'
    ]
    for compiler, faster in cases:
        extra = {} if compiler is None else {"compiler": compiler}
        answer = await rank(client, unseen, rows, "cpu-test-a", **extra)
        s = np.asarray(answer["scores"])
        assert s[faster].mean() < s[~faster].mean(), compiler
        assert faster[answer["ranking"][:5]].sum() >= 4, compiler  # its best guesses
