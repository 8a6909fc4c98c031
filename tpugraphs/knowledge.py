"""Target knowledge: what the programs measured on one target teach about another.

Per-graph adaptation (``adapt.py``) starts from zero on every new program, and eight
noisy measurements cannot fit seventeen coefficients. What transfers is what the
*same hardware* did on *other* programs: which option sets won there, and on which
kinds of programs. ``Knowledge`` holds, for one (collection, target), every program
measured with its default config (its records), and answers for a graph it may never
have seen:

- ``predict``: each config's expected log runtime relative to the default, a
  weighted mean over the target's programs. A program's value for a config is its
  measurement where it measured that config (rows matched by content), else its own
  additive ridge model of the options (centred on the default), shrunk by
  ``UNMEASURED``: a guess counts less than a measurement.
- ``portfolio``: configs in the order of greedy coverage (the portfolio of
  transfer-tuning and auto-sklearn 2.0): each next config adds the most weighted
  log speedup over the default across the target's programs, given the ones before.
  Where no config adds more than ``MIN_GAIN`` (thin or no knowledge), the rest follow
  the scores but skip configs within ``SPREAD`` options of one picked or measured
  already (AutoTVM's submodular pick in spirit): exploration where the knowledge is
  unsure, instead of the top-k near-duplicates.

Program weights multiply two kernels: HLO similarity (cosine of square-rooted opcode
histograms, ``summarize``) with temperature ``SIM_TEMPERATURE``, and, once the graph
itself has measurements, how well each program's values explain them (Gaussian in
the summed squared error of log runtime, ``FIT_SCALE``): a graph that turns out to
behave like the convolutional programs of the target borrows their winners.

Who vouches for a program counts too (docs/security.md, Poisoning). For a graph,
program i weighs w_i = trust_i * exp((cos_i - 1) / SIM_TEMPERATURE) * fit_i (<= 1),
and the programs of one *voter* (a writer of the service's measurements) are scaled
together so that they sum to exactly max_i w_i over its own: however many it
stored, a writer weighs what its single most similar (best-fitting) program does,
in ``predict``'s mean, ``portfolio``'s coverage and the evidence alike. Every value
a program has, measured or guessed by its additive model, lies within
``MAX_EFFECT`` (16x) of its default, so its weighted mean does too. Each writer
keeps its newest ``MAX_WRITER_PROGRAMS``; a record without a voter (the artifact's
seeds, the fleet simulation's programs) votes alone and is never evicted. A program
measured under another compiler than the graph's counts at ``FOREIGN_TRUST``, like
one of another target, and those together never outweigh the compiler's own.

A program's record (``ProgramRecord``, ``record``, ``summarize``, ``foreign``, the
seeds' file) has its own module, ``program_record.py``, re-exported here; so has the
one vote per writer (which records a fit keeps, each voter's weights scaled
together), ``knowledge_weights.py``.

Deterministic, numpy only; the service refits it off the request path and the fleet
simulation (``costmodel simulate``) runs the same code. The constants were chosen by
that simulation's leave-families-out runs (studies/README.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from xla_costmodel.tpugraphs import knowledge_weights as votes
from xla_costmodel.tpugraphs.knowledge_weights import MAX_PROGRAMS, MAX_WRITER_PROGRAMS
from xla_costmodel.tpugraphs.program_record import (
    F32,
    F64,
    FOREIGN_TRUST,
    I64,
    OPCODES,
    ProgramRecord,
    foreign,
    load_seeds,
    record,
    save_seeds,
    summarize,
)

SIM_TEMPERATURE = 0.05  # cosine-similarity units per e-fold of weight
FIT_SCALE = 0.25  # log-runtime RMS error per e-fold of weight (squared, halved)
UNMEASURED = 0.5  # how much a program's ridge guess counts against its measurements
RIDGE = 1.0  # per-option penalty of a program's additive model (log-runtime units)
MIN_GAIN = 0.01  # weighted log speedup below which coverage gives way to exploration
SPREAD = 3  # options two exploration picks differ in, at least (then relaxed)
# A program's value, measured or guessed, counts at most this far from its default
# either way (16x): the shipped datasets' widest is 12x, and a claimed 1000x speedup
# moves a weighted mean no further than a real 16x one.
MAX_EFFECT = float(np.log(16.0))


@dataclass(frozen=True)
class Knowledge:
    """The fitted knowledge of one target (see the module docstring)."""

    default_row: F32  # [W]
    names: tuple[str, ...]  # [P]
    summaries: F64  # [P, OPCODES]
    keys: npt.NDArray[np.void]  # [R] config rows as bytes, sorted
    key_program: I64  # [R] the program of each measured row
    key_rel: F64  # [R] its relative log runtime
    coef: F64  # [P, W] each program's additive model, per option away from default
    measurements: int  # rows behind every record
    trust: F64  # [P]
    program_measurements: tuple[int, ...] = ()  # [P] rows behind each record
    voters: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # [P] index
    compilers: tuple[str | None, ...] = ()  # [P]
    compiler: str | None = None  # the newest known one: current unless a rank says

    @property
    def programs(self) -> int:
        return len(self.names)

    @classmethod
    def fit(
        cls, records: Sequence[ProgramRecord], default_row: npt.ArrayLike
    ) -> Knowledge:
        default = np.asarray(default_row, np.float32).ravel()
        known = [r.compiler for r in records if r.compiler is not None]
        newest = known[-1] if known else None
        fitted = votes.kept(records)
        width = default.size
        if not fitted:
            empty = np.zeros((0, width), np.float64)
            return cls(
                default,
                (),
                np.zeros((0, OPCODES)),
                _keys(np.zeros((0, width), np.float32)),
                np.zeros(0, np.int64),
                np.zeros(0),
                empty,
                0,
                np.zeros(0),
                compiler=newest,
            )
        rows = np.concatenate([r.configs for r in fitted]).astype(np.float32)
        program = np.concatenate(
            [np.full(len(r.rel), i, np.int64) for i, r in enumerate(fitted)]
        )
        rel = np.concatenate([r.rel for r in fitted])
        keys = _keys(rows)
        order = np.argsort(keys, kind="stable")
        rel = np.clip(rel, -MAX_EFFECT, MAX_EFFECT)
        coef = np.stack(
            [
                _additive(r.configs, np.clip(r.rel, -MAX_EFFECT, MAX_EFFECT), default)
                for r in fitted
            ]
        )
        return cls(
            default,
            tuple(r.name for r in fitted),
            np.stack([r.summary for r in fitted]),
            keys[order],
            program[order],
            rel[order],
            coef,
            sum(r.measurements for r in fitted),
            np.array([r.trust for r in fitted]),
            tuple(r.measurements for r in fitted),
            votes.voters(fitted),
            tuple(r.compiler for r in fitted),
            newest,
        )

    def values(self, configs: npt.ArrayLike) -> F64:
        """[M, P] each program's value for each config (measured, else its guess)."""
        flat = np.asarray(configs, np.float32).reshape(len(np.asarray(configs)), -1)
        guess = (flat.astype(np.float64) - self.default_row) @ self.coef.T
        # Capped like a measurement: an additive model adds effects up (eight
        # options each measured 16x faster made a 256x guess for all eight at once).
        out = UNMEASURED * np.clip(guess, -MAX_EFFECT, MAX_EFFECT)
        if self.keys.size:
            q = _keys(flat)
            lo = np.searchsorted(self.keys, q, side="left")
            hi = np.searchsorted(self.keys, q, side="right")
            for m in np.flatnonzero(hi > lo):
                span = slice(lo[m], hi[m])
                out[m, self.key_program[span]] = self.key_rel[span]
        return out

    def weights(
        self,
        summary: F64 | None,
        measured: tuple[npt.ArrayLike, npt.ArrayLike] | None = None,
        exclude: str | None = None,
        compiler: str | None = None,
    ) -> tuple[F64, float]:
        """[P] normalised program weights for a graph (``summary``: None = every
        program alike) given its own measured (configs, relative log runtimes), and
        the evidence behind them: the sum of the unnormalised weights, each at most
        its trust (a trusted program exactly like this graph counts 1), each voter's
        together at most its largest single weight (its most similar, best-fitting
        program's). ``compiler``: the graph's (None: the newest the knowledge holds);
        programs of another count at ``FOREIGN_TRUST``."""
        other = self._other_compiler(compiler)
        trust = self.trust * np.where(other, FOREIGN_TRUST, 1.0)
        logw = np.log(np.maximum(trust, 1e-300))
        if summary is not None and self.programs:
            logw += (self.summaries @ summary - 1.0) / SIM_TEMPERATURE
        if measured is not None and self.programs:
            rel = np.asarray(measured[1], np.float64)
            cfg = np.asarray(measured[0], np.float32).reshape(len(rel), -1)
            informative = ~(cfg == self.default_row).all(1)  # the default is 0 anyway
            if informative.any():
                vals = self.values(cfg[informative])
                # A Gaussian likelihood of what this graph measured under each
                # program's values: every measurement adds evidence.
                err = np.sum((vals - rel[informative, None]) ** 2, axis=0)
                logw -= err / (2 * FIT_SCALE**2)
        if exclude is not None:
            logw[[i for i, n in enumerate(self.names) if n == exclude]] = -np.inf
        logw = votes.one_vote_each(logw, self.voters)
        own = votes.lse(logw[~other])
        if other.any() and np.isfinite(own):  # never more than the compiler's own
            logw[other] -= max(0.0, votes.lse(logw[other]) - own)
        if not self.programs or not np.isfinite(logw).any():
            return np.zeros(self.programs), 0.0
        u = np.exp(np.minimum(logw, 0.0))
        mass = float(u.sum())
        if mass <= 0:  # every weight underflowed: the most similar program leads
            u = np.exp(logw - logw[np.isfinite(logw)].max())
        return u / u.sum(), mass

    def _other_compiler(self, compiler: str | None) -> npt.NDArray[np.bool_]:
        """[P] measured under a known compiler that is not ``compiler`` (None: the
        newest the knowledge holds); unknown on either side counts as the same."""
        current = compiler if compiler is not None else self.compiler
        if current is None or len(self.compilers) != self.programs:
            return np.zeros(self.programs, bool)
        return np.array([c not in (None, current) for c in self.compilers], bool)

    def predict(self, configs: npt.ArrayLike, weights: F64) -> F64:
        """[M] the weighted mean relative log runtime (0 = like the default)."""
        if not self.programs or not weights.any():
            return np.zeros(len(np.asarray(configs)))
        vals = self.values(configs)
        return vals @ weights

    def portfolio(
        self,
        configs: npt.ArrayLike,
        weights: F64,
        scores: npt.ArrayLike,
        taken: Sequence[int] = (),
        measured: npt.ArrayLike | None = None,
    ) -> I64:
        """Every index of ``configs`` not in ``taken``: greedy coverage first, then
        exploration by spread scores (module docstring); ``scores`` (lower = better)
        break ties and order the exploration. ``measured``: configs of this graph already
        measured (exploration keeps away from them)."""
        flat = np.asarray(configs, np.float32).reshape(len(np.asarray(configs)), -1)
        score = np.asarray(scores, np.float64)
        free = np.ones(len(flat), bool)
        free[list(taken)] = False
        order: list[int] = []
        if self.programs and weights.any():
            vals = self.values(flat)
            gains = np.maximum(0.0, -vals)  # log speedup over the default per program
            cover = np.zeros(self.programs)
            while free.any():
                marginal = (np.maximum(gains, cover) - cover) @ weights
                marginal[~free] = -np.inf
                best = _argbest(marginal, score, free)
                if marginal[best] < MIN_GAIN:
                    break
                order.append(best)
                free[best] = False
                cover = np.maximum(cover, gains[best])
        seen = [flat[i] for i in order]
        if measured is not None:
            seen += list(np.asarray(measured, np.float32).reshape(-1, flat.shape[1]))
        order += spread(flat, score, free, seen)
        return np.asarray(order, np.int64)


def spread(
    configs: npt.ArrayLike,
    scores: npt.ArrayLike,
    free: npt.NDArray[np.bool_] | None = None,
    seen: Sequence[npt.ArrayLike] = (),
) -> list[int]:
    """The ``free`` indices (default all) in score order (lower first, ties by index),
    skipping any within ``SPREAD`` options (L1 distance) of one ordered or ``seen``
    before, then the skipped ones in score order: exploration without near-duplicates.
    The default is not kept away from: winners are often one or two options from it."""
    flat = np.asarray(configs, np.float32).reshape(len(np.asarray(configs)), -1)
    score = np.asarray(scores, np.float64)
    left = np.ones(len(flat), bool) if free is None else free.copy()
    dist = np.full(len(flat), np.inf)
    for s in seen:
        dist = np.minimum(dist, np.abs(flat - np.asarray(s, np.float32).ravel()).sum(1))
    order: list[int] = []
    by_score = np.lexsort((np.arange(len(flat)), score))
    for gap in (SPREAD, 0):
        for i in by_score:
            if left[i] and dist[i] >= gap:
                order.append(int(i))
                left[i] = False
                dist = np.minimum(dist, np.abs(flat - flat[i]).sum(1))
    return order


def _argbest(primary: F64, tiebreak: F64, free: npt.NDArray[np.bool_]) -> int:
    """The free index with the highest ``primary``; ties: lowest ``tiebreak``, then
    lowest index."""
    top = primary[free].max()
    cands = np.flatnonzero(free & (primary >= top - 1e-12))
    return int(cands[np.argmin(tiebreak[cands])])  # argmin: first of equals


def _keys(rows: F32) -> npt.NDArray[np.void]:
    arr = np.ascontiguousarray(np.asarray(rows, np.float32) + np.float32(0.0))
    return arr.view(np.dtype((np.void, arr.shape[1] * 4))).ravel()


def _additive(configs: F32, rel: F64, default: F32) -> F64:
    """Ridge of relative log runtime on each option's distance from the default
    (no intercept: the default is 0 by definition)."""
    x = configs.astype(np.float64) - default
    gram = x.T @ x + RIDGE * np.eye(x.shape[1])
    return np.asarray(np.linalg.solve(gram, x.T @ rel), np.float64)


__all__ = [
    "FIT_SCALE",
    "FOREIGN_TRUST",
    "MAX_EFFECT",
    "MAX_PROGRAMS",
    "MAX_WRITER_PROGRAMS",
    "MIN_GAIN",
    "OPCODES",
    "RIDGE",
    "SIM_TEMPERATURE",
    "SPREAD",
    "UNMEASURED",
    "Knowledge",
    "ProgramRecord",
    "foreign",
    "load_seeds",
    "record",
    "save_seeds",
    "spread",
    "summarize",
]
