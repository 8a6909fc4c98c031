"""``jit``'s tuning run in a child process (``isolate.call``): both ends.

    tune_in_child(fn, args, ...) -> Tuned   the caller's end: ship, run, read the row
    tune_job(job) -> dict     the child's: the shipped program (``export.load``) tuned

Its own module because it sits above the tuner: ``export`` (which the tuner's fresh
confirmation also uses) must not import ``tune``. Both ends of the request are here,
so its keys are written and read in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xla_costmodel.clients.xla import isolate, spec_rows
from xla_costmodel.clients.xla.export import load, ship
from xla_costmodel.clients.xla.isolate import Job
from xla_costmodel.clients.xla.tune_config import TuneConfig, config_to_json
from xla_costmodel.tpugraphs.xla_cpu2 import CompilerOptions

if TYPE_CHECKING:
    from xla_costmodel.clients.client import CostModelClient


@dataclass(frozen=True, kw_only=True)
class Tuned:
    """What the child chose: the options derived here from its row (empty: the
    default), the graph and reason of its report, and the child's pid."""

    options: CompilerOptions
    graph_id: str | None
    reason: str | None
    pid: int


def tune_in_child(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    cfg: TuneConfig,
    *,
    named: tuple[str, str | None],
    client: CostModelClient | None,
    restarts: int,
    log: Callable[[str], None],
) -> Tuned:
    """``tune`` of ``fn(*args)`` in a child process, as ``costmodel tune`` does: a
    config that crashes XLA kills the child, never the caller (the child is
    restarted ``restarts`` times and leaves it out). The program goes there with
    ``jax.export`` (``export.ship``), the writer token on the child's stdin; the
    child stores the decision with its own client of ``client``'s service.
    ``named``: the caller's HLO text and fingerprint. The child looks ``cfg.spec``
    up by its name. Raises when it never answers or its row cannot be used here
    (``spec_rows.judge``)."""
    request = {
        "config": config_to_json(cfg),
        "hlo_text": named[0],
        "hlo_fingerprint": named[1],
        # The base URL only: not this client's transport, nor its connections.
        "server": None if client is None else client.base_url,
    }
    answer = isolate.call(
        "xla_costmodel.clients.xla.jit_tuning:tune_job",
        request,
        ship(fn, args),
        token=None if client is None else client.token,
        restarts=restarts,
        log=log,
    )
    report = answer.value
    row = report.get("config")
    options = CompilerOptions()
    if row is not None:
        served = spec_rows.judge(row, spec_rows.spec_named(cfg.spec))
        if served.options is None:
            raise ValueError(f"the tuning child's row {served.why}")
        options = served.options
    return Tuned(
        options=options,
        graph_id=report.get("graph_id"),
        reason=report.get("reason"),
        pid=answer.pid,
    )


def tune_job(job: Job) -> dict[str, Any]:
    """``jit``'s tuning run in its child: ``tune`` of the shipped program with the
    service at ``request["server"]`` (the token from the job, never from this
    process's environment), named by the caller's HLO and fingerprint; the report
    as JSON."""
    from xla_costmodel.clients.client import CostModelClient
    from xla_costmodel.clients.xla.tune import run_tuning
    from xla_costmodel.clients.xla.tune_config import config_from_json

    request = job.request
    fn, args = load(job.workdir)
    cfg = config_from_json(request["config"])
    named = (request["hlo_text"], request["hlo_fingerprint"])
    server = request.get("server")
    if server is None:
        return run_tuning(fn, args, cfg, None, None, named=named)[0].to_json()
    # "": no token at all (a None would read this process's environment).
    with CostModelClient(server, token=job.token or "") as client:
        return run_tuning(fn, args, cfg, client, None, named=named)[0].to_json()
