"""The config rows the XLA:CPU client works with, judged against the installed jaxlib.

    spec_named(name) -> Tunable              ``compiler_space.SPECS[name]``, sampleable
    candidates(spec, n, seed, loops)         ``spec.sample``, less what jaxlib rejects
                                             (and, without loops, the loop options)
    has_loops(hlo_text) -> bool              whether the program has a while loop
    judge(config, spec) -> Served            a stored decision's row: usable, or why not
    options(row, spec) -> CompilerOptions    a row's options (``.flat()`` on the wire)

Every tool of the client (``tune``, ``jit``, ``costmodel best`` and ``rank``, the
studies) works with ``SPEC`` rows (``xla_cpu/2``) unless it is handed another spec's
*name*, looked up in ``compiler_space.SPECS``, the one registry: a test registers a
spec there and passes its name, and a tuning child process looks the same name up.

Nothing here samples, ranks, tunes, decides or applies a row that
``compiler_space.why_not`` rejects (it sets a column this jaxlib rejects):
``candidates`` leaves such rows out and says so, ``judge`` calls a stored decision
with one *stale* here, never a crash. A stored row of an older spec of the same
collection (``xla_cpu/1``'s 17 values, from an older server) is upgraded where it
enters, in ``judge`` (``CollectionSpec.older``). The rejected columns are also
logged once per spec and process (``compiler_space``). jax is imported only by the
probe behind ``candidates`` and ``judge``, when they run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol, cast

import numpy as np
import numpy.typing as npt

from xla_costmodel.clients.xla import compiler_space
from xla_costmodel.tpugraphs import xla_cpu2
from xla_costmodel.tpugraphs.collections import COLLECTIONS
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.hlo import featurize_hlo
from xla_costmodel.tpugraphs.xla_cpu import F32
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions

SPEC: Final = xla_cpu2.SPEC  # the spec every client tool uses unless named another
INVALID: Final = "is not a valid config of this compiler's space"
STALE: Final = "sets options this jaxlib rejects"


class Tunable(compiler_space.Spec, Protocol):
    """A spec the tuner samples: ``compiler_space.Spec`` plus ``sample`` (row 0 the
    default, n distinct rows) and ``excluded`` (why ``sample`` never draws a valid
    row, or None). The ``tpugraphs.xla_cpu*`` modules are ones."""

    def sample(self, n: int, seed: int) -> F32: ...

    def excluded(self, row: npt.ArrayLike) -> str | None: ...


@dataclass(frozen=True)
class Candidates:
    """``candidates``' answer: the rows (row 0 the default), how many sampled rows
    were left out, and ``note``: the columns this jaxlib rejects ("" for none)."""

    rows: F32
    left_out: int
    note: str


@dataclass(frozen=True)
class Served:
    """A stored decision's row as this client may use it (``judge``): ``row`` in the
    spec's width and its ``options``, or None and why: ``invalid`` (not a config the
    spec samples) or ``stale`` (a config this jaxlib rejects)."""

    row: F32 | None
    options: CompilerOptions | None
    invalid: str = ""
    stale: str = ""

    @property
    def why(self) -> str:
        """Why the row cannot be used, to follow "the row" ("" when it can)."""
        if self.invalid:
            return f"{INVALID} ({self.invalid})"
        return f"{STALE} ({self.stale})" if self.stale else ""


def spec_named(name: str) -> Tunable:
    """The spec registered as ``name`` (ValueError: none, or one that cannot be
    sampled)."""
    spec = compiler_space.SPECS.get(name)
    if spec is None:
        known = ", ".join(compiler_space.SPECS)
        raise ValueError(f"unknown spec {name!r} (known: {known})")
    if not all(callable(getattr(spec, f, None)) for f in ("sample", "excluded")):
        raise ValueError(f"spec {name!r} has no sample and excluded: not tunable")
    return cast(Tunable, spec)


def options(row: npt.ArrayLike, spec: Tunable) -> CompilerOptions:
    """The options of a valid ``row`` of ``spec`` (ValueError on a bad row)."""
    got = spec.to_options(row)
    if isinstance(got, CompilerOptions):
        return got
    return CompilerOptions(compiler_options=dict(got))


def candidates(spec: Tunable, n: int, seed: int, loops: bool = True) -> Candidates:
    """``spec.sample(n, seed)`` without the rows that set a column this jaxlib
    rejects (the default, row 0, is always kept); for a program without a while
    loop (``loops=False``), n rows that differ where no loop is (the spec's
    ``sample_for_program``, where it has one: ``xla_cpu/2`` without its loop
    threshold)."""
    per_program = getattr(spec, "sample_for_program", None)
    if per_program is None:
        sampled = spec.sample(n, seed)
    else:
        sampled = per_program(n, seed, loops)
    kept = compiler_space.restrict(sampled, spec)
    left_out, note = len(sampled) - len(kept), rejected_note(spec)
    if note:
        note += f"; {left_out} of {len(sampled)} sampled config(s) left out"
    return Candidates(kept, left_out, note)


def has_loops(hlo_text: str) -> bool:
    """Whether a program's HLO text holds a while loop (``xla_cpu2.has_loops`` of its
    graph); True when the text cannot be read (then no row is left out)."""
    try:
        graph = featurize_hlo(hlo_text, None)
    except GraphFormatError:
        return True
    return xla_cpu2.has_loops(graph.node_opcode)


def rejected_note(spec: Tunable) -> str:
    """The columns of ``spec`` this jaxlib rejects, in a sentence ("" for none)."""
    bad = [f"{c} ({why})" for c, why in compiler_space.rejected(spec).items() if why]
    if not bad:
        return ""
    return (
        f"{spec.SPEC}: never tried, this jaxlib rejects {len(bad)} option(s): "
        + "; ".join(bad)
    )


def judge(config: npt.ArrayLike, spec: Tunable) -> Served:
    """A stored decision's row (never raises): usable here, or why not."""
    try:
        row = _upgraded(np.asarray(config, dtype=np.float32), spec)
        found = options(row, spec)  # validates the row
        excluded = spec.excluded(row)
    except (ValueError, TypeError) as exc:
        return Served(None, None, invalid=f"{spec.SPEC}: {exc}")
    if excluded is not None:
        return Served(None, None, invalid=f"{spec.SPEC} never samples it: {excluded}")
    if np.array_equal(row, spec.default_row()):
        return Served(row, found)  # sets nothing: no need to probe this jaxlib
    stale = compiler_space.why_not(row, spec)
    if stale is not None:
        return Served(None, None, stale=stale)
    return Served(row, found)


def _upgraded(row: F32, spec: Tunable) -> F32:
    """``row`` in ``spec``'s width when it is an older spec's row of the collection
    whose spec ``spec`` is (``xla_cpu/1`` -> ``xla_cpu/2``); else as it is."""
    for collection in COLLECTIONS.values():
        older = {(o.width,) for o in collection.older}
        if collection.config_spec == spec.SPEC and row.shape in older:
            upgraded: F32 = collection.upgrade(row[None])[0]
            return upgraded
    return row
