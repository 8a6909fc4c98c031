"""One vote per writer in target knowledge (``knowledge.py``; docs/security.md,
Poisoning).

A record's *voter* is the writer of the service's measurements that vouches for it;
a record without one (the artifact's seeds, the fleet simulation's programs) votes
alone. Two bounds keep a writer's weight to one vote however much it stores:

- ``kept``: which records a fit keeps. Each voter keeps its newest
  ``MAX_WRITER_PROGRAMS``, and past ``MAX_PROGRAMS`` voted ones every voter's newest
  go first, so none evicts the others; a record without a voter is never evicted.
- ``one_vote_each``: a voter's programs' weights for a graph, scaled down together
  so that they sum to the largest of them.

Deterministic, numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xla_costmodel.tpugraphs.program_record import F64, I64, ProgramRecord

MAX_PROGRAMS = 2000  # newest writers' programs kept per target (memory and time)
# Newest programs kept per writer and target: with one vote a writer gains nothing
# from more, and this bounds the fit time one token can cause (10 writers fill
# MAX_PROGRAMS; past it every writer's newest go first, so none evicts the others).
MAX_WRITER_PROGRAMS = 200


def kept(records: Sequence[ProgramRecord]) -> list[ProgramRecord]:
    """Every record without a voter; of each voter's, its newest
    ``MAX_WRITER_PROGRAMS``; past ``MAX_PROGRAMS`` voted ones, every voter's newest
    first, then every voter's second newest... (``records``: oldest first)."""
    age: dict[int, int] = {}  # record -> how many of its voter's are newer
    seen: dict[str, int] = {}
    for i in range(len(records) - 1, -1, -1):
        voter = records[i].voter
        if voter is not None:
            age[i] = seen.get(voter, 0)
            seen[voter] = age[i] + 1
    fair = sorted((a, -i) for i, a in age.items() if a < MAX_WRITER_PROGRAMS)
    keep = {-j for _, j in fair[:MAX_PROGRAMS]}
    return [r for i, r in enumerate(records) if r.voter is None or i in keep]


def voters(records: Sequence[ProgramRecord]) -> I64:
    """[P] each record's voter as an index; a record without one is its own."""
    index: dict[str, int] = {}
    out: list[int] = []
    for r in records:
        if r.voter is None:
            out.append(len(index) + len(out))  # unique: never a key's index
        else:
            out.append(index.setdefault(r.voter, -1 - len(index)))
    arr = np.asarray(out, np.int64)
    _, dense = np.unique(arr, return_inverse=True)
    return np.asarray(dense.ravel(), np.int64)


def one_vote_each(logw: F64, voter: I64) -> F64:
    """``logw`` with each voter's programs (``voter``: ``voters``' index per
    program) scaled down together so that their weights sum to the largest of them:
    however many programs a voter has, they weigh what its single most similar
    (best-fitting) one does, in the mean of ``predict``, the coverage of
    ``portfolio`` and the evidence alike. A cap of one *exact* program (trust)
    instead let five look-alikes, each at 0.3, weigh 1. In logs: no underflow."""
    if len(voter) != len(logw) or not len(logw):
        return logw
    count = int(voter.max()) + 1
    top = np.full(count, -np.inf)
    np.maximum.at(top, voter, logw)
    base = np.where(np.isfinite(top), top, 0.0)
    summed = np.bincount(voter, weights=np.exp(logw - base[voter]), minlength=count)
    with np.errstate(divide="ignore"):
        excess = np.log(summed)  # >= 0: the largest counts 1; -inf: none left
    excess = np.where(np.isfinite(excess), np.maximum(excess, 0.0), 0.0)
    return np.asarray(logw - excess[voter], np.float64)


def lse(logw: F64) -> float:
    """log(sum(exp(logw))) without underflow; -inf for nothing."""
    finite = logw[np.isfinite(logw)]
    if not finite.size:
        return -np.inf
    top = float(finite.max())
    return top + float(np.log(np.exp(finite - top).sum()))
