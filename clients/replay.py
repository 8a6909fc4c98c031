"""Replay autotuner: act as a compiler's autotuner on files whose runtimes are known.

For each labelled TpuGraphs file: send the graph and all its configs, take the
model's top K, "measure" them by looking up their recorded runtimes, send those as
feedback, and compare with the truth. Definitions (also written into the report):

- ``slowdown`` = best runtime among the K measured / true best runtime - 1 (0 is
  perfect): the official TpuGraphs top-K slowdown, as ``costmodel evaluate`` and the
  feedback gauges report it (``xla_costmodel.tpugraphs.metrics``).
- ``speedup_vs_default`` = runtime of the default config / best runtime found (> 1
  beats the default). Tile and xla_cpu: the default is the config whose runtime equals its
  ``config_runtime_normalizers`` entry (the normaliser *is* the default config's
  runtime). Layout: null, because layout npz files do not mark the default config.
- ``random_slowdown`` = E[best runtime of K configs drawn uniformly without
  replacement] / true best - 1, computed exactly from order statistics (no sampling;
  ``xla_costmodel.tpugraphs.metrics.expected_random_topk_slowdown``).
  ``random_speedup_vs_default`` = default runtime / that expectation.
- ``measured_fraction`` = K / C. A ``--budget-fraction`` F gives K = ceil(F * C),
  at least 1; every K is capped at C.
- ``mean`` is the arithmetic mean over graphs (``speedup`` means over the graphs
  that have a default; null if none do).
- With ``rounds`` R (``xla_costmodel.clients.rounds``): R rounds of K each, feedback after every
  round, so the service adapts to the measurements; the top-level numbers are those
  after the last round (R * K measured), and ``rounds`` lists, per round, the mean
  slowdown of the live loop, the model alone, random, and a per-graph model without
  prior (a graph whose configs ran out keeps its last round's numbers).

Pure logic only (``replay`` takes a client and a progress callback); rendering lives
in ``xla_costmodel.clients.cli``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.errors import EndpointNotFound, InvalidRequest
from xla_costmodel.clients.payloads import PreparedGraph, prepare_graph
from xla_costmodel.clients.rounds import RoundScore, run_rounds
from xla_costmodel.clients.session import TuningSession
from xla_costmodel.tpugraphs.arrays import Sample
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.metrics import expected_random_topk_slowdown
from xla_costmodel.tpugraphs.reader import expand_paths, load_npz

log = logging.getLogger(__name__)

DEFINITIONS = {
    "slowdown": "best measured runtime / true best runtime - 1 (0 is perfect)",
    "speedup_vs_default": "default config runtime / best measured runtime; tile and "
    "xla_cpu default = config whose runtime equals config_runtime_normalizers; null for layout "
    "(the npz does not mark the default config)",
    "random_slowdown": "exact expected best runtime of a uniformly random K-subset "
    "(order statistics) / true best runtime - 1",
    "random_speedup_vs_default": "default runtime / exact expected best of a random K-subset",
    "measured_fraction": "K / number of configs; K = budget, or ceil(fraction * configs), "
    "at least 1, at most all configs",
    "mean": "arithmetic mean over graphs (speedups over graphs with a known default)",
    "rounds": "per round r (r * K measured): slowdown = the live loop (model + "
    "adaptation to the fed-back measurements); model_slowdown = the model's prior "
    "top r*K; random_slowdown = exact expectation for r*K random configs; "
    "per_graph_slowdown = a per-graph fit without prior on its own measurements "
    "(random until 2 distinct configs are measured, seeded)",
}
ROUND_KEYS = ("slowdown", "model_slowdown", "random_slowdown", "per_graph_slowdown")
MEAN_KEYS = (
    "slowdown",
    "speedup_vs_default",
    "random_slowdown",
    "random_speedup_vs_default",
    "measured_fraction",
)
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Budget:
    """How many configs the autotuner may measure: a count or a fraction of each graph's."""

    count: int | None = None
    fraction: float | None = None

    def __post_init__(self) -> None:
        if (self.count is None) == (self.fraction is None):
            raise ValueError("give exactly one of a budget count or a budget fraction")
        if self.count is not None and self.count < 1:
            raise ValueError("budget must be >= 1")
        if self.fraction is not None and not 0 < self.fraction <= 1:
            raise ValueError("budget fraction must be in (0, 1]")

    def configs(self, num_configs: int) -> int:
        if self.fraction is not None:
            k = math.ceil(self.fraction * num_configs)
        else:
            k = self.count or 1
        return max(1, min(k, num_configs))


def default_config(sample: Sample) -> int | None:
    """Index of the default config as the collection finds it (tile, xla_cpu: the
    first whose runtime is its normaliser), else None."""
    return sample.spec.default_index(sample.runtimes, sample.normalizers)


@dataclass(frozen=True)
class GraphScore:
    """The report's numbers for one graph (definitions in the module docstring)."""

    configs: int
    budget: int
    measured: list[int]
    best_found_ns: int
    true_best_ns: int
    default_config: int | None
    default_ns: int | None
    random_expected_best_ns: float
    slowdown: float
    speedup_vs_default: float | None
    random_slowdown: float
    random_speedup_vs_default: float | None
    measured_fraction: float


def score_graph(sample: Sample, ranking: Sequence[int], k: int) -> GraphScore:
    """Score the model's top ``k`` of ``ranking`` against the file's runtimes."""
    measured = [int(i) for i in ranking[:k]]
    runtimes = sample.runtimes
    best = int(runtimes[measured].min())
    true_best = int(runtimes.min())
    rand = true_best * (1.0 + expected_random_topk_slowdown(runtimes, k))
    d = default_config(sample)
    default_ns = None if d is None else int(runtimes[d])
    return GraphScore(
        configs=sample.num_configs,
        budget=k,
        measured=measured,
        best_found_ns=best,
        true_best_ns=true_best,
        default_config=d,
        default_ns=default_ns,
        random_expected_best_ns=rand,
        slowdown=best / true_best - 1.0,
        speedup_vs_default=None if default_ns is None else default_ns / best,
        random_slowdown=rand / true_best - 1.0,
        random_speedup_vs_default=None if default_ns is None else default_ns / rand,
        measured_fraction=k / sample.num_configs,
    )


@dataclass(frozen=True)
class GraphReport:
    file: str
    collection: str
    model: str
    model_version: str | None
    graph_id: str
    cache: str | None
    uploaded: bool
    feedback_stored: int | None  # None: the service has no feedback endpoint
    score: GraphScore
    rounds: list[RoundScore] | None = None
    adapted: int = 0  # measurements the service's (last) ranking was adapted to

    def to_json(self) -> dict[str, Any]:
        head = {k: v for k, v in asdict(self).items() if k not in ("score", "rounds")}
        body = {**head, **asdict(self.score)}
        if self.rounds is not None:
            body["rounds"] = [asdict(r) for r in self.rounds]
        return body


@dataclass
class ReplayReport:
    graphs: list[GraphReport] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    feedback_unsupported: bool = False

    def mean(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for key in MEAN_KEYS:
            values = [
                getattr(g.score, key)
                for g in self.graphs
                if getattr(g.score, key) is not None
            ]
            out[key] = fmean(values) if values else None
        return out

    def round_means(self) -> list[dict[str, Any]]:
        """Per round, the mean of each strategy over graphs (carried forward)."""
        per_graph = [g.rounds for g in self.graphs if g.rounds]
        count = max((len(r) for r in per_graph), default=0)
        out: list[dict[str, Any]] = []
        for i in range(count):
            at = [r[min(i, len(r) - 1)] for r in per_graph]
            row: dict[str, Any] = {"round": i + 1, "measured": at[0].measured}
            row.update({k: fmean(getattr(x, k) for x in at) for k in ROUND_KEYS})
            row["adapted"] = fmean(x.adapted for x in at)
            taus = [x.kendall_tau_unmeasured for x in at if x.kendall_tau_unmeasured]
            if taus:
                row["kendall_tau_unmeasured"] = {
                    key: _mean_or_none([t[key] for t in taus]) for key in taus[0]
                }
            out.append(row)
        return out

    def to_json(self) -> dict[str, Any]:
        stored = [
            g.feedback_stored for g in self.graphs if g.feedback_stored is not None
        ]
        rounds = self.round_means()
        return {
            "graphs": [g.to_json() for g in self.graphs],
            "mean": self.mean(),
            **({"rounds": rounds} if rounds else {}),
            "skipped": self.skipped,
            "feedback": {
                "supported": not self.feedback_unsupported,
                "graphs_sent": len(stored),
                "configs_stored": sum(stored),
                "graphs_unsupported": sum(
                    g.feedback_stored is None for g in self.graphs
                ),
            },
            "definitions": DEFINITIONS,
        }


def _mean_or_none(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return fmean(present) if present else None


class Replayer:
    """Runs the replay with one pinned ``TuningSession`` per model."""

    def __init__(
        self,
        client: CostModelClient,
        budget: Budget,
        model: str | None = None,
        rounds: int | None = None,
        target: str | None = None,
        seed: int = 0,
    ) -> None:
        if rounds is not None and rounds < 1:
            raise ValueError("rounds must be >= 1")
        self.client = client
        self.budget = budget
        self.model = model
        self.rounds = rounds
        self.target = target
        self.seed = seed
        self.report = ReplayReport()
        self._sessions: dict[str, TuningSession] = {}
        self._collections: dict[str, str] = {}

    def load_models(self) -> None:
        """Ask the service which models it serves (name -> collection)."""
        self._collections = {m.name: m.collection for m in self.client.models()}
        if self.model is not None and self.model not in self._collections:
            raise InvalidRequest(
                f"model {self.model!r} is not loaded (loaded: {sorted(self._collections)})",
                field="model",
            )

    def model_for(self, sample: Sample) -> str | None:
        """The model asked for, else one of the file's collection (same name first)."""
        if self.model is not None:
            return (
                self.model
                if self._collections[self.model] == sample.collection
                else None
            )
        names = [n for n, c in self._collections.items() if c == sample.collection]
        return (
            sample.collection if sample.collection in names else next(iter(names), None)
        )

    def run(
        self, paths: Iterable[str | Path], progress: Progress | None = None
    ) -> ReplayReport:
        self.load_models()
        for path in expand_paths(paths):
            self.replay_file(path)
            if progress is not None:
                progress(path.name)
        return self.report

    def replay_file(self, path: Path) -> None:
        try:
            sample = load_npz(path)
        except GraphFormatError as exc:
            return self._skip(path, f"not a valid TpuGraphs file: {exc}")
        if not sample.labelled:
            return self._skip(path, "no measured runtimes (a test file)")
        model = self.model_for(sample)
        if model is None:
            return self._skip(path, f"no loaded model for a {sample.collection} graph")
        session = self._sessions.setdefault(
            model, self.client.session(model, target=self.target)
        )
        graph = prepare_graph(sample)
        k = self.budget.configs(sample.num_configs)
        played: list[RoundScore] | None = None
        if self.rounds is None:
            result = session.rank(graph, sample.configs, top_k=k)
            score = score_graph(sample, result.ranking, k)
            stored = self._feedback(session, graph, sample, score.measured)
        else:
            done = run_rounds(
                sample,
                self.rounds,
                k,
                lambda idx, adapt: session.rank(
                    graph, sample.configs[list(idx)], adapt=adapt
                ),
                lambda picks: self._feedback(session, graph, sample, list(picks)),
                self.seed,
            )
            result, played, stored = done.last, done.rounds, done.feedback_stored
            score = score_graph(sample, done.measured, len(done.measured))
        self.report.graphs.append(
            GraphReport(
                file=str(path),
                collection=sample.collection,
                model=model,
                model_version=result.model_version,
                graph_id=graph.graph_id,
                cache=result.cache,
                uploaded=result.uploaded,
                feedback_stored=stored,
                score=score,
                rounds=played,
                adapted=result.adapted,
            )
        )

    def _feedback(
        self,
        session: TuningSession,
        graph: PreparedGraph,
        sample: Sample,
        measured: list[int],
    ) -> int | None:
        if self.report.feedback_unsupported:
            return None
        try:
            answer = session.feedback(
                graph, sample.runtimes[measured], configs=sample.configs[measured]
            )
        except EndpointNotFound as exc:
            log.warning(
                "feedback unsupported by the service (%s); replay goes on without", exc
            )
            self.report.feedback_unsupported = True
            return None
        return answer.stored

    def _skip(self, path: Path, reason: str) -> None:
        log.info("skipping %s: %s", path, reason)
        self.report.skipped.append({"file": str(path), "reason": reason})


def replay(
    client: CostModelClient,
    paths: Iterable[str | Path],
    budget: Budget,
    model: str | None = None,
    progress: Progress | None = None,
    rounds: int | None = None,
    target: str | None = None,
) -> ReplayReport:
    """Replay every file under ``paths`` (directories are walked for ``*.npz``)."""
    return Replayer(client, budget, model, rounds, target).run(paths, progress)
