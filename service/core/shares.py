"""Per-writer shares of a graph's fit: no writer's rows can outvote the others'.

    fit_by_writer(configs, runtimes_ns, prior, writers) -> Adapter | Shared

``xla_costmodel.tpugraphs.adapt.fit`` runs once per writer, on that writer's rows
alone, and the scores are the plain mean of the writers' fits: a writer who sends
4,000 rows (outliers or not) moves the ranking as much as one who sent 12, never
more, and each fit stays robust inside (mid-ranks plus a clipped robust z of log
runtime). Rows without a writer (feedback auth off, imports) count as one writer.
With one writer this *is* ``fit``, bit for bit, so a single-tenant service ranks as
before. A writer whose rows hold fewer than 2 distinct configs is left out: its fit
would be the prior on another scale. Writers are created by an operator
(``costmodel tokens create``), so their number per graph stays small and so does the
cost (one fit each; ``fit`` takes ~10 ms on 2,000 rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from xla_costmodel.tpugraphs.adapt import Adapter, fit

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Shared:
    """The mean of several writers' adapters; scores like an ``Adapter``."""

    adapters: tuple[Adapter, ...]
    measurements: int  # distinct configs over every writer used

    def score(self, configs: npt.ArrayLike, prior: npt.ArrayLike | None) -> F32:
        total = np.zeros(np.shape(configs)[0], np.float64)
        for adapter in self.adapters:
            total += adapter.score(configs, prior)
        return (total / len(self.adapters)).astype(np.float32)


def fit_by_writer(
    configs: npt.ArrayLike,
    runtimes_ns: npt.ArrayLike,
    prior: npt.ArrayLike | None,
    writers: Sequence[str | None],
) -> Adapter | Shared:
    """One fit per writer (``fit`` itself when there is one), averaged."""
    configs, runtimes_ns = np.asarray(configs), np.asarray(runtimes_ns)
    prior = None if prior is None else np.asarray(prior)
    names = sorted(set(writers), key=lambda w: (w is not None, w or ""))
    if len(names) <= 1:
        return fit(configs, runtimes_ns, prior)
    who = np.array([names.index(w) for w in writers])
    fits = []
    for i in range(len(names)):
        rows = np.flatnonzero(who == i)
        part = None if prior is None else prior[rows]
        adapter = fit(configs[rows], runtimes_ns[rows], part)
        if adapter.measurements >= 2:
            fits.append((adapter, rows))
    if not fits:
        return fit(configs, runtimes_ns, prior)  # nothing to share: the prior
    if len(fits) == 1:
        return fits[0][0]
    used = np.concatenate([rows for _, rows in fits])
    flat = np.ascontiguousarray(configs[used].reshape(len(used), -1))
    distinct = int(np.unique(flat, axis=0).shape[0])
    return Shared(tuple(a for a, _ in fits), distinct)
