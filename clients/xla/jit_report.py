"""What ``jit`` chooses for an argument signature and reports (``dropin.py``).

    JitReport       how one signature was compiled (``Jitted.report``)
    Choice          what its first call chose to compile, and why
    Applied         the fleet's decision whose options it compiles
    say_once(why)   a fleet's row not applied: logged once per reason and process

A row not applied (not a valid config of the spec, or stale here: it sets an option
this jaxlib rejects) is in every such signature's ``JitReport.reason``, and in the
log once per process.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from xla_costmodel.clients.wire import BestKnown
from xla_costmodel.clients.xla.outputs import OutputCheck

log = logging.getLogger(__name__)
Source = Literal["best_known", "tuned", "default"]
_SAID: set[str] = set()  # why a fleet's row was not applied, logged once each
_SAID_LOCK = threading.Lock()


@dataclass(frozen=True)
class JitReport:
    """How one argument signature was compiled.

    ``added_ms``: what ``jit`` added to the first call beyond jax's own lowering,
    compile and run (fingerprinting the module, the lookup, a tuning run when
    ``budget > 0``, the verification); ``lower_ms`` and ``compile_ms`` are jax's own.
    ``verify_ms``: the verification's part (compiling and running XLA's default,
    comparing), 0.0 when nothing was verified; ``outputs``: its comparison (None:
    not verified).
    """

    source: Source
    compiler_options: dict[str, Any]
    graph_id: str | None
    reason: str
    added_ms: float
    lower_ms: float = 0.0
    compile_ms: float = 0.0
    hlo_fingerprint: str | None = None
    compiler: str | None = None
    target: str | None = None
    decision: dict[str, Any] | None = field(default=None, compare=False)
    verify_ms: float = 0.0
    outputs: OutputCheck | None = None


@dataclass(frozen=True)
class Applied:
    """The fleet's decision whose options a signature compiles: the answer and its
    row as ``reuse.served`` read it (in the spec's width)."""

    best: BestKnown
    row: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class Choice:
    """What a signature's first call chose to compile, and why: ``JitReport``'s
    fields but the options, the timings and the verification's."""

    source: Source
    reason: str
    compiler: str | None
    hlo_fingerprint: str | None = None
    target: str | None = None
    graph_id: str | None = None
    decision: dict[str, Any] | None = None


def say_once(why: str) -> None:
    """Log why a fleet's row was not applied, once per reason and process."""
    with _SAID_LOCK:
        if why in _SAID:
            return
        _SAID.add(why)
    log.warning("jit: %s: XLA's default is compiled instead", why)


def decision_figures(best: BestKnown) -> dict[str, Any]:
    """The fleet's decision's figures, as ``JitReport.decision`` holds them."""
    return {
        "speedup": best.speedup,
        "speedup_low": best.speedup_low,
        "writers": best.writers,
        "compiler": best.compiler,
        "stale": best.stale,
        "decided_at": best.decided_at,
    }
