"""One graph's ranking from three sources: the artifact's prior, the target's
knowledge and the graph's own measurements.

    blend(configs, prior, knowledge, summary, measured, ...) -> Blended

1. The target's programs are weighted for this graph (``Knowledge.weights``: HLO
   similarity, and how well each explains what this graph measured so far), and
   their values predict each config's log runtime relative to the default.
2. The *combined prior* adds the artifact's standardised scores, weighted
   ``prior_weight`` (``FOREIGN_WEIGHT`` when the artifact was not trained on this
   target: a model of another CPU must not dominate), to the knowledge's prediction
   in units of ``KNOWLEDGE_SCALE`` log runtime, weighted by the evidence behind it
   (``e``, the summed program weights, ``Knowledge.weights``: ``e / (e +
   KNOWLEDGE_PROGRAMS)``). With no knowledge it is the prior; with much, the
   knowledge leads.
3. From ``min_measurements`` distinct measured configs of this graph, per-graph
   adaptation (``adapt.fit``) fits them with the combined prior as its prior
   column, which it shrinks toward (not toward zero) when data is thin.
4. On request, the portfolio order (``Knowledge.portfolio``) for exploring.

The service runs this for every rank (in a worker thread) and the fleet simulation
runs the very same function, so what the simulation measures is what the service
does. numpy only; deterministic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from xla_costmodel.tpugraphs import adapt
from xla_costmodel.tpugraphs.knowledge import Knowledge, spread

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

FOREIGN_WEIGHT = 0.25  # an artifact trained on other targets only
KNOWLEDGE_SCALE = 0.05  # log runtime worth one standard deviation of the prior
KNOWLEDGE_PROGRAMS = 2.0  # effective programs at which knowledge and prior weigh alike
MIN_MEASUREMENTS = 4  # the service's COSTMODEL_ADAPT_MIN_MEASUREMENTS default


@dataclass(frozen=True)
class Blended:
    scores: F32  # lower = predicted faster
    portfolio: I64 | None  # every index, exploration order; None: not asked
    adapted: int  # distinct measured configs of this graph that shaped the scores
    target_programs: int  # programs of the target the knowledge holds
    target_measurements: int  # their measurements
    knowledge_weight: float  # share of the target's knowledge in the combined prior
    prior_weight: float  # the artifact's weight (1, or FOREIGN_WEIGHT)


@dataclass(frozen=True)
class Measured:
    """This graph's own measurements on the target."""

    configs: F32  # [N, W]
    runtimes_ns: F64  # [N]
    distinct: int | None = None  # distinct configs among them, if already counted

    def count(self) -> int:
        if self.distinct is not None:
            return self.distinct
        return distinct_configs(self.configs)


def distinct_configs(configs: npt.ArrayLike) -> int:
    arr = np.asarray(configs)
    return len(np.unique(arr.reshape(len(arr), -1), axis=0)) if len(arr) else 0


# The artifact's scores of other configs of the graph (the measured ones), asked only
# when a fit runs; fit(configs, runtimes, prior) -> Fitted, with ``prior`` a thunk of
# the measured configs' combined prior: ``fit_now``, or a cache in front of it that
# calls it only on a miss (the service keeps fits per graph, measurements and
# knowledge: scoring thousands of measured configs on every rank would cost more
# than the rank).
PriorOf = Callable[[F32], F32]


class Fitted(Protocol):
    """What a per-graph fit gives back (``adapt.Adapter``, or the service's shares)."""

    @property
    def measurements(self) -> int: ...

    def score(self, configs: npt.ArrayLike, prior: npt.ArrayLike | None) -> F32: ...


Fit = Callable[[F32, F64, Callable[[], F64]], Fitted]


def fit_now(configs: F32, runtimes_ns: F64, prior: Callable[[], F64]) -> Fitted:
    """``adapt.fit``, no cache."""
    return adapt.fit(configs, runtimes_ns, prior())


def blend(
    configs: npt.ArrayLike,
    prior: F32 | None,
    knowledge: Knowledge | None,
    summary: F64 | None,
    measured: Measured | None,
    *,
    foreign: bool,
    prior_of: PriorOf | None = None,
    fit: Fit = fit_now,
    min_measurements: int = MIN_MEASUREMENTS,
    portfolio: bool = False,
    exclude: str | None = None,
    compiler: str | None = None,
) -> Blended:
    """Scores for ``configs`` (module docstring). ``prior``: the artifact's scores
    of ``configs`` and ``prior_of`` of others (both or neither); ``exclude``: the
    graph's own name in the knowledge (its measurements count once, through
    adaptation); ``compiler``: the graph's (``Knowledge.weights``)."""
    cfg = np.asarray(configs, np.float32)
    prior_weight = FOREIGN_WEIGHT if foreign else 1.0
    rel = _relative(measured, knowledge)
    known = knowledge is not None and knowledge.programs > 0
    weights, evidence = np.zeros(0), 0.0
    if known:
        assert knowledge is not None
        weights, evidence = knowledge.weights(summary, rel, exclude, compiler)
    share = evidence / (evidence + KNOWLEDGE_PROGRAMS)

    def combined(rows: F32, p: F32 | None) -> F64:
        if share == 0:  # nothing to combine with: the prior's own scores
            return np.zeros(len(rows)) if p is None else np.asarray(p, np.float64)
        out = np.zeros(len(rows))
        if p is not None:
            out += (1 - share) * prior_weight * _z(np.asarray(p, np.float64), prior)
        assert knowledge is not None
        out += share * knowledge.predict(rows, weights) / KNOWLEDGE_SCALE
        return out

    scores = combined(cfg, prior)
    adapted = 0
    if measured is not None and measured.count() >= min_measurements:
        rows = measured.configs

        def p_meas() -> F64:
            return combined(rows, None if prior_of is None else prior_of(rows))

        fitted = fit(rows, measured.runtimes_ns, p_meas)
        if fitted.measurements >= min_measurements:
            scores = fitted.score(cfg, scores).astype(np.float64)
            adapted = fitted.measurements
    order = None
    if portfolio:
        seen = None if measured is None else measured.configs
        if known:
            assert knowledge is not None
            order = knowledge.portfolio(cfg, weights, scores, measured=seen)
        else:
            order = np.asarray(
                spread(cfg, scores, seen=[] if seen is None else list(seen)), np.int64
            )
    return Blended(
        scores.astype(np.float32),
        order,
        adapted,
        *_held(knowledge, exclude),
        share,
        prior_weight,
    )


def _z(values: F64, reference: F32 | None) -> F64:
    """Standardise with the batch's own spread (the prior's units are arbitrary)."""
    ref = values if reference is None else np.asarray(reference, np.float64)
    sd = float(ref.std())
    return (values - float(ref.mean())) / (sd if sd > 0 else 1.0)


def _relative(
    measured: Measured | None, knowledge: Knowledge | None
) -> tuple[F32, F64] | None:
    """This graph's measured configs relative to its default, if it measured it."""
    if measured is None or knowledge is None or len(measured.configs) == 0:
        return None
    flat = measured.configs.reshape(len(measured.configs), -1)
    is_default = (flat == knowledge.default_row).all(1)
    if not is_default.any():
        return None
    logs = np.log(np.asarray(measured.runtimes_ns, np.float64))
    return flat, logs - float(np.median(logs[is_default]))


def _held(knowledge: Knowledge | None, exclude: str | None) -> tuple[int, int]:
    """Programs and measurements the knowledge used: the graph's own left out."""
    if knowledge is None:
        return 0, 0
    own = [i for i, n in enumerate(knowledge.names) if n == exclude]
    return knowledge.programs - len(own), knowledge.measurements - sum(
        knowledge.program_measurements[i] for i in own
    )
