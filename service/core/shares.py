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

Rows measured under another compiler than the ranking's (``current``; a NULL
compiler on either side counts as the same) fit apart, like another writer's, and
their fits together weigh ``FOREIGN_TRUST`` against the compiler's own, which they
never outweigh; alone, they are all there is and weigh fully.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from xla_costmodel.tpugraphs.adapt import Adapter, fit
from xla_costmodel.tpugraphs.knowledge import FOREIGN_TRUST

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Shared:
    """The (weighted) mean of several writers' adapters; scores like an
    ``Adapter``."""

    adapters: tuple[Adapter, ...]
    measurements: int  # distinct configs over every writer used
    weights: tuple[float, ...] = ()  # per adapter, summing to 1; (): all alike

    def score(self, configs: npt.ArrayLike, prior: npt.ArrayLike | None) -> F32:
        total = np.zeros(np.shape(configs)[0], np.float64)
        if self.weights:
            for adapter, weight in zip(self.adapters, self.weights, strict=True):
                total += weight * adapter.score(configs, prior)
            return total.astype(np.float32)
        for adapter in self.adapters:
            total += adapter.score(configs, prior)
        return (total / len(self.adapters)).astype(np.float32)


def fit_by_writer(
    configs: npt.ArrayLike,
    runtimes_ns: npt.ArrayLike,
    prior: npt.ArrayLike | None,
    writers: Sequence[str | None],
    compilers: Sequence[str | None] | None = None,
    current: str | None = None,
) -> Adapter | Shared:
    """One fit per writer (``fit`` itself when there is one), averaged; with
    ``compilers`` (one per row), per writer and compiler, those of another than
    ``current`` at reduced weight (module docstring)."""
    configs, runtimes_ns = np.asarray(configs), np.asarray(runtimes_ns)
    prior = None if prior is None else np.asarray(prior)
    built = list(compilers) if compilers is not None else [None] * len(writers)
    # (another compiler?, writer, compiler): own rows first, anonymous first.
    keys = [
        (
            c is not None and current is not None and c != current,
            w is not None,
            w or "",
            c or "",
        )
        for w, c in zip(writers, built, strict=True)
    ]
    names = sorted(set(keys))
    if len(names) <= 1:
        return fit(configs, runtimes_ns, prior)
    who = np.array([names.index(k) for k in keys])
    fits = []
    for i in range(len(names)):
        rows = np.flatnonzero(who == i)
        part = None if prior is None else prior[rows]
        adapter = fit(configs[rows], runtimes_ns[rows], part)
        if adapter.measurements >= 2:
            fits.append((adapter, rows, names[i][0]))
    if not fits:
        return fit(configs, runtimes_ns, prior)  # nothing to share: the prior
    if len(fits) == 1:
        return fits[0][0]
    used = np.concatenate([rows for _, rows, _ in fits])
    flat = np.ascontiguousarray(configs[used].reshape(len(used), -1))
    distinct = int(np.unique(flat, axis=0).shape[0])
    adapters = tuple(a for a, _, _ in fits)
    foreign = [f for _, _, f in fits]
    if all(foreign) or not any(foreign):
        return Shared(adapters, distinct)
    return Shared(adapters, distinct, _weights(foreign))


def _weights(foreign: list[bool]) -> tuple[float, ...]:
    """Own-compiler fits share 1, the others ``FOREIGN_TRUST``, normalised."""
    mine, theirs = foreign.count(False), foreign.count(True)
    raw = [FOREIGN_TRUST / theirs if f else 1.0 / mine for f in foreign]
    return tuple(w / sum(raw) for w in raw)
