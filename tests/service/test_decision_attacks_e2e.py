"""Issue 34's attacks on reuse, performed against the service as a real process
(``costmodel serve``, SQLite, ``COSTMODEL_FEEDBACK_AUTH=token``, the session's Redis
for the tools' announcements): what one writer's token can make ``GET /v1/best``
answer, and so what ``jit`` applies on every machine of the target
(docs/reuse.md, "What the fleet applies"; docs/security.md's decision rows).

Requests are sent in this issue's shape (a row and paired runtimes). Against a
server from before it, which refuses that shape, ``Served.decide`` resends the same
decision in the old one (the options and figures claimed), so that each test
performs its attack there too; each of them failed there.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from servicekit import ARTIFACTS, SERVE, program
from typer.testing import CliRunner

from xla_costmodel.cli import build_app
from xla_costmodel.harness import RedisServer, ServiceServer
from xla_costmodel.service.store import MeasurementStore, default_sqlite_url
from xla_costmodel.tpugraphs import xla_cpu2
from xla_costmodel.tpugraphs.paired import summarize

DEFAULT = xla_cpu2.default_row().tolist()
ROWS = xla_cpu2.sample(8, seed=5)[1:].tolist()  # row 0 is the default
SEAL = {"COSTMODEL_REDIS_HMAC_KEY": "decision-attacks-seal"}
QUOTA = 60  # rows per writer per hour: a decision of 8 pairs is 17
cli = CliRunner()


def pairs(speedup: float, n: int = 8) -> list[list[int]]:
    """(default, config) runtimes whose smallest ratio is ``speedup``."""
    return [[round(1000 * speedup * (1 + 0.01 * i)), 1000] for i in range(n)]


def decision(graph: str, config: list[Any], **fields: Any) -> dict[str, Any]:
    body = {
        "model": "xla_cpu",
        "graph_id": graph,
        "config": config,
        "paired_runtimes_ns": pairs(1.15),
        "budget": 8,
        "strategy": "model",
        "kept_default": False,
    }
    return {**body, **fields}


def kept(graph: str, **fields: Any) -> dict[str, Any]:
    body = decision(graph, DEFAULT, kept_default=True, **fields)
    del body["paired_runtimes_ns"]
    return body


def legacy(body: dict[str, Any]) -> dict[str, Any]:
    """The decision in the shape servers before issue 34 took: options and figures
    claimed (an attacker's claims where it sends some), no pairs, no refutation."""
    old = {k: v for k, v in body.items() if k not in ("paired_runtimes_ns", "refuted")}
    if "compiler_options" not in old:
        try:
            old["compiler_options"] = (
                {}
                if body["kept_default"]
                else xla_cpu2.to_options(body["config"]).flat()
            )
        except ValueError:
            old["compiler_options"] = {}
    figures = summarize(body.get("paired_runtimes_ns") or [[1000, 1000]])
    claims = {
        "speedup": figures.speedup,
        "speedup_low": min(figures.speedup_low, figures.speedup),
        "speedup_high": figures.speedup_high,
        "p_value": figures.p_value,
        "pairs": figures.pairs,
    }
    return {**claims, **old}


def _old_shape_refused(r: httpx.Response) -> bool:
    if r.status_code != 422:
        return False
    message = r.json()["error"]["message"]
    return "Extra inputs" in message or "Field required" in message


@dataclass
class Served:
    server: ServiceServer
    data: Path
    redis: str
    tokens: dict[str, str] = field(default_factory=dict)

    def auth(self, writer: str | None) -> dict[str, str]:
        if writer is None:
            return {}
        if writer not in self.tokens:  # the service asks the database per request
            store = MeasurementStore.open(default_sqlite_url(self.data))
            try:
                self.tokens[writer] = store.writers.create(writer)
            finally:
                store.close()
        return {"Authorization": f"Bearer {self.tokens[writer]}"}

    def measure(self, writer: str | None, name: str) -> str:
        """The writer's feedback of program ``name`` (the graph inline): its id."""
        seed = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)
        body = {
            "model": "xla_cpu",
            "graph": program(seed),
            "configs": [DEFAULT],
            "runtimes_ns": [1000],
        }
        r = httpx.post(
            self.server.url + "/v1/feedback",
            json=body,
            headers=self.auth(writer),
            timeout=60,
        )
        assert r.status_code == 200, r.text
        return str(r.json()["graph_id"])

    def decide(self, writer: str | None, body: dict[str, Any]) -> httpx.Response:
        url, headers = self.server.url + "/v1/decisions", self.auth(writer)
        r = httpx.post(url, json=body, headers=headers, timeout=60)
        if _old_shape_refused(r):  # a server from before issue 34
            r = httpx.post(url, json=legacy(body), headers=headers, timeout=60)
        return r

    def decided(self, writer: str | None, body: dict[str, Any]) -> dict[str, Any]:
        r = self.decide(writer, body)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def best(self, **params: Any) -> httpx.Response:
        query = {"model": "xla_cpu", **params}
        return httpx.get(self.server.url + "/v1/best", params=query, timeout=60)

    def served(self, **params: Any) -> dict[str, Any] | str:
        """The answer, or its error code."""
        r = self.best(**params)
        return (
            dict(r.json()) if r.status_code == 200 else str(r.json()["error"]["code"])
        )

    def purge(self, writer: str) -> None:
        """``costmodel measurements purge``, announced through the service's Redis."""
        argv = ["measurements", "purge", "--writer", writer]
        argv += ["--database-url", default_sqlite_url(self.data)]
        argv += ["--redis-url", self.redis]
        result = cli.invoke(build_app(), argv, env=SEAL)
        assert result.exit_code == 0, result.output


def serve(root: Path, redis: str, auth: str = "token") -> ServiceServer:
    env = {
        "COSTMODEL_MODEL_DIR": str(root / "artifacts"),
        "COSTMODEL_MODELS": "xla_cpu",
        "COSTMODEL_DATA_DIR": str(root / "data"),
        "COSTMODEL_REDIS_URL": redis,
        "COSTMODEL_REDIS_COOLDOWN_S": "0",
        "COSTMODEL_FEEDBACK_AUTH": auth,
        "COSTMODEL_FEEDBACK_QUOTA_ROWS": str(QUOTA),
        "COSTMODEL_LOG_LEVEL": "WARNING",
        **SEAL,
    }
    return ServiceServer(root, env, argv=SERVE)


def deployment_root(tmp: Path) -> Path:
    shutil.copytree(ARTIFACTS / "xla_cpu" / "1", tmp / "artifacts" / "xla_cpu" / "1")
    return tmp


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer
) -> Iterator[Served]:
    if redis_server.proc is None:
        redis_server.start()
    root = deployment_root(tmp_path_factory.mktemp("decision-attacks"))
    with serve(root, redis_server.url) as server:
        yield Served(server, root / "data", redis_server.url)


# -- a decision is a row, measured by its writer ------------------------------------


def test_an_unmeasured_free_form_decision_is_refused_and_nothing_served(
    served: Served,
) -> None:
    """Was: stored (200), answered as "50.000x by 1 writer(s)"; ``jit`` compiled
    fast-math and a NaN-guarded reduction returned nan."""
    victim = served.measure("a-honest", "a-victim")
    claims = {"speedup": 50.0, "speedup_low": 50.0, "p_value": 0.0, "pairs": 10**6}
    fast_math = {"xla_cpu_enable_fast_math": True}
    body = decision(victim, ROWS[0], compiler_options=fast_math, **claims)
    attempts = {
        "options": body,
        "claims alone": {
            k: v for k, v in body.items() if k not in ("paired_runtimes_ns",)
        }
        | {"compiler_options": xla_cpu2.to_options(ROWS[0]).flat()},
        "a program it never measured": decision(
            hashlib.sha256(b"never stored").hexdigest(), ROWS[0]
        ),
    }
    answers = {}
    for what, attempt in attempts.items():
        r = served.decide("a-attacker", attempt)
        error = r.json().get("error") or {}
        answers[what] = (r.status_code, error.get("code"), error.get("field"))
    assert answers == {
        "options": (422, "invalid_request", "compiler_options"),
        "claims alone": (422, "decision_unmeasured", "paired_runtimes_ns"),
        "a program it never measured": (422, "decision_unmeasured", "graph_id"),
    }
    assert served.served(graph_id=victim) == "no_decision"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            {"compiler_options": {"xla_disable_all_hlo_passes": True}},
            "compiler_options",
        ),
        ({"compiler_options": {"xla_dump_to": "/tmp/attacker"}}, "compiler_options"),
        (
            {"compiler_options": {"xla_backend_optimization_level": 0}},
            "compiler_options",
        ),
        (
            {"compiler_options": {"xla_disable_hlo_passes": "copy-insertion"}},
            "compiler_options",
        ),
        ({"config": [1] * 17}, "config"),  # three scheduler bits
        # Another extra-options entry than the spec's (the map is derived too).
        (
            {
                "compiler_options": {
                    "xla_backend_extra_options": "xla_cpu_made_up_option_for_tests=1"
                }
            },
            "compiler_options",
        ),
        ({"config": [*DEFAULT[:17], 1, 1, 1]}, "config"),  # every threshold level
    ],
)
def test_options_outside_the_spec_are_422_naming_the_field(
    served: Served, change: dict[str, Any], field: str
) -> None:
    """Was: each stored and compiled by every ``jit`` (wrong outputs, a hang, 4.5x
    slower, the HLO dumped where the attacker chose, ``tune`` exiting 2)."""
    graph = served.measure("b-writer", "b-program")
    r = served.decide("b-writer", decision(graph, ROWS[0]) | change)
    assert r.status_code == 422, r.text
    assert (r.json()["error"]["code"], r.json()["error"]["field"]) == (
        "invalid_request",
        field,
    )
    assert served.served(graph_id=graph) == "no_decision"


# -- no single writer decides for others -------------------------------------------


def test_one_writers_fabricated_speedup_cannot_outrank_three_honest_writers(
    served: Served,
) -> None:
    """Was: the largest claimed ``speedup_low`` answered (the attacker's config)."""
    graph = served.measure("c-honest-1", "c-program")
    for name in ("c-honest-1", "c-honest-2", "c-honest-3"):
        served.decided(name, decision(graph, ROWS[1], paired_runtimes_ns=pairs(1.12)))
    # Real stored pairs, fabricated fast: one vote.
    fake = served.decided(
        "c-attacker", decision(graph, ROWS[2], paired_runtimes_ns=pairs(20.0))
    )
    answer = served.served(graph_id=graph)
    assert isinstance(answer, dict), answer
    assert (answer["config"], answer["writers"]) == (ROWS[1], 3)
    assert answer["compiler_options"] == xla_cpu2.to_options(ROWS[1]).flat()
    assert fake["speedup_low"] == 20.0  # its figures: computed from its pairs


def test_min_writers_counts_the_supporters_of_the_exact_row(served: Served) -> None:
    """Was: the attacker's free-form options on the default row, and two honest
    reuse verifications of the default counted for them (``writers: 3``)."""
    graph = served.measure("d-honest-1", "d-program")
    served.measure("d-honest-2", "d-program")
    served.measure("d-attacker", "d-program")
    disabled = {"xla_disable_all_hlo_passes": True}
    r = served.decide(
        "d-attacker",
        decision(
            graph, DEFAULT, compiler_options=disabled, paired_runtimes_ns=pairs(3)
        ),
    )
    assert r.status_code == 422, r.text
    served.decided("d-attacker", decision(graph, ROWS[3], paired_runtimes_ns=pairs(3)))
    for name in ("d-honest-1", "d-honest-2"):
        served.decided(name, kept(graph, strategy="reuse"))
    answer = served.served(graph_id=graph, min_writers=2)
    assert isinstance(answer, dict), answer
    assert (answer["config"], answer["compiler_options"], answer["writers"]) == (
        DEFAULT,
        {},
        2,
    )
    assert served.served(graph_id=graph, min_writers=3) == "no_decision"


def test_a_fingerprint_stays_with_the_writers_who_measured_its_program(
    served: Served,
) -> None:
    """Was: a decision under the victim's (public) fingerprint with a random graph
    id took the fingerprint over, and the mapping, cached for the process's life,
    survived purge and revoke (404 until a restart)."""
    victim = served.measure("e-honest-1", "e-victim")
    served.measure("e-honest-2", "e-victim")
    fp = hashlib.sha256(b"e-victim hlo").hexdigest()
    for name in ("e-honest-1", "e-honest-2"):
        served.decided(name, decision(victim, ROWS[4], hlo_fingerprint=fp))
    own = served.measure("e-attacker", "e-attackers-own")
    served.decided(
        "e-attacker",
        decision(own, ROWS[5], hlo_fingerprint=fp, paired_runtimes_ns=pairs(20.0)),
    )
    taken = served.served(hlo_fingerprint=fp)
    assert isinstance(taken, dict), taken
    assert (taken["config"], taken["graph_id"], taken["writers"]) == (
        ROWS[4],
        victim,
        2,
    )
    # One honest writer and the attacker: a tie on votes, its fabricated pairs
    # win (the documented bound) until the operator purges it; then the honest
    # decision is answered at once, without a restart.
    lone = served.measure("e-honest-3", "e-lone")
    fp2 = hashlib.sha256(b"e-lone hlo").hexdigest()
    served.decided("e-honest-3", decision(lone, ROWS[4], hlo_fingerprint=fp2))
    served.decided(
        "e-attacker",
        decision(own, ROWS[5], hlo_fingerprint=fp2, paired_runtimes_ns=pairs(20.0)),
    )
    won = served.served(hlo_fingerprint=fp2)  # and cached
    assert isinstance(won, dict) and won["config"] == ROWS[5]
    served.purge("e-attacker")
    after = served.served(hlo_fingerprint=fp2)
    assert isinstance(after, dict), after
    assert (after["config"], after["graph_id"]) == (ROWS[4], lone)


def test_verifications_count_against_a_row_and_an_outputs_report_vetoes_it(
    served: Served,
) -> None:
    graph = served.measure("f-first", "f-program")
    served.decided("f-first", decision(graph, ROWS[6]))
    slower = [[1000, round(1200 * (1 + 0.01 * i))] for i in range(8)]
    report = {"config": ROWS[6], "reason": "slower", "paired_runtimes_ns": slower}
    served.decided("f-verifier", kept(graph, strategy="reuse", refuted=report))
    answer = served.served(graph_id=graph)  # 1 supporter, 1 opposer: not ROWS[6]
    assert isinstance(answer, dict), answer
    assert answer["config"] == DEFAULT
    # Two writers measured ROWS[0] faster under one compiler; jit's verification
    # found its outputs different (it measured nothing): never served there.
    other = served.measure("f-first", "f-vetoed")
    served.measure("f-second", "f-vetoed")
    for name in ("f-first", "f-second"):
        for compiler in ("jax-1", "jax-2"):
            served.decided(name, decision(other, ROWS[0], compiler=compiler))
    outputs = {"config": ROWS[0], "reason": "outputs"}
    served.decided("f-jit", kept(other, compiler="jax-1", refuted=outputs))
    vetoed = served.served(graph_id=other, compiler="jax-1")
    assert isinstance(vetoed, dict), vetoed
    assert (vetoed["config"], vetoed["compiler"]) == (DEFAULT, "jax-1")
    elsewhere = served.served(graph_id=other, compiler="jax-2")
    assert isinstance(elsewhere, dict) and elsewhere["config"] == ROWS[0]


# -- the small ones ------------------------------------------------------------------


def test_decisions_beyond_the_quota_are_429_and_not_stored(served: Served) -> None:
    """Was: 150 decisions stored after the writer's feedback got 429s."""
    graph = served.measure("g-writer", "g-program")  # 1 row
    for compiler in ("g1", "g2", "g3"):  # 17 rows each: 52 of 60
        served.decided("g-writer", decision(graph, ROWS[0], compiler=compiler))
    r = served.decide("g-writer", decision(graph, ROWS[1], compiler="g4"))
    assert (r.status_code, r.json()["error"]["code"]) == (429, "quota_exceeded")
    assert int(r.headers["retry-after"]) >= 1
    codes = [
        served.decide("g-writer", kept(graph, compiler=f"k{i}")).status_code
        for i in range(10)
    ]
    assert codes == [200] * (QUOTA - 52) + [429] * (10 - QUOTA + 52)
    stale = served.served(graph_id=graph, compiler="g4")
    assert isinstance(stale, dict) and stale["stale"] is True


def test_a_long_model_version_and_control_characters_are_422(served: Served) -> None:
    """Was: a 65-digit ``model_version`` a 500; U+0085 and U+202E in a compiler
    stored, and printed raw by tools."""
    graph = served.measure("i-writer", "i-program")
    for change, name in (
        ({"model_version": "9" * 65}, "model_version"),
        ({"compiler": "jax\u0085 0.4"}, "compiler"),
        ({"compiler": "jax \u202e4.0 xaj"}, "compiler"),
        ({"compiler": "jax \u2066x\u2069"}, "compiler"),
    ):
        r = served.decide("i-writer", decision(graph, ROWS[0]) | change)
        assert (r.status_code, r.json()["error"]["field"]) == (422, name), r.text
    r = served.best(graph_id=graph, compiler="jax \u202e")
    assert (r.status_code, r.json()["error"]["field"]) == (422, "compiler")
    assert served.served(graph_id=graph) == "no_decision"


def test_a_purge_revokes_the_writers_token(served: Served) -> None:
    """Was: the purged writer went on posting decisions (docs/security.md said a
    purge ends it)."""
    graph = served.measure("j-purged", "j-program")
    served.decided("j-purged", decision(graph, ROWS[0]))
    served.purge("j-purged")
    r = served.decide("j-purged", decision(graph, ROWS[0]))
    assert (r.status_code, r.json()["error"]["code"]) == (401, "unauthorized")
    feedback = httpx.post(
        served.server.url + "/v1/feedback",
        json={
            "model": "xla_cpu",
            "graph_id": graph,
            "configs": [DEFAULT],
            "runtimes_ns": [9],
        },
        headers=served.auth("j-purged"),
        timeout=60,
    )
    assert feedback.status_code == 401
    assert served.served(graph_id=graph) == "no_decision"


def test_anonymous_decisions_are_not_served_once_tokens_are_required(
    tmp_path: Path, redis_url: str
) -> None:
    """Was: with ``auto``, a loopback process's anonymous decisions stayed served
    after a restart with tokens required."""
    root = deployment_root(tmp_path)
    with serve(root, redis_url, auth="auto") as server:
        local = Served(server, root / "data", redis_url)
        graph = local.measure(None, "k-program")
        local.decided(None, decision(graph, ROWS[0]))
        assert isinstance(local.served(graph_id=graph), dict)
    with serve(root, redis_url, auth="token") as server:
        required = Served(server, root / "data", redis_url)
        assert required.served(graph_id=graph) == "no_decision"
        assert required.decide(None, decision(graph, ROWS[1])).status_code == 401
