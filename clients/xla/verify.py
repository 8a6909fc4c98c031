"""``jit``'s first-call verification: check a fleet decision's outputs against XLA's
default on the first call, and report a mismatch.

    check(lowered, candidate, args, kwargs, jit_kwargs) -> Verification
    refute(client, model, best, row, spec, ...) -> str   a few words for the reason

``check`` compiles XLA's default (``compile_with`` its empty options) beside the
executable built with the fleet's options, runs both on the call's arguments and compares their outputs
(``outputs.compare``); the candidate failing to run is a mismatch too. On a mismatch
``jit`` keeps the default for the signature and ``refute`` tells the service (a kept
default refuting the row for ``"outputs"``), which stops serving that row under this
compiler. jax is imported when ``check`` runs, never at import.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.wire import BestKnown, Decision, Refuted
from xla_costmodel.clients.xla import spec_rows
from xla_costmodel.clients.xla.compile_options import compile_with
from xla_costmodel.clients.xla.outputs import OutputCheck, compare
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions

log = logging.getLogger(__name__)
# Telling the service that a decision's outputs differ is best effort, and rare.
REPORT_TIMEOUT_S = 2.0


@dataclass(frozen=True, kw_only=True)
class Verification:
    """One first call checked: the executable to keep for the signature, the call's
    result (computed by that executable), the comparison and what it cost (compiling
    and running the default, comparing; in ms)."""

    executable: Any
    result: Any
    outputs: OutputCheck
    verify_ms: float

    @property
    def reason(self) -> str:
        """Why the fleet's decision was not applied ("" when it was)."""
        if self.outputs.ok:
            return ""
        return (
            "the fleet's decision was not applied: its outputs differ from the "
            f"default's on this call ({self.outputs.reason})"
        )


def check(
    lowered: Any,
    candidate: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    jit_kwargs: dict[str, Any],
) -> Verification:
    """Run ``candidate`` (built with the fleet's options) and XLA's default on this
    call's arguments and compare their outputs. The default's errors are the
    caller's, as with ``jax.jit``; the candidate's are a mismatch. ``jit_kwargs``:
    ``jit``'s own (when they donate arguments, the default runs on copies)."""
    import jax

    started = time.perf_counter()
    default = compile_with(lowered, CompilerOptions())
    theirs = _copies(args, kwargs) if _donates(jit_kwargs) else (args, kwargs)
    expected = jax.block_until_ready(default(*theirs[0], **theirs[1]))  # type: ignore[no-untyped-call]
    spent = time.perf_counter() - started
    try:
        got = jax.block_until_ready(candidate(*args, **kwargs))  # type: ignore[no-untyped-call]
        started = time.perf_counter()
        outputs = compare(got, expected)
        spent += time.perf_counter() - started
    except Exception as exc:  # XLA's own error types: the default ran
        reason = f"it failed to run: {short(exc)}"
        got, outputs = None, OutputCheck(ok=False, worst=math.inf, reason=reason)
    if outputs.ok:
        return Verification(
            executable=candidate, result=got, outputs=outputs, verify_ms=spent * 1e3
        )
    return Verification(
        executable=default, result=expected, outputs=outputs, verify_ms=spent * 1e3
    )


def refute(
    client: CostModelClient | None,
    model: str,
    best: BestKnown,
    row: tuple[float, ...],
    spec: spec_rows.Tunable,
    *,
    target: str | None,
    compiler: str | None,
    hlo_fingerprint: str | None,
) -> str:
    """Tell the service that ``best``'s ``row`` (as ``reuse.served`` read it, in
    ``spec``'s width) computes other outputs than the default here (``spec``'s
    default row kept, refuting it for ``"outputs"``); best effort: a few words for
    the report's reason, never an exception."""
    if client is None:
        return ""
    decision = Decision(
        graph_id=best.graph_id,
        config=tuple(float(v) for v in spec.default_row()),
        paired_runtimes_ns=(),
        budget=0,
        strategy="verify",
        kept_default=True,
        target=target,
        compiler=compiler,
        hlo_fingerprint=hlo_fingerprint,
        refuted=Refuted(config=row, reason="outputs"),
    )
    try:
        client.record_decision(model, decision, deadline=REPORT_TIMEOUT_S)
    except Exception as exc:  # the service's errors must not reach the caller
        log.warning("jit: could not report the mismatch: %s", short(exc))
        return f"; not reported to the service ({short(exc)})"
    return "; reported to the service"


def short(exc: BaseException) -> str:
    """An exception in a few words, for a report's reason or a log line."""
    return f"{type(exc).__name__}: {exc}"[:200]


def _donates(jit_kwargs: dict[str, Any]) -> bool:
    """Whether the executable may consume its arguments (then the default's run
    gets copies: both run on the same call)."""
    return bool(jit_kwargs.get("donate_argnums") or jit_kwargs.get("donate_argnames"))


def _copies(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Copies of the call's arrays (anything else as it is)."""
    import jax
    import jax.numpy as jnp

    def copy(x: Any) -> Any:
        return jnp.array(x, copy=True) if isinstance(x, jax.Array) else x

    return jax.tree.map(copy, args), jax.tree.map(copy, kwargs)


__all__ = ["REPORT_TIMEOUT_S", "Verification", "check", "refute", "short"]
