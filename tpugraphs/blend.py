"""One graph's ranking from three sources: the artifact's prior, the target's
knowledge and the graph's own measurements.

    combine(prior, knowledge, summary, measured, ...) -> Combined   steps 1-2
    fit(measured, combined prior of its configs) -> Fitted           step 3
    compose(configs, combined, measured, fitted, ...) -> Blended     steps 3-4
    blend(configs, prior, knowledge, summary, measured, ...)         all of it

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

Every input is a value: the caller scores the measured configs and fits before
``compose`` (the service keeps fits per graph, measurements and knowledge, and
scores the measured configs only to refit: scoring thousands of them on every rank
would cost more than the rank). ``blend`` runs the three steps in one call.

The service runs this for every rank (in a worker thread) and the fleet simulation
runs the very same functions, so what the simulation measures is what the service
does. numpy only; deterministic.
"""

from __future__ import annotations

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
# Distinct measured configs of a graph from which its own fit shapes the ranking:
# the smallest n from which adaptation beat the prior at every larger n in the
# study of studies/README.md ("Minimum measurements"); the service uses it too.
MIN_MEASUREMENTS = 4


@dataclass(frozen=True)
class Shaping:
    """What shaped a ranking besides the artifact's prior: the rank answer's fields
    of that name (JSON keys; ``X-`` headers of npz answers; the client's result).
    The defaults: the prior alone."""

    adapted: int = 0  # distinct measured configs of this graph that shaped the scores
    target_programs: int = 0  # programs of the target the knowledge holds
    target_measurements: int = 0  # their measurements
    knowledge_weight: float = 0.0  # the knowledge's share of the combined prior
    prior_weight: float = 1.0  # the artifact's weight (1, or FOREIGN_WEIGHT)


@dataclass(frozen=True)
class Blended:
    scores: F32  # lower = predicted faster
    portfolio: I64 | None  # every index, exploration order; None: not asked
    shaping: Shaping


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


class Fitted(Protocol):
    """What a per-graph fit gives back (``adapt.Adapter``, or the service's shares)."""

    @property
    def measurements(self) -> int: ...

    def score(self, configs: npt.ArrayLike, prior: npt.ArrayLike | None) -> F32: ...


@dataclass(frozen=True)
class Combined:
    """Steps 1-2 for one graph: the knowledge's weights and share, and the
    artifact's scores of the ranked configs (``prior``), whose spread is the unit
    of every standardised artifact score (``of``)."""

    prior: F32 | None
    knowledge: Knowledge | None
    weights: F64  # per knowledge program
    share: float  # the knowledge's share of the combined prior
    prior_weight: float
    held: tuple[int, int]  # programs and measurements used: the graph's own left out

    @property
    def known(self) -> bool:
        return self.knowledge is not None and self.knowledge.programs > 0

    def of(self, rows: F32, artifact: F32 | None) -> F64:
        """The combined prior of ``rows``, given the artifact's scores of them."""
        if self.share == 0:  # nothing to combine with: the prior's own scores
            if artifact is None:
                return np.zeros(len(rows))
            return np.asarray(artifact, np.float64)
        out = np.zeros(len(rows))
        if artifact is not None:
            z = _z(np.asarray(artifact, np.float64), self.prior)
            out += (1 - self.share) * self.prior_weight * z
        assert self.knowledge is not None
        out += self.share * self.knowledge.predict(rows, self.weights) / KNOWLEDGE_SCALE
        return out


def combine(
    prior: F32 | None,
    knowledge: Knowledge | None,
    summary: F64 | None,
    measured: Measured | None,
    *,
    foreign: bool,
    exclude: str | None = None,
    compiler: str | None = None,
) -> Combined:
    """Steps 1-2. ``prior``: the artifact's scores of the ranked configs;
    ``summary``: the graph's (``knowledge.summarize``); ``exclude``: the graph's own
    name in the knowledge (its measurements count once, through adaptation);
    ``compiler``: the graph's (``Knowledge.weights``)."""
    weights, evidence = np.zeros(0), 0.0
    if knowledge is not None and knowledge.programs > 0:
        rel = _relative(measured, knowledge)
        weights, evidence = knowledge.weights(summary, rel, exclude, compiler)
    return Combined(
        prior,
        knowledge,
        weights,
        evidence / (evidence + KNOWLEDGE_PROGRAMS),
        FOREIGN_WEIGHT if foreign else 1.0,
        _held(knowledge, exclude),
    )


def wants_fit(measured: Measured | None, min_measurements: int) -> bool:
    """Whether ``measured`` holds enough distinct configs for step 3."""
    return measured is not None and measured.count() >= min_measurements


def fit(measured: Measured, combined_prior: F64) -> Fitted:
    """Step 3, no cache: ``combined_prior`` is ``Combined.of`` the measured configs."""
    return adapt.fit(measured.configs, measured.runtimes_ns, combined_prior)


def compose(
    configs: npt.ArrayLike,
    combined: Combined,
    measured: Measured | None,
    fitted: Fitted | None,
    *,
    min_measurements: int = MIN_MEASUREMENTS,
    portfolio: bool = False,
) -> Blended:
    """The scores of ``configs``: their combined prior, adapted by ``fitted`` (a fit
    of ``measured``, given only when ``wants_fit``) when it used enough
    measurements; and on request the exploration order."""
    cfg = np.asarray(configs, np.float32)
    scores = combined.of(cfg, combined.prior)
    adapted = 0
    if fitted is not None and fitted.measurements >= min_measurements:
        scores = fitted.score(cfg, scores).astype(np.float64)
        adapted = fitted.measurements
    order = None
    if portfolio:
        seen = None if measured is None else measured.configs
        if combined.known:
            assert combined.knowledge is not None
            order = combined.knowledge.portfolio(
                cfg, combined.weights, scores, measured=seen
            )
        else:
            order = np.asarray(
                spread(cfg, scores, seen=[] if seen is None else list(seen)), np.int64
            )
    shaping = Shaping(adapted, *combined.held, combined.share, combined.prior_weight)
    return Blended(scores.astype(np.float32), order, shaping)


def blend(  # noqa: PLR0913 -- combine, fit and compose: the union of their inputs
    configs: npt.ArrayLike,
    prior: F32 | None,
    knowledge: Knowledge | None,
    summary: F64 | None,
    measured: Measured | None,
    *,
    foreign: bool,
    prior_measured: F32 | None = None,
    min_measurements: int = MIN_MEASUREMENTS,
    portfolio: bool = False,
    exclude: str | None = None,
    compiler: str | None = None,
) -> Blended:
    """``combine``, ``fit`` and ``compose`` in one call, no cache. ``prior``: the
    artifact's scores of ``configs``, and ``prior_measured`` of ``measured``'s
    configs (both or neither)."""
    combined = combine(
        prior,
        knowledge,
        summary,
        measured,
        foreign=foreign,
        exclude=exclude,
        compiler=compiler,
    )
    fitted = None
    if measured is not None and wants_fit(measured, min_measurements):
        fitted = fit(measured, combined.of(measured.configs, prior_measured))
    return compose(
        configs,
        combined,
        measured,
        fitted,
        min_measurements=min_measurements,
        portfolio=portfolio,
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
