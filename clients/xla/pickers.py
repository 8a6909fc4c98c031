"""How ``tune`` picks the next configs to measure: the service's ranking, or at random.

A picker sees the candidate rows (``xla_cpu.sample``) by index. ``pick(remaining,
step)`` returns ``step.size`` of the ``remaining`` indices (``policy.Round``: the
portfolio's head, then the ranking's); ``feedback(rows, runtimes_ns)`` reports what
was measured and returns how many measurements the service stored (None: not sent).
Service errors propagate as ``CostModelError``. No jax here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from xla_costmodel.clients.payloads import PreparedGraph
from xla_costmodel.clients.session import TuningSession
from xla_costmodel.clients.wire import RankResult
from xla_costmodel.clients.xla import policy

Rows = npt.NDArray[np.float32]


class Picker(Protocol):
    @property
    def adapted(self) -> int | None:
        """Measurements of the graph that shaped the last ranking (None: no ranking)."""
        ...

    @property
    def answered(self) -> bool:
        """Whether the service has ranked at least once."""
        ...

    @property
    def model_version(self) -> str | None: ...

    @property
    def shaping(self) -> dict[str, Any] | None:
        """What shaped the last ranking besides the graph's measurements."""
        ...

    def pick(self, remaining: Sequence[int], step: policy.Round) -> list[int]: ...

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
        self.adapted: int | None = None
        self.answered = False
        self.shaping: dict[str, Any] | None = None

    @property
    def model_version(self) -> str | None:
        return self.session.model_version

    def pick(self, remaining: Sequence[int], step: policy.Round) -> list[int]:
        result = self.session.rank(
            self.graph,
            self.rows[list(remaining)],
            deadline=self.deadline,
            portfolio=step.explore > 0,
        )
        self.answered, self.adapted = True, result.adapted
        self.shaping = _shaping(result)
        chosen = policy.pick(result.ranking, result.portfolio, step)
        return [remaining[j] for j in chosen]

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

    adapted: int | None = None
    answered: bool = False
    model_version: str | None = None
    shaping: dict[str, Any] | None = None

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def pick(self, remaining: Sequence[int], step: policy.Round) -> list[int]:
        chosen: Any = self.rng.choice(np.asarray(remaining), step.size, replace=False)
        return [int(i) for i in chosen]

    def feedback(self, rows: Sequence[int], runtimes_ns: Sequence[int]) -> int | None:
        return None


def _shaping(result: RankResult) -> dict[str, Any]:
    return {
        "target_programs": result.target_programs,
        "target_measurements": result.target_measurements,
        "knowledge_weight": result.knowledge_weight,
        "prior_weight": result.prior_weight,
    }
