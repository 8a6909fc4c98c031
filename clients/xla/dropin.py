"""``jit``: ``jax.jit`` that compiles with what the fleet decided for the program.

    from xla_costmodel.clients.xla import jit

    f = jit(fn, server="http://127.0.0.1:8000")
    f(x)            # first call per argument signature: one GET /v1/best, then compile
    f.report        # source, compiler_options, graph_id, reason, added_ms

On the first call per argument signature it lowers ``fn`` as ``jax.jit`` would,
fingerprints the lowered module (``reuse.fingerprint``: a hash of its StableHLO
without debug info, not a featurization: ~21 ms at 12k instructions), asks
``GET /v1/best`` once with a short timeout and no retry, and compiles with the
answer's options. Anything else (no server, no answer, a decision made under another
compiler with ``budget=0``, options this jaxlib rejects) compiles XLA's default: it
never raises where ``jax.jit`` would not. With ``budget > 0`` and no fresh decision it
tunes first (``tune``, in process) and stores the decision. jax is imported by the
first call, never at import.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.errors import CostModelError
from xla_costmodel.clients.retry import RetryPolicy
from xla_costmodel.clients.wire import BestKnown
from xla_costmodel.clients.xla.reuse import fingerprint, fresh
from xla_costmodel.tpugraphs import machine

log = logging.getLogger(__name__)
Source = Literal["best_known", "tuned", "default"]
# One lookup must not hold a program's first call back for long: a service that does
# not answer in this time is treated like no service (the default is compiled).
LOOKUP_TIMEOUT_S = 0.5


@dataclass(frozen=True)
class JitReport:
    """How one argument signature was compiled.

    ``added_ms``: what ``jit`` added to the first call beyond jax's own lowering and
    compile (fingerprinting the module, the lookup, a tuning run when ``budget >
    0``); ``lower_ms`` and ``compile_ms`` are jax's own.
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
    decision: dict[str, Any] | None = field(default=None, compare=False)


class Jitted:
    """``jit(fn)``: call it like ``jax.jit(fn)``; ``report`` is the latest
    signature's ``JitReport`` (``reports``: every signature's)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        client: CostModelClient | None,
        budget: int,
        model: str,
        target: str | None,
        min_writers: int,
        jit_kwargs: dict[str, Any],
        tune_kwargs: dict[str, Any],
    ) -> None:
        self.fn, self.client, self.budget = fn, client, budget
        self.model, self.target, self.min_writers = model, target, min_writers
        self.jit_kwargs, self.tune_kwargs = jit_kwargs, tune_kwargs
        self._compiled: dict[Hashable, Any] = {}
        self.reports: dict[Hashable, JitReport] = {}
        self.report: JitReport | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = _signature(args, kwargs)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled, self.report = self._compile(args, kwargs)
            self._compiled[key], self.reports[key] = compiled, self.report
        else:
            self.report = self.reports[key]
        return compiled(*args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        import jax

        return jax.jit(self.fn, **self.jit_kwargs).lower(*args, **kwargs)

    def _compile(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Any, JitReport]:
        started = time.perf_counter()
        lowered = self.lower(*args, **kwargs)  # jax's own: errors are the caller's
        lowered_at = time.perf_counter()
        options, facts = self._choose(lowered, args, kwargs)
        chosen_at = time.perf_counter()
        try:
            compiled = lowered.compile(compiler_options=options) if options else None
        except Exception as exc:  # XLA's own error types: an option it rejects
            facts.update(
                source="default",
                reason=f"this jaxlib rejected the options ({_short(exc)}): the default",
            )
            options, compiled = {}, None
        if compiled is None:
            compiled = lowered.compile()  # as jax.jit would: its errors propagate
        done = time.perf_counter()
        report = JitReport(
            compiler_options=dict(options),
            added_ms=(chosen_at - lowered_at) * 1e3,
            lower_ms=(lowered_at - started) * 1e3,
            compile_ms=(done - chosen_at) * 1e3,
            **facts,
        )
        log.info(
            "jit %s: %s (%s)", report.graph_id or "?", report.source, report.reason
        )
        return compiled, report

    def _choose(
        self, lowered: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The options to compile with and the report's other fields; never raises."""
        facts: dict[str, Any] = {"graph_id": None, "compiler": machine.compiler()}
        try:
            facts["hlo_fingerprint"] = fingerprint(lowered)
            target = self.target or machine.target()
            best, why = self._ask(facts["hlo_fingerprint"], target, facts["compiler"])
        except Exception as exc:  # jit never fails where jax.jit would not
            return {}, {
                **facts,
                "source": "default",
                "reason": f"no lookup ({_short(exc)})",
            }
        if best is not None:
            facts["graph_id"] = best.graph_id
            facts["decision"] = _decision(best)
        if best is not None and fresh(best, facts["compiler"]):
            return dict(best.compiler_options), {
                **facts,
                "source": "best_known",
                "reason": f"the fleet's decision: {best.speedup:.3f}x by "
                f"{best.writers} writer(s) under {best.compiler}",
            }
        if best is not None:
            why = (
                f"decided under {best.compiler}, this is {facts['compiler']}: "
                "not applied without verification"
            )
        if self.budget > 0:
            return self._tune(args, kwargs, facts, why)
        return {}, {**facts, "source": "default", "reason": f"{why}: the default"}

    def _ask(
        self, fingerprint: str, target: str, compiler: str | None
    ) -> tuple[BestKnown | None, str]:
        if self.client is None:
            return None, "no server given"
        try:
            best = self.client.best(
                self.model,
                hlo_fingerprint=fingerprint,
                target=target,
                compiler=compiler,
                min_writers=self.min_writers,
                deadline=LOOKUP_TIMEOUT_S,
            )
        except CostModelError as exc:
            return None, f"no answer from the service ({_short(exc)})"
        return best, "nothing decided for this program on this target yet"

    def _tune(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        facts: dict[str, Any],
        why: str,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Tune in process (``budget > 0``); the tuner stores its decision."""
        if kwargs or self.jit_kwargs:
            reason = f"{why}; tuning takes positional arguments and no jit options"
            return {}, {**facts, "source": "default", "reason": reason}
        from xla_costmodel.clients.xla.tune import tune

        try:
            report = tune(
                self.fn,
                args,
                self.budget,
                client=self.client,
                model=self.model,
                target=self.target,
                progress=log.info,
                **self.tune_kwargs,
            )
        except Exception as exc:  # a failed tuning leaves the default, as jax.jit
            reason = f"{why}; tuning failed ({_short(exc)}): the default"
            return {}, {**facts, "source": "default", "reason": reason}
        facts["graph_id"] = report.graph_id
        reason = f"{why}; tuned here with budget {self.budget}: {report.reason}"
        return dict(report.compiler_options), {
            **facts,
            "source": "tuned",
            "reason": reason,
        }


def jit(
    fn: Callable[..., Any],
    *,
    server: str | None = None,
    client: CostModelClient | None = None,
    token: str | None = None,
    budget: int = 0,
    model: str = "xla_cpu",
    target: str | None = None,
    min_writers: int = 1,
    tune_kwargs: dict[str, Any] | None = None,
    **jit_kwargs: Any,
) -> Jitted:
    """``jax.jit(fn, **jit_kwargs)`` compiled with the best known options for this
    CPU (see the module docstring). ``client`` wins over ``server``; with neither,
    the default is compiled. ``token`` (or ``COSTMODEL_TOKEN``) is needed only for a
    tuning run (``budget > 0``) to store its decision."""
    if budget < 0:
        raise ValueError("budget must be >= 0")
    if client is None and server is not None:
        client = _lookup_client(server, token)
    return Jitted(
        fn, client, budget, model, target, min_writers, jit_kwargs, tune_kwargs or {}
    )


# One lookup client per (server, token) in a process, however many functions ``jit``
# wraps: each holds a connection pool, like jax's own caches live as long as it does.
_CLIENTS: dict[tuple[str, str | None], CostModelClient] = {}
_CLIENTS_LOCK = threading.Lock()


def _lookup_client(server: str, token: str | None) -> CostModelClient:
    """The process's client for quick lookups at ``server``: no retry (one request),
    a short timeout, and for plain http no TLS context (building one costs ~20 ms)."""
    with _CLIENTS_LOCK:
        client = _CLIENTS.get((server, token))
        if client is None:
            transport = (
                httpx.HTTPTransport(verify=False, retries=0)
                if server.startswith("http://")
                else None
            )
            client = _CLIENTS[(server, token)] = CostModelClient(
                server,
                token=token,
                timeout=LOOKUP_TIMEOUT_S,
                retry=RetryPolicy(max_attempts=1),
                transport=transport,
            )
        return client


def _signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Hashable:
    """What ``jax.jit`` compiles anew for: the tree structure and each leaf's shape
    and dtype (a Python scalar by its type: jax traces it as a weak-typed value)."""
    import jax

    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    return tree, tuple(
        (tuple(getattr(x, "shape", ())), str(getattr(x, "dtype", type(x).__name__)))
        for x in leaves
    )


def _decision(best: BestKnown) -> dict[str, Any]:
    return {
        "speedup": best.speedup,
        "speedup_low": best.speedup_low,
        "writers": best.writers,
        "compiler": best.compiler,
        "stale": best.stale,
        "decided_at": best.decided_at,
    }


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


__all__ = ["JitReport", "Jitted", "jit"]
