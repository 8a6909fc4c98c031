"""What the fleet already decided for a program, asked before tuning and told after.

    fingerprint(lowered) -> str                              a program's name, cheaply
    ask(client, model, program, target, compiler, min_writers) -> (BestKnown | None, why)
    decision(program, rows, verdict, ...) -> Decision       what a run sends back
    fresh(best, compiler) -> bool                            applicable without tuning

A tuner that finishes sends its final choice to the service (``POST /v1/decisions``:
the kept config, or the default when nothing won, with the pairs' median speedup,
its interval and p-value). Before its next run on any machine of the same target,
``tune`` asks ``GET /v1/best``: a fresh decision (same compiler) is compiled alone
and verified against the default in interleaved pairs; ``jit`` applies it as it is.
A stale one (decided under another compiler) is never applied unverified. jax is
imported by ``fingerprint`` only, when it runs.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.errors import CostModelError
from xla_costmodel.clients.wire import BestKnown, Decision
from xla_costmodel.clients.xla.decide import Verdict


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


def fresh(best: BestKnown, compiler: str | None) -> bool:
    """Whether ``best`` was decided under this compiler (None, unknown: never)."""
    return compiler is not None and best.compiler == compiler and not best.stale


def decision(
    program: Program,
    row: npt.ArrayLike,
    options: Mapping[str, Any],
    verdict: Verdict | None,
    *,
    target: str,
    compiler: str | None,
    budget: int,
    strategy: str,
) -> Decision:
    """The decision a run sends: ``verdict`` is the kept config's comparison with
    the default (None: the default was kept, speedup 1 by definition)."""
    kept_default = verdict is None
    return Decision(
        graph_id=program.graph_id,
        config=tuple(float(v) for v in np.asarray(row, np.float64).ravel()),
        compiler_options=dict(options),
        speedup=1.0 if verdict is None else verdict.speedup,
        speedup_low=1.0
        if verdict is None
        else min(verdict.speedup_low, verdict.speedup),
        speedup_high=None if verdict is None else verdict.speedup_high,
        p_value=None if verdict is None else verdict.p_value,
        pairs=0 if verdict is None else verdict.pairs,
        budget=budget,
        strategy=strategy,
        kept_default=kept_default,
        target=target,
        compiler=compiler,
        hlo_fingerprint=program.hlo_fingerprint,
    )
