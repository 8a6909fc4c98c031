"""Compiling every config and running each once, surviving configs that crash XLA.

Some option sets make XLA:CPU emit code that segfaults (in the compiler or when the
executable first runs): that kills the process, so it cannot be caught. Every compile
and first run is therefore bracketed in an on-disk journal (``.<name>.journal``,
fsync'ed); ``costmodel tune`` and ``costmodel collect`` run their work in a child
process and restart it after a crash (``isolate.py``), and the restarted worker
finds the entry that began but never ended, records it as crashed and leaves it out.
The first run also compares each config's output with the default's
(``outputs.compare``: NaN/inf positions, exact integers, finite values at the
outputs' scale), so a miscompile shows (a failed config, a sidecar entry). Each
option set is compiled through ``compile_options.compile_with``, so its
``xla_backend_extra_options`` entries reach that one compile and no other.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import jax

from xla_costmodel.clients.xla import compiler_space
from xla_costmodel.clients.xla.compile_options import compile_with
from xla_costmodel.clients.xla.outputs import DEFAULT_RTOL, OutputCheck, compare
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions

# Controls: the default config, spelled so jax's compile cache (keyed by the options
# dict) compiles it anew; each names a spec option at its default value. ``controls``
# picks among them the ones the installed jaxlib accepts (jaxlib 0.11.1 dropped
# ``xla_cpu_use_fusion_emitters``: naming it there fails the compile).
CONTROL_OPTIONS: tuple[dict[str, Any], ...] = (
    {"xla_cpu_use_fusion_emitters": True},
    {"xla_disable_hlo_passes": ""},
    {"xla_cpu_copy_insertion_use_region_analysis": False},
    {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_DEFAULT"},
)


def controls(n: int) -> list[dict[str, Any]]:
    """The first ``n`` spellings of ``CONTROL_OPTIONS`` this jaxlib compiles (each
    probed once per process, ``compiler_space.accepts``)."""
    ok = [
        c
        for c in CONTROL_OPTIONS
        if compiler_space.accepts(CompilerOptions(compiler_options=c)) is None
    ]
    return ok[:n]


CRASHED = "crashed the process (compile or first run); left out after a restart"


@dataclass(frozen=True)
class Compiled:
    """One option set, compiled and run once: ``executable`` is None when it did not
    compile, crashed an earlier process (``crashed``) or was refused (``error`` says
    why); ``sha1`` of its optimized HLO, the compile's ``seconds``, and
    ``outputs``, its first output checked against the default's (None: not run),
    whose worst scaled difference is ``max_rel_diff`` (inf: a NaN/inf, shape or
    exact-value mismatch)."""

    executable: Any  # jax.stages.Compiled
    error: str | None = None
    sha1: str | None = None
    seconds: float = 0.0
    crashed: bool = False
    outputs: OutputCheck | None = None

    @property
    def max_rel_diff(self) -> float | None:
        return None if self.outputs is None else self.outputs.worst


class Journal:
    """Append-only record of begun/ended steps: ``c k``/``C k`` compile, ``r k``/``R k`` run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines = path.read_text().split("\n") if path.exists() else []

    def crashed(self) -> set[int]:
        """Entries a previous process began and never finished."""
        open_steps: dict[str, set[int]] = {"c": set(), "r": set()}
        out: set[int] = set()
        for line in self.lines:
            tag, _, k = line.partition(" ")
            if tag == "attempt":
                out |= open_steps["c"] | open_steps["r"]
                open_steps = {"c": set(), "r": set()}
            elif tag in ("c", "r"):
                open_steps[tag].add(int(k))
            elif tag in ("C", "R"):
                open_steps[tag.lower()].discard(int(k))
        return out | open_steps["c"] | open_steps["r"]

    def attempts(self) -> int:
        return sum(line == "attempt " for line in self.lines)

    def mark(self, tag: str, k: int | str = "") -> None:
        with open(self.path, "a") as f:
            f.write(f"{tag} {k}\n")
            f.flush()
            os.fsync(f.fileno())
        self.lines.append(f"{tag} {k}")

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def compile_one(lowered: Any, options: CompilerOptions | Mapping[str, Any]) -> Compiled:
    """``lowered`` compiled under ``options`` (``compile_with``; a mapping is read as
    ``CompilerOptions.flat`` spells them, map entries included), never raising: a
    refused or badly spelled option set is a ``Compiled`` with its ``error``."""
    start = time.monotonic()
    try:
        if not isinstance(options, CompilerOptions):
            options = CompilerOptions.from_flat(options)
        executable = compile_with(lowered, options)
        digest = hashlib.sha1(executable.as_text().encode()).hexdigest()[:12]
        error = None
    except Exception as exc:  # XLA raises its own types; every one is a data point
        executable, digest = None, None
        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
    return Compiled(executable, error, digest, time.monotonic() - start)


def compile_and_probe(
    lowered: Any,
    options: Sequence[CompilerOptions | Mapping[str, Any]],
    args: tuple[Any, ...],
    journal: Journal,
    compile_cpus: Sequence[int] | None,
    rtol: float = DEFAULT_RTOL,
) -> list[Compiled]:
    """Compile each option set (entry 0 the default; ``compile_one``), then run
    each once.

    A crashed entry (per the journal) is neither compiled nor run. Returns one
    ``Compiled`` per entry, with ``outputs``: its output against entry 0's within
    ``rtol`` (``outputs.compare``).
    """
    crashed = journal.crashed()
    pinned = os.sched_getaffinity(0)
    if compile_cpus:  # compiling may use every CPU; running stays pinned
        os.sched_setaffinity(0, set(compile_cpus))
    try:
        entries: list[Compiled] = []
        for k, opts in enumerate(options):
            if k in crashed:
                entries.append(Compiled(None, CRASHED, crashed=True))
                continue
            journal.mark("c", k)
            entries.append(compile_one(lowered, opts))
            journal.mark("C", k)
    finally:
        os.sched_setaffinity(0, pinned)
    reference: Any = None  # entry 0's output; without it nothing is checked
    checked = bool(entries) and entries[0].executable is not None
    for k, entry in enumerate(entries):
        if entry.executable is None:
            continue
        journal.mark("r", k)
        out = jax.block_until_ready(entry.executable(*args))  # type: ignore[no-untyped-call]
        journal.mark("R", k)
        if k == 0:
            reference = out
        check = compare(out, reference, rtol=rtol) if checked else None
        entries[k] = replace(entry, outputs=check)
    return entries
