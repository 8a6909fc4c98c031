"""The knowledge bound, with the probe's shape (docs/security.md, Poisoning): one
writer's look-alike programs of a victim's graph, each slightly different (another
opcode mix near the victim's), each two rows (the default slow, a bad config fast),
move the victim's ranking (``predict``) and portfolio position of that config no
further than its single most similar program does, however many there are.

The real parts the service fits (``service/core/knowledge.py``): the shipped seeds
(the target's own, the other targets' at foreign trust), the victim's measured
programs (one voter) and the attacker's (another), on the collected xla_cpu data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xla_costmodel.tpugraphs import knowledge as kn
from xla_costmodel.tpugraphs.arrays import Sample
from xla_costmodel.tpugraphs.reader import load_npz

REPO = Path(__file__).resolve().parents[2]
TARGET = "cpu-amd-25.1-avx2"
DATA = REPO / "datasets" / "xla_cpu" / TARGET
SEEDS = REPO / "models" / "artifacts" / "xla_cpu" / "1" / "knowledge.npz"
HONEST = ["mlp_2x2048_b16", "mlp_3x1024_b256", "mlp_4x2048_b32", "mlp_train_3x1024_b64"]
NEW = "mlp_train_4x1024_b16"  # the victim's next program
COUNTS = (1, 5, 50, 2000)
CHANGED = 160  # nodes of the victim's 213 a look-alike gives another opcode


class Probe:
    """The victim's side (seeds, its measured programs, its new graph) and the
    attacker's look-alikes of that graph."""

    def __init__(self) -> None:
        seeds = kn.load_seeds(SEEDS)
        others = [
            r
            for t, rs in sorted(seeds.items())
            if t != TARGET
            for r in kn.foreign(rs, t)
        ]
        self.new: Sample = load_npz(DATA / f"{NEW}.npz", "xla_cpu")
        self.default = self.new.configs[0]
        victim = [self._measured(name) for name in HONEST]
        self.base = others + list(seeds[TARGET]) + victim
        self.summary = kn.summarize(self.new.graph.node_opcode)
        is_default = (self.new.configs == self.default).all(1)
        base_ns = float(np.median(self.new.runtimes[is_default]))
        self.truth = np.log(self.new.runtimes / base_ns)  # per config, 0 = default

    def _measured(self, name: str) -> kn.ProgramRecord:
        seen = load_npz(DATA / f"{name}.npz", "xla_cpu")
        summary = kn.summarize(seen.graph.node_opcode)
        rec = kn.record(
            name, summary, seen.configs, seen.runtimes, self.default, voter="victim"
        )
        assert rec is not None
        return rec

    def look_alikes(
        self, n: int, row: np.ndarray, fast_ns: float = 1e6
    ) -> list[kn.ProgramRecord]:
        """``n`` programs of one writer, oldest first, the most similar to the
        victim's graph last (newest: kept past the writer's cap), each two rows: the
        default at 2 ms, ``row`` at ``fast_ns``."""
        rng = np.random.default_rng(0)
        ops = self.new.graph.node_opcode
        kinds = np.unique(ops)
        summaries = []
        for _ in range(n):
            changed = ops.copy()
            nodes = rng.choice(len(ops), CHANGED, replace=False)
            changed[nodes] = rng.choice(kinds, CHANGED)
            summaries.append(kn.summarize(changed))
        summaries.sort(key=lambda s: float(s @ self.summary))
        two = np.stack([self.default, row])
        out = []
        for i, s in enumerate(summaries):
            rec = kn.record(
                f"fake{i}", s, two, [2e6, fast_ns], self.default, voter="mallory"
            )
            assert rec is not None
            out.append(rec)
        return out

    def placed(
        self, fakes: list[kn.ProgramRecord], bad: int, measured: list[int] | None = None
    ) -> tuple[int, int, float]:
        """The bad config's ranking and portfolio positions for the victim's new
        graph, and the evidence behind the weights. ``measured``: the configs of
        the new graph the victim measured already (the fit kernel weighs in)."""
        know = kn.Knowledge.fit(self.base + fakes, self.default)
        rows = self.new.configs
        seen = None
        if measured:
            seen = (rows[measured], self.truth[measured])
        w, evidence = know.weights(self.summary, seen)
        scores = know.predict(rows, w)
        ranking = np.argsort(scores, kind="stable").tolist()
        order = know.portfolio(rows, w, scores).tolist()
        return ranking.index(bad), order.index(bad), evidence

    def bad(self) -> int:
        """The config the knowledge ranks best among those truly 3 % slower than
        the default for the victim (the probe's was 3.4 % slower, 8th)."""
        know = kn.Knowledge.fit(self.base, self.default)
        w, _ = know.weights(self.summary)
        ranking = np.argsort(know.predict(self.new.configs, w), kind="stable")
        return int(next(i for i in ranking if self.truth[i] > np.log(1.03)))

    def apart(self, bad: int) -> list[int]:
        """Two configs of the new graph that change none of the options the bad
        config changes: measured by the victim, they leave the look-alikes' guesses
        unrefuted (0 there) while the fit kernel reweighs the seeds."""
        changed = self.new.configs != self.default
        alone = ~(changed & changed[bad]).any(1) & changed.any(1)
        return [int(i) for i in np.flatnonzero(alone)[:2]]


@pytest.fixture(scope="module")
def probe() -> Probe:
    return Probe()


@pytest.mark.parametrize("fit", [False, True], ids=["unmeasured", "measured"])
def test_look_alikes_of_one_writer_move_a_bad_config_no_further_than_one(
    probe: Probe, fit: bool
) -> None:
    bad = probe.bad()
    measured = probe.apart(bad) if fit else None
    fakes = probe.look_alikes(max(COUNTS), probe.new.configs[bad])
    before = probe.placed([], bad, measured)
    placed = {n: probe.placed(fakes[-n:], bad, measured) for n in COUNTS}
    print(
        f"bad config {bad} ({np.exp(probe.truth[bad]) - 1:+.1%} for the victim):",
        "(ranking, portfolio, evidence) before",
        before,
        *(f"{n}: {p}" for n, p in placed.items()),
    )
    one = placed[1]
    assert one[:2] != before[:2]  # one look-alike does move it: the probe is live
    for n in COUNTS[1:]:
        ranking, portfolio, evidence = placed[n]
        assert ranking >= one[0] and portfolio >= one[1], n
        assert evidence <= one[2] + 1e-9, n  # nor adds more to the knowledge's share


def test_a_claim_past_the_cap_weighs_as_the_cap(probe: Probe) -> None:
    """A look-alike claiming the bad config 1000x faster moves it exactly as far as
    one claiming ``MAX_EFFECT`` (16x), and no program's value, measured or
    guessed, lies farther than that from the default."""
    bad = probe.bad()
    row = probe.new.configs[bad]
    capped = 2e6 / np.exp(kn.MAX_EFFECT)
    bold = probe.look_alikes(5, row, fast_ns=2e3)
    fair = probe.look_alikes(5, row, fast_ns=capped)
    assert probe.placed(bold, bad) == probe.placed(fair, bad)
    # One program's additive guess must not add its measured effects up past it:
    # eight options each measured 16x faster, all eight at once is guessed no
    # faster than 16x either.
    flips = np.eye(8, probe.default.size, dtype=bool)
    rows = np.where(flips, 1 - probe.default, probe.default).astype(np.float32)
    rows = np.concatenate([probe.default[None], rows])
    rt = np.full(len(rows), capped)
    rt[0] = 2e6
    claim = kn.record("bold", probe.summary, rows, rt, probe.default, voter="m")
    assert claim is not None
    know = kn.Knowledge.fit([claim], probe.default)
    every = np.where(flips.any(0), 1 - probe.default, probe.default)[None]
    assert know.values(every)[0, 0] >= -kn.MAX_EFFECT - 1e-9
