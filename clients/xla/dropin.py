"""``jit``: ``jax.jit`` that compiles with what the fleet decided for the program.

    from xla_costmodel.clients.xla import jit

    f = jit(fn, server="http://127.0.0.1:8000")
    f(x)            # first call per argument signature: one GET /v1/best, then compile
    f.report        # source, compiler_options, graph_id, reason, added_ms

On the first call per argument signature it lowers ``fn`` as ``jax.jit`` would,
fingerprints the lowered module (``reuse.fingerprint``: a hash of its StableHLO
without debug info, not a featurization: ~21 ms at 12k instructions), asks
``GET /v1/best`` once with a short timeout and no retry, and compiles with the
options of the answer's row (``reuse.served``: derived from ``config`` here, an
``xla_cpu/1`` row upgraded, never the answer's ``compiler_options``, which a writer
could fill with anything), through ``compile_with`` as every compile here is.
With ``verify`` it then checks the decision on that call (``verify.py``; by
default, ``None``, only a decision fewer than ``VERIFY_BELOW_WRITERS`` writers
support: each writer's tuner checked its outputs before deciding, so one writer
alone is the case the bound leaves open, docs/reuse.md): XLA's default is
compiled and run beside it and the outputs
compared; on a mismatch the call returns the default's result, the default is kept
for the signature, and the service is told, which stops serving that row under this
compiler. Anything else (no server, no answer, a row outside the compiler's space, a
decision made under another compiler with ``budget=0``, a row setting an option this
jaxlib rejects: stale here, logged once per reason and process) compiles XLA's
default: it never raises where ``jax.jit`` would not. With
``budget > 0`` and no fresh decision it tunes first in a child process
(``isolate.call`` runs ``jit_tuning.tune_job`` on the program shipped with
``export.ship``), which stores the decision, and compiles the row it chose; a
config that crashes XLA kills the child, never the caller. jax is imported by the
first call, never at import.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import replace
from typing import Any

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.errors import CostModelError
from xla_costmodel.clients.wire import BestKnown
from xla_costmodel.clients.xla import spec_rows
from xla_costmodel.clients.xla.compile_options import compile_with
from xla_costmodel.clients.xla.jit_report import (
    Applied,
    Choice,
    JitReport,
    Source,
    decision_figures,
    say_once,
)
from xla_costmodel.clients.xla.lookup import LOOKUP_TIMEOUT_S, lookup_client
from xla_costmodel.clients.xla.reuse import fingerprint, fresh, printable, served
from xla_costmodel.clients.xla.verify import check, refute, short
from xla_costmodel.tpugraphs import machine
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions

log = logging.getLogger(__name__)
# Below this many supporting writers a decision is verified by default: each
# writer's tuner compared the row's outputs with the default's before deciding, so
# two agreeing writers are two checks; one writer is what its token alone can make
# jit apply (docs/reuse.md, "The bound").
VERIFY_BELOW_WRITERS = 2
INVALID_ROW = f"the fleet's row {spec_rows.INVALID}"
STALE_ROW = f"the fleet's row {spec_rows.STALE}"
DEFAULT = CompilerOptions()


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
        verify: bool | None = None,
        spec: str = spec_rows.SPEC,
    ) -> None:
        self.fn, self.client, self.budget = fn, client, budget
        self.model, self.target, self.min_writers = model, target, min_writers
        self.jit_kwargs, self.tune_kwargs = jit_kwargs, tune_kwargs
        self.verify, self.spec = verify, spec
        self._compiled: dict[Hashable, Any] = {}
        self.reports: dict[Hashable, JitReport] = {}
        self.report: JitReport | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = _signature(args, kwargs)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled, self.report, ran = self._compile(args, kwargs)
            self._compiled[key], self.reports[key] = compiled, self.report
            if ran:  # the verification ran this call already: its result
                return ran[0]
        else:
            self.report = self.reports[key]
        return compiled(*args, **kwargs)

    def _verifies(self, best: BestKnown) -> bool:
        """Whether the first call checks ``best``'s outputs (``verify``; None: only
        below ``VERIFY_BELOW_WRITERS`` supporters)."""
        if self.verify is not None:
            return self.verify
        return best.writers < VERIFY_BELOW_WRITERS

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        import jax

        return jax.jit(self.fn, **self.jit_kwargs).lower(*args, **kwargs)

    def _compile(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Any, JitReport, tuple[Any, ...]]:
        """The executable, its report and, when the verification ran this call,
        ``(result,)`` (else ``()``)."""
        started = time.perf_counter()
        lowered = self.lower(*args, **kwargs)  # jax's own: errors are the caller's
        lowered_at = time.perf_counter()
        options, choice, applied = self._choose(lowered, args, kwargs)
        chosen_at = time.perf_counter()
        compiled = None
        try:
            if not options.is_default():
                compiled = compile_with(lowered, options)
        except Exception as exc:  # XLA's own error types: an option it rejects
            reason = f"this jaxlib rejected the options ({short(exc)}): the default"
            choice = replace(choice, source="default", reason=reason)
            options = DEFAULT
        if compiled is None:  # as jax.jit would: its errors propagate
            compiled = compile_with(lowered, DEFAULT)
        done = time.perf_counter()
        verified = None
        if applied and not options.is_default() and self._verifies(applied.best):
            verified = check(lowered, compiled, args, kwargs, self.jit_kwargs)
            compiled = verified.executable
            if not verified.outputs.ok:
                options = DEFAULT
                reason = verified.reason + self._refute(applied, choice)
                choice = replace(choice, source="default", reason=reason)
        verify_ms = 0.0 if verified is None else verified.verify_ms
        report = JitReport(
            source=choice.source,
            compiler_options=options.flat(),
            graph_id=choice.graph_id,
            reason=choice.reason,
            added_ms=(chosen_at - lowered_at) * 1e3 + verify_ms,
            lower_ms=(lowered_at - started) * 1e3,
            compile_ms=(done - chosen_at) * 1e3,
            hlo_fingerprint=choice.hlo_fingerprint,
            compiler=choice.compiler,
            target=choice.target,
            decision=choice.decision,
            verify_ms=verify_ms,
            outputs=None if verified is None else verified.outputs,
        )
        log.info(
            "jit %s: %s (%s)", report.graph_id or "?", report.source, report.reason
        )
        return compiled, report, () if verified is None else (verified.result,)

    def _refute(self, applied: Applied, choice: Choice) -> str:
        return refute(
            self.client,
            self.model,
            applied.best,
            applied.row,
            spec_rows.spec_named(self.spec),
            target=choice.target,
            compiler=choice.compiler,
            hlo_fingerprint=choice.hlo_fingerprint,
        )

    def _choose(
        self, lowered: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[CompilerOptions, Choice, Applied | None]:
        """The options to compile with, what chose them and the fleet's decision
        they come from (None: not from one); never raises."""
        compiler = machine.compiler()
        hlo_fingerprint: str | None = None
        target: str | None = None
        best: BestKnown | None = None

        def chosen(source: Source, reason: str) -> Choice:
            return Choice(
                source=source,
                reason=reason,
                compiler=compiler,
                hlo_fingerprint=hlo_fingerprint,
                target=target,
                graph_id=None if best is None else best.graph_id,
                decision=None if best is None else decision_figures(best),
            )

        try:
            hlo_fingerprint = fingerprint(lowered)
            target = self.target or machine.target()
            best, why = self._ask(hlo_fingerprint, target, compiler)
            # Only a fresh decision's row is judged (it may probe this jaxlib).
            ok = best is not None and fresh(best, compiler)
            row = served(best, self.spec) if best is not None and ok else None
        except Exception as exc:  # jit never fails where jax.jit would not
            return DEFAULT, chosen("default", f"no lookup ({short(exc)})"), None
        if best is not None and row is None:
            why = (
                f"decided under {printable(best.compiler)}, this is "
                f"{compiler}: not applied without verification"
            )
        elif best is not None and row is not None:
            if row.options is None or row.row is None:
                why = f"the fleet's row {row.why}"
                say_once(why)
            else:
                reason = (
                    f"the fleet's decision: {best.speedup:.3f}x by "
                    f"{best.writers} writer(s) under {printable(best.compiler)}"
                )
                applied = Applied(best, tuple(float(v) for v in row.row))
                return row.options, chosen("best_known", reason), applied
        if self.budget > 0:
            return (*self._tune(args, kwargs, chosen("default", why), why), None)
        return DEFAULT, chosen("default", f"{why}: the default"), None

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
            return None, f"no answer from the service ({short(exc)})"
        return best, "nothing decided for this program on this target yet"

    def _tune(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        choice: Choice,
        why: str,
    ) -> tuple[CompilerOptions, Choice]:
        """Tune in a child process (``budget > 0``; ``jit_tuning.tune_in_child``),
        which stores the decision; the options compiled here are derived from the
        row it chose. ``tune_kwargs["restarts"]`` (default 3): starts after a
        crash. The child looks ``spec`` up by its name."""
        if kwargs or self.jit_kwargs:
            reason = f"{why}; tuning takes positional arguments and no jit options"
            return DEFAULT, replace(choice, source="default", reason=reason)
        from xla_costmodel.clients.xla.jit_tuning import tune_in_child
        from xla_costmodel.clients.xla.tune_config import TuneConfig

        try:
            tune_kwargs = dict(self.tune_kwargs)
            restarts = int(tune_kwargs.pop("restarts", 3))
            cfg = TuneConfig(
                budget=self.budget,
                model=self.model,
                target=self.target,
                spec=self.spec,
                **tune_kwargs,
            )
            text = self.lower(*args).as_text(dialect="hlo")
            tuned = tune_in_child(
                self.fn,
                args,
                cfg,
                named=(text, choice.hlo_fingerprint),
                client=self.client,
                restarts=restarts,
                log=log.info,
            )
        except Exception as exc:  # a failed tuning leaves the default, as jax.jit
            reason = f"{why}; tuning failed ({short(exc)}): the default"
            return DEFAULT, replace(choice, source="default", reason=reason)
        reason = (
            f"{why}; tuned with budget {self.budget} in child process "
            f"{tuned.pid}: {tuned.reason}"
        )
        return tuned.options, replace(
            choice, source="tuned", reason=reason, graph_id=tuned.graph_id
        )


def jit(  # noqa: PLR0913 -- keyword-only options beside jax.jit's own
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
    verify: bool | None = None,
    spec: str = spec_rows.SPEC,
    **jit_kwargs: Any,
) -> Jitted:
    """``jax.jit(fn, **jit_kwargs)`` compiled with the best known options for this
    CPU (see the module docstring). ``client`` wins over ``server``; with neither,
    the default is compiled. ``verify``: check a fleet decision's outputs against
    XLA's default on the first call of each signature (docs/jit.md: it costs one
    more compile and run of the default then); None (the default): only decisions
    fewer than ``VERIFY_BELOW_WRITERS`` writers support. ``token`` (or
    ``COSTMODEL_TOKEN``) is
    needed for a tuning run (``budget > 0``) to store its decision, and for a failed
    verification to reach the service. ``spec``: the rows' spec, by its name in
    ``compiler_space.SPECS`` (``xla_cpu/2``)."""
    if budget < 0:
        raise ValueError("budget must be >= 0")
    if client is None and server is not None:
        client = lookup_client(server, token)
    return Jitted(
        fn,
        client,
        budget,
        model,
        target,
        min_writers,
        jit_kwargs,
        tune_kwargs or {},
        verify,
        spec,
    )


def _signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Hashable:
    """What ``jax.jit`` compiles anew for: the tree structure and each leaf's shape
    and dtype (a Python scalar by its type: jax traces it as a weak-typed value)."""
    import jax

    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    return tree, tuple(
        (tuple(getattr(x, "shape", ())), str(getattr(x, "dtype", type(x).__name__)))
        for x in leaves
    )


__all__ = ["JitReport", "Jitted", "jit"]
