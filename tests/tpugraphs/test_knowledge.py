"""Target knowledge: learned across programs of one target, never mixed across targets."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from xla_costmodel.tpugraphs import knowledge as kn
from xla_costmodel.tpugraphs.blend import FOREIGN_WEIGHT, Measured, blend

WIDTH = 6
DEFAULT = np.zeros(WIDTH, np.float32)


def configs(n: int = 24, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, 2, (n, WIDTH)).astype(np.float32)
    rows[0] = DEFAULT
    return np.unique(rows, axis=0)


def summary(kind: int) -> np.ndarray:
    """Two kinds of program: convolution-heavy (0) or dot-heavy (1)."""
    ops = [10] * 40 + [20] * 5 if kind == 0 else [30] * 40 + [20] * 5
    return kn.summarize(ops)


def program(name: str, effect: float, kind: int = 0, seed: int = 0) -> kn.ProgramRecord:
    """Option 3 changes log runtime by ``effect``; small noise elsewhere."""
    rows = configs(seed=seed)
    rng = np.random.default_rng([seed, 1])
    log_rt = effect * rows[:, 3] + 0.01 * rng.standard_normal(len(rows))
    log_rt[(rows == DEFAULT).all(1)] = 0.0
    rec = kn.record(name, summary(kind), rows, np.exp(log_rt) * 1e6, DEFAULT)
    assert rec is not None
    return rec


def test_a_planted_effect_ranks_an_unseen_program_per_target() -> None:
    """Option 3 helps on target A and hurts on B: each target's knowledge ranks an
    unseen program's configs its own way."""
    a = kn.Knowledge.fit([program(f"a{i}", -0.4, seed=i) for i in range(5)], DEFAULT)
    b = kn.Knowledge.fit([program(f"b{i}", +0.4, seed=i) for i in range(5)], DEFAULT)
    rows = configs(seed=99)
    with3 = rows[:, 3] == 1
    for know, faster in ((a, with3), (b, ~with3)):
        w, evidence = know.weights(summary(0))
        assert evidence > 0 and w.sum() == pytest.approx(1.0)
        pred = know.predict(rows, w)
        assert pred[faster].max() < pred[~faster].min()


def test_programs_like_this_graph_weigh_more() -> None:
    """HLO similarity: the dot-heavy program's effect leads for a dot-heavy graph."""
    know = kn.Knowledge.fit(
        [program("conv", +0.5, kind=0), program("dot", -0.5, kind=1, seed=1)], DEFAULT
    )
    w_dot, _ = know.weights(summary(1))
    w_conv, _ = know.weights(summary(0))
    assert w_dot[1] > 0.9 and w_conv[0] > 0.9


def test_measurements_of_the_graph_reweight_programs() -> None:
    """Alike in HLO, but the graph's own measurements match one program only."""
    know = kn.Knowledge.fit(
        [program("helps", -0.4), program("hurts", +0.4, seed=1)], DEFAULT
    )
    rows = np.array([DEFAULT, [0, 0, 0, 1, 0, 0], [1, 0, 0, 1, 0, 0]], np.float32)
    w, _ = know.weights(summary(0), (rows, np.array([0.0, -0.4, -0.4])))
    assert w[0] > 0.95


def test_the_portfolio_covers_winners_then_explores_spread_out() -> None:
    # Two kinds of program, each with its own winning option.
    recs = []
    for i in range(3):
        rows = configs(seed=i)
        for opt, name in ((1, "x"), (4, "y")):
            log_rt = -0.5 * rows[:, opt]
            rec = kn.record(f"{name}{i}", summary(0), rows, np.exp(log_rt), DEFAULT)
            assert rec is not None
            recs.append(rec)
    know = kn.Knowledge.fit(recs, DEFAULT)
    w, _ = know.weights(summary(0))
    rows = configs(seed=7)
    order = know.portfolio(rows, w, np.zeros(len(rows)))
    assert sorted(order.tolist()) == list(range(len(rows)))
    head = rows[order[:2]]
    assert head[:, 1].max() == 1 and head[:, 4].max() == 1  # both winners covered


def test_without_knowledge_exploration_skips_near_duplicates() -> None:
    rows = configs(64, seed=3)
    order = kn.spread(rows, np.arange(len(rows), dtype=np.float64))
    head = rows[order[:4]]
    gaps = [np.abs(head[i] - head[j]).sum() for i in range(4) for j in range(i)]
    assert min(gaps) >= kn.SPREAD
    top4 = rows[:4]  # the score order alone: near-duplicates allowed
    assert (
        min(np.abs(top4[i] - top4[j]).sum() for i in range(4) for j in range(i))
        < kn.SPREAD
    )


def test_a_model_of_another_target_does_not_dominate() -> None:
    """The same prior, the same measurements: trained on another target, the
    prior weighs FOREIGN_WEIGHT, and knowledge of this target outweighs it."""
    rows = configs(seed=5)
    prior = rows[:, 3].astype(np.float32)  # the prior thinks option 3 is slow
    know = kn.Knowledge.fit([program(f"a{i}", -0.4, seed=i) for i in range(6)], DEFAULT)
    own = blend(rows, prior, know, summary(0), None, foreign=False)
    other = blend(rows, prior, know, summary(0), None, foreign=True)
    assert own.shaping.prior_weight == 1.0
    assert other.shaping.prior_weight == FOREIGN_WEIGHT
    with3 = rows[:, 3] == 1
    assert other.scores[with3].max() < other.scores[~with3].min()  # knowledge wins
    assert other.shaping.target_programs == 6
    assert own.shaping.knowledge_weight == other.shaping.knowledge_weight


def test_blend_adapts_to_the_graphs_own_measurements() -> None:
    rows = configs(seed=11)
    rt = np.exp(-0.3 * rows[:, 2]) * 1e6
    measured = Measured(rows[:8], rt[:8])
    shaped = blend(rows, None, None, None, measured, foreign=False)
    assert shaped.shaping.adapted >= 4
    with2 = rows[:, 2] == 1
    assert shaped.scores[with2].mean() < shaped.scores[~with2].mean()


def test_records_need_the_default_and_merge_repeats() -> None:
    rows = np.array([[1, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0]], np.float32)
    assert kn.record("x", summary(0), rows, [1.0, 2.0], DEFAULT) is None
    rows = np.array([DEFAULT, DEFAULT, [1, 0, 0, 0, 0, 0]], np.float32)
    rec = kn.record("x", summary(0), rows, [100.0, 100.0, 50.0], DEFAULT)
    assert rec is not None and len(rec.rel) == 2 and rec.measurements == 3
    assert rec.rel.min() == pytest.approx(np.log(0.5))


def test_seeds_round_trip_without_pickles(tmp_path: Path) -> None:
    seeds = {"cpu-a": [program("p", -0.2)], "cpu-b": [program("q", 0.3, kind=1)]}
    path = tmp_path / "knowledge.npz"
    kn.save_seeds(path, seeds)
    back = kn.load_seeds(path)
    assert sorted(back) == ["cpu-a", "cpu-b"]
    assert np.array_equal(back["cpu-b"][0].configs, seeds["cpu-b"][0].configs)
    assert np.allclose(back["cpu-a"][0].rel, seeds["cpu-a"][0].rel)
    foreign = kn.foreign(back["cpu-b"], "cpu-b")
    assert foreign[0].name == "cpu-b/q" and foreign[0].trust == kn.FOREIGN_TRUST


def test_a_writers_flood_is_one_vote_in_a_record() -> None:
    rows = configs(seed=2)
    honest = np.exp(-0.3 * rows[:, 3]) * 1e6
    flood_rows = np.repeat(rows[1:2], 4000, axis=0)  # 4,000 outliers on one config
    cfg = np.concatenate([rows, rows, flood_rows])
    rt = np.concatenate([honest, honest * 1.01, np.full(4000, 1e9)])
    who = ["a"] * len(rows) + ["b"] * len(rows) + ["x"] * 4000
    flooded = kn.record("g", summary(0), cfg, rt, DEFAULT, writers=who)
    once = kn.record(
        "g",
        summary(0),
        cfg[: 2 * len(rows) + 1],
        rt[: 2 * len(rows) + 1],
        DEFAULT,
        writers=who[: 2 * len(rows) + 1],
    )
    assert flooded is not None and once is not None
    assert np.array_equal(flooded.rel, once.rel)  # 4,000 rows weigh as one
    # Two honest writers outvote the flooder on that config.
    assert abs(flooded.rel[1] - np.log(honest[1] / honest[0])) < 0.02


def look_alikes(n: int, row: np.ndarray, voter: str | None) -> list[kn.ProgramRecord]:
    """``n`` fake programs shaped like kind 0, each two rows: the default slow,
    ``row`` fast (the attack of docs/security.md, Poisoning)."""
    fakes = []
    for i in range(n):
        two = np.stack([DEFAULT, row])
        rec = kn.record(f"fake{i}", summary(0), two, [1e6, 6e5], DEFAULT, voter=voter)
        assert rec is not None
        fakes.append(rec)
    return fakes


def test_one_writers_look_alikes_weigh_as_one_program() -> None:
    """2,000 look-alike programs of one writer move a new graph's ranking and
    portfolio exactly as far as one of them does, and every seed stays."""
    seeds = [program(f"s{i}", -0.2, seed=10 + i) for i in range(4)]
    seeds += [program(f"d{i}", 0.3, kind=1, seed=20 + i) for i in range(4)]
    honest = [replace(program(f"h{i}", -0.3, seed=i), voter="victim") for i in range(3)]
    rows = configs(64, seed=3)

    def placed(fakes: list[kn.ProgramRecord]) -> tuple[int, int, list[int], float]:
        know = kn.Knowledge.fit(seeds + honest + fakes, DEFAULT)
        w, evidence = know.weights(summary(0))
        scores = know.predict(rows, w)
        ranking = list(np.argsort(scores, kind="stable"))
        order = know.portfolio(rows, w, scores).tolist()
        assert {f"s{i}" for i in range(4)} <= set(know.names)  # never evicted
        return ranking.index(bad), order.index(bad), order[:8], evidence

    clean = kn.Knowledge.fit(seeds + honest, DEFAULT)
    w, _ = clean.weights(summary(0))
    order = clean.portfolio(rows, w, clean.predict(rows, w))
    bad = int([i for i in order if rows[i, 3] == 0][2])  # no winning option
    before = placed([])
    one = placed(look_alikes(1, rows[bad], "mallory"))
    many = placed(look_alikes(2000, rows[bad], "mallory"))
    assert many[:3] == one[:3]  # the bound: one program's worth
    assert many[3] == pytest.approx(one[3]) and one[3] <= before[3] + 1 + 1e-9
    assert before[0] > 20 and one[0] > 10  # the ranking: still far from the head
    # Each look-alike its own vote (as every graph counted before): the head.
    flood = placed(look_alikes(50, rows[bad], None))
    assert flood[0] == 0 and flood[1] == 0


def test_a_writers_share_is_bounded_by_the_others_evidence() -> None:
    seeds = [program(f"s{i}", -0.2, seed=10 + i) for i in range(4)]
    fakes = look_alikes(300, configs()[1], "mallory")
    know = kn.Knowledge.fit(seeds + fakes, DEFAULT)
    kept = [n.startswith("fake") for n in know.names]
    assert sum(kept) == kn.MAX_WRITER_PROGRAMS and know.programs == 4 + sum(kept)
    w, evidence = know.weights(summary(0))
    others = kn.Knowledge.fit(seeds, DEFAULT).weights(summary(0))[1]
    assert w[np.array(kept)].sum() <= 1 / (1 + others) + 1e-9
    assert evidence <= others + 1 + 1e-9


def test_past_the_cap_every_writers_newest_stay() -> None:
    recs = [replace(program(f"a{i}", -0.2, seed=i), voter="a") for i in range(3)]
    flood = [
        replace(r, voter="b") for r in look_alikes(kn.MAX_PROGRAMS, configs()[1], None)
    ]
    know = kn.Knowledge.fit(recs + flood, DEFAULT)
    assert {"a0", "a1", "a2"} <= set(know.names)


def test_another_compilers_programs_never_dominate() -> None:
    """Option 3 helps under jaxlib A and hurts under B; a graph under A ranks A's
    way however many programs (writers) B has, and B's way when it says B."""
    a = [replace(program("a", -0.4), voter="w0", compiler="jaxlib A")]
    b = [
        replace(
            program(f"b{i}", +0.4, seed=i + 1), voter=f"w{i + 1}", compiler="jaxlib B"
        )
        for i in range(5)
    ]
    know = kn.Knowledge.fit(a + b, DEFAULT)
    assert know.compiler == "jaxlib B"  # the newest: current unless a rank says
    rows = configs(seed=99)
    with3 = rows[:, 3] == 1
    for compiler, faster in (("jaxlib A", with3), ("jaxlib B", ~with3)):
        w, _ = know.weights(summary(0), compiler=compiler)
        own = np.array([c == compiler for c in know.compilers])
        assert w[own].sum() >= 0.5
        pred = know.predict(rows, w)
        assert pred[faster].mean() < pred[~faster].mean(), compiler
    # No own-compiler program at all: the others' at FOREIGN_TRUST, not nothing.
    w, evidence = know.weights(summary(0), compiler="jaxlib C")
    assert 0 < evidence <= 6 * kn.FOREIGN_TRUST + 1e-9 and w.sum() == pytest.approx(1)
    # Unknown compilers (None) count as the graph's own.
    plain = kn.Knowledge.fit([program("p", -0.4), *b], DEFAULT)
    w, _ = plain.weights(summary(0), compiler="jaxlib A")
    assert w[0] >= 0.5
