"""What the fleet already decided for a program, asked before tuning and told after.

    fingerprint(lowered) -> str                              a program's name, cheaply
    ask(client, model, program, target, compiler, min_writers) -> (BestKnown | None, why)
    decision(program, row, pairs, ...) -> Decision          what a run sends back
    fresh(best, compiler) -> bool                            applicable without tuning
    served(best, spec) -> Served                             its row, usable here or not

A tuner that finishes sends its final choice to the service (``POST /v1/decisions``:
the kept row with the paired runtimes that justify it, or the default's row when
nothing won; the service computes the figures from the pairs). Before its next run
on any machine of the same target, ``tune`` asks ``GET /v1/best``: a fresh decision
(same compiler) is compiled alone, its outputs checked, and timed against the
default in a fresh process (``confirm.py``); ``jit`` applies it as it is. A stale
one (decided under another compiler) is never applied unverified, and one whose
row sets an option this jaxlib rejects is never applied at all (``served``). jax is
imported by ``fingerprint``, and by the jaxlib probe behind ``served``, when they
run.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.errors import CostModelError
from xla_costmodel.clients.wire import BestKnown, Decision, Refuted
from xla_costmodel.clients.xla import spec_rows
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions


@dataclass(frozen=True)
class Program:
    """How the service knows a program: its graph id (featurized HLO) and its
    ``fingerprint``, stored together with each decision."""

    graph_id: str
    hlo_fingerprint: str


FINGERPRINT_PREFIX = b"costmodel-stablehlo-v1\n"


def fingerprint(lowered: Any) -> str:
    """sha256 of a lowered program's StableHLO module, without its debug info, as
    MLIR bytecode: what ``jit`` finds a decision by. The graph id would mean printing
    the module as HLO text and featurizing it: 337 ms and ~200 ms at 12k
    instructions (Intel Xeon 6.167), where this takes ~21 ms. Source locations are
    stripped (two machines run the same program from different paths); the clone
    leaves the module jax compiles untouched. Same program, same jaxlib: same
    fingerprint, whatever the file or process."""
    from jax.extend.mlir import passmanager

    module = lowered.compiler_ir("stablehlo")
    with module.context:
        clone = module.operation.clone()
        passmanager.PassManager.parse("builtin.module(strip-debuginfo)").run(clone)
        out = io.BytesIO()
        clone.write_bytecode(out)
    return hashlib.sha256(FINGERPRINT_PREFIX + out.getvalue()).hexdigest()


def ask(
    client: CostModelClient,
    model: str,
    program: Program,
    target: str,
    compiler: str | None,
    min_writers: int = 1,
    deadline: float | None = None,
) -> tuple[BestKnown | None, str]:
    """The best decision the service holds for ``program`` (None: none, or the
    service could not say) and a few words on why none."""
    try:
        best = client.best(
            model,
            graph_id=program.graph_id,
            target=target,
            compiler=compiler,
            min_writers=min_writers,
            deadline=deadline,
        )
    except CostModelError as exc:
        return None, f"the service could not say what was decided ({exc})"
    if best is None:
        return None, "nothing decided yet for this program on this target"
    return best, ""


def served(best: BestKnown, spec: str = spec_rows.SPEC) -> spec_rows.Served:
    """The fleet's answer's row as this client may use it (``spec_rows.judge``):
    upgraded from an older spec's (``xla_cpu/1``), or why not: not a valid, sampled
    row of ``spec``, or stale here (it sets an option this jaxlib rejects)."""
    return spec_rows.judge(best.config, spec_rows.spec_named(spec))


def options_of(best: BestKnown, spec: str = spec_rows.SPEC) -> CompilerOptions | None:
    """The compiler options of the fleet's answer, derived from its row, never
    taken from the answer's ``compiler_options`` (a writer may have sent anything
    there); None when ``served`` finds the row unusable here."""
    return served(best, spec).options


def printable(text: object, limit: int = 200) -> str:
    """``text`` as printable ASCII (anything else escaped), at most ``limit``
    characters: what a server sent is shown, never interpreted by the terminal."""
    out = str(text).encode("ascii", "backslashreplace").decode("ascii")
    out = "".join(c if " " <= c <= "~" else f"\\x{ord(c):02x}" for c in out)
    return out if len(out) <= limit else out[: limit - 3] + "..."


def fresh(best: BestKnown, compiler: str | None) -> bool:
    """Whether ``best`` was decided under this compiler (None, unknown: never)."""
    return compiler is not None and best.compiler == compiler and not best.stale


def decision(
    program: Program,
    row: npt.ArrayLike,
    pairs: Sequence[tuple[int, int]],
    *,
    target: str,
    compiler: str | None,
    budget: int,
    strategy: str,
    refuted: Refuted | None = None,
) -> Decision:
    """The decision a run sends: the kept ``row`` and the ``pairs`` (default_ns,
    config_ns) that justify it, timed together; no pairs: the default was kept.
    The service computes the speedup, its interval and p-value from the pairs
    (``tpugraphs.paired``): a tuner sends measurements, never claims. ``refuted``:
    the fleet's answer this run compiled and found slower (or wrong)."""
    return Decision(
        graph_id=program.graph_id,
        config=tuple(float(v) for v in np.asarray(row, np.float64).ravel()),
        paired_runtimes_ns=tuple((int(d), int(c)) for d, c in pairs),
        budget=budget,
        strategy=strategy,
        kept_default=not pairs,
        target=target,
        compiler=compiler,
        hlo_fingerprint=program.hlo_fingerprint,
        refuted=refuted,
    )
