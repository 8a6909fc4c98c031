"""How ``tune`` picks the next configs to measure: the service's ranking, or at random.

A picker sees the candidate rows (``spec_rows.candidates``) by index.
``pick(remaining, step)`` returns a ``Picked``: ``step.size`` of the ``remaining``
indices (``policy.Round``: the portfolio's head, then the ranking's) and, when the
service ranked them, what shaped that ranking; ``feedback(rows, runtimes_ns)``
reports what was measured and returns how many measurements the service stored
(None: not sent). A picker keeps no answer for later: each call's is its return
value. Service errors propagate as ``CostModelError``. No jax here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from xla_costmodel.clients.payloads import PreparedGraph
from xla_costmodel.clients.session import TuningSession
from xla_costmodel.clients.wire import RankResult
from xla_costmodel.clients.xla import policy

Rows = npt.NDArray[np.float32]


@dataclass(frozen=True, kw_only=True)
class Shaping:
    """What shaped a ranking besides the graph's own measurements: the target's
    programs and measurements the service knows, and the weights of that knowledge
    and of the model's prior (``RankResult``'s figures; keys in this order in
    ``TuneReport.to_json``)."""

    target_programs: int
    target_measurements: int
    knowledge_weight: float
    prior_weight: float

    @classmethod
    def of(cls, result: RankResult) -> Shaping:
        return cls(
            target_programs=result.target_programs,
            target_measurements=result.target_measurements,
            knowledge_weight=result.knowledge_weight,
            prior_weight=result.prior_weight,
        )


@dataclass(frozen=True, kw_only=True)
class Picked:
    """One pick: the rows to measure next and, when the service ranked them, its
    answer: ``adapted`` (measurements of the graph that shaped the ranking; None:
    no ranking), ``shaping`` and the model version that answered."""

    rows: tuple[int, ...]
    adapted: int | None = None
    shaping: Shaping | None = None
    model_version: str | None = None

    @property
    def answered(self) -> bool:
        """Whether the service ranked these rows."""
        return self.adapted is not None


class Picker(Protocol):
    def pick(self, remaining: Sequence[int], step: policy.Round) -> Picked: ...

    def feedback(
        self, rows: Sequence[int], runtimes_ns: Sequence[int]
    ) -> int | None: ...


class ModelPicker:
    """The service's portfolio and ranking of the remaining rows, adapted to the
    feedback so far (``policy.pick`` decides how many of each).

    One ``TuningSession``: every rank and feedback of the run goes to the model
    version of its first answer and to the run's ``target``.
    """

    def __init__(
        self,
        session: TuningSession,
        graph: PreparedGraph,
        rows: Rows,
        deadline: float | None,
    ) -> None:
        self.session, self.graph, self.rows = session, graph, rows
        self.deadline = deadline

    def pick(self, remaining: Sequence[int], step: policy.Round) -> Picked:
        result = self.session.rank(
            self.graph,
            self.rows[list(remaining)],
            deadline=self.deadline,
            portfolio=step.explore > 0,
        )
        chosen = policy.pick(result.ranking, result.portfolio, step)
        return Picked(
            rows=tuple(remaining[j] for j in chosen),
            adapted=result.adapted,
            shaping=Shaping.of(result),
            model_version=self.session.model_version,
        )

    def feedback(self, rows: Sequence[int], runtimes_ns: Sequence[int]) -> int | None:
        result = self.session.feedback(
            self.graph,
            np.asarray(runtimes_ns, np.int64),
            configs=self.rows[list(rows)],
            deadline=self.deadline,
        )
        return result.stored


class RandomPicker:
    """``k`` remaining rows uniformly at random; never talks to the service."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def pick(self, remaining: Sequence[int], step: policy.Round) -> Picked:
        chosen: Any = self.rng.choice(np.asarray(remaining), step.size, replace=False)
        return Picked(rows=tuple(int(i) for i in chosen))

    def feedback(self, rows: Sequence[int], runtimes_ns: Sequence[int]) -> int | None:
        return None
