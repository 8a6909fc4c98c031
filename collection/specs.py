"""The config spec a collection samples, looked up by name, and the rows it compiles.

``costmodel collect --spec NAME`` names a spec of ``compiler_space.SPECS`` that can
be sampled (``spec_rows.spec_named``): today's (``xla_cpu/2``, the xla_cpu
collection's ``config_spec``) or an older one still collectable (``xla_cpu/1``).
``sampled`` draws the spec's rows and keeps the ones this jaxlib can apply
(``compiler_space.restrict``), naming each kept row by its index in the sample: a
row setting a column the installed jaxlib rejects is never compiled; the rejected
columns are said once per run and recorded in every sidecar. ``side_rows`` reads a
sidecar's measured rows back in today's width (an ``xla_cpu/1`` sidecar's
upgraded), so a folder, or two targets, holding both specs compare row by row.
numpy only: no jax at import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from xla_costmodel.clients.xla import compiler_space
from xla_costmodel.clients.xla.spec_rows import Tunable, rejected_note, spec_named
from xla_costmodel.tpugraphs.collections import get as get_collection
from xla_costmodel.tpugraphs.xla_cpu import F32

XLA_CPU: Final = get_collection("xla_cpu")
TODAY: Final = str(XLA_CPU.config_spec)  # the spec every row is read in


def today() -> Tunable:
    """The xla_cpu collection's spec, the one every row is read in."""
    return spec_named(TODAY)


@dataclass(frozen=True)
class SampledRows:
    """The rows one collection run compiles for every program.

    ``rows`` [m, W] are ``spec.sample(drawn, seed)``'s rows that this jaxlib can
    apply, in sample order; ``index`` names each one's sample row (what sidecars
    call a row); ``skipped_rows`` the sample rows left out, because they set a
    column of ``skipped_columns`` (column -> why this jaxlib rejects it).
    """

    spec: Tunable
    drawn: int
    rows: F32
    index: tuple[int, ...]
    skipped_rows: tuple[int, ...]
    skipped_columns: Mapping[str, str]

    def record(self) -> dict[str, Any]:
        """The sidecar's fields saying what was sampled and what was left out."""
        return {
            "spec": self.spec.SPEC,
            "columns": list(self.spec.COLUMNS),
            "sampled_rows": self.drawn,
            "skipped_columns": dict(self.skipped_columns),
            "skipped_rows": list(self.skipped_rows),
        }


def sampled(name: str, n: int, seed: int, log: Callable[[str], None]) -> SampledRows:
    """``n`` rows of the spec ``name`` (seed ``seed``), restricted to what this
    jaxlib applies; what it rejects is said once, through ``log``."""
    spec = spec_named(name)
    rows = spec.sample(n, seed)
    kept = compiler_space.restrict(rows, spec)
    at = {r.tobytes(): k for k, r in enumerate(rows)}  # sampled rows are distinct
    index = tuple(at[r.tobytes()] for r in kept)
    skipped = tuple(sorted(set(range(len(rows))) - set(index)))
    why = {c: w for c, w in compiler_space.rejected(spec).items() if w is not None}
    if why:
        log(
            f"{rejected_note(spec)}; {len(skipped)} of {len(rows)} sampled rows skipped"
        )
    return SampledRows(spec, len(rows), kept, index, skipped, why)


def spec_of(side: Mapping[str, Any]) -> Tunable:
    """The spec a sidecar's rows were drawn from."""
    return spec_named(str(side["spec"]))


def side_rows(side: Mapping[str, Any]) -> F32:
    """The rows a measured sidecar's runtimes belong to (its ``rows``, indices into
    its spec's sample), in today's width."""
    index = np.asarray(side["rows"], np.intp)
    drawn = spec_of(side).sample(int(index.max()) + 1, int(side["seed"]))
    return XLA_CPU.upgrade(np.asarray(drawn[index], np.float32))
