"""``costmodel best FILE.py:NAME``: what the fleet decided for a program (rendering only).

Lowers ``NAME()``'s program as ``tune`` does, computes its graph id here and asks
``GET /v1/best`` for this CPU's target and this jaxlib; ``--json`` prints the
answer's keys as they are, ``compiler_options`` derived from the row (``xla_cpu/2``;
null for a row ``jit`` and ``tune`` would not apply: not a valid row, or stale here
because it sets an option this jaxlib rejects, which a warning says). Nothing
decided: exit 1. jax is imported when it runs.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.errors import CostModelError
from xla_costmodel.clients.hlo import Hlo
from xla_costmodel.clients.payloads import prepare_graph
from xla_costmodel.clients.user_output import to_stderr
from xla_costmodel.clients.xla.programs import load_program, short
from xla_costmodel.clients.xla.reuse import printable, served
from xla_costmodel.clients.xla.spec_rows import Served
from xla_costmodel.tpugraphs import machine

if TYPE_CHECKING:
    from xla_costmodel.clients import BestKnown


def best(
    program: str = typer.Argument(
        ..., metavar="FILE.py:NAME", help="NAME() in FILE.py returns (fn, args)."
    ),
    server: str = typer.Option(
        "http://127.0.0.1:8000", "--server", help="Service base URL."
    ),
    model: str = typer.Option(
        "xla_cpu", "--model", help="Model the decisions are for."
    ),
    target: str | None = typer.Option(
        None, "--target", help="Hardware name (default: this CPU's)."
    ),
    compiler: str | None = typer.Option(
        None,
        "--compiler",
        help='Compiler to ask for (default: this jaxlib, "jaxlib X").',
    ),
    min_writers: int = typer.Option(1, "--min-writers", min=1),
    json_: bool = typer.Option(False, "--json", help="Print the answer's JSON keys."),
) -> None:
    """Print the best decided compiler options for a program on this CPU."""
    with to_stderr():  # what the program prints is not the answer (--json)
        import jax

        fn, args = load_program(program)
        text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
    graph = prepare_graph(Hlo(text, configurable=None))
    target = target or machine.target()
    compiler = compiler or machine.compiler()
    known = _ask(server, model, graph.graph_id, target, compiler, min_writers)
    if known is None:
        _nothing_decided(graph.graph_id, target, json_)
    _show(known, compiler, json_)


def _ask(
    server: str,
    model: str,
    graph_id: str,
    target: str,
    compiler: str | None,
    min_writers: int,
) -> BestKnown | None:
    """``GET /v1/best``; exit 2 when the service does not answer."""
    try:
        with CostModelClient(server) as client:
            return client.best(
                model,
                graph_id=graph_id,
                target=target,
                compiler=compiler,
                min_writers=min_writers,
            )
    except CostModelError as exc:  # as rank prints it (no markup: [ in messages)
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _nothing_decided(graph_id: str, target: str, json_: bool) -> NoReturn:
    """Say that the fleet decided nothing for the program; exit 1."""
    if json_:
        typer.echo(
            json.dumps(
                {
                    "error": {
                        "code": "no_decision",
                        "graph_id": graph_id,
                        "target": target,
                    }
                }
            )
        )
    else:
        typer.echo(f"nothing decided for {graph_id[:12]} on {target}")
    raise typer.Exit(1)


def _show(known: BestKnown, compiler: str | None, json_: bool) -> None:
    """The decision: its JSON keys, or four lines for a person.

    The options shown are the row's (``reuse.served``), what ``jit`` and ``tune``
    compile; options the service sent that differ, and a row they would not apply
    (invalid, or stale here), are a warning (stderr), never shown as the decision.
    Every string from the service is escaped (``reuse.printable``): an option value
    cannot drive the terminal."""
    row = served(known)
    derived = None if row.options is None else row.options.flat()
    warning = _options_warning(known, row, derived)
    if warning:
        typer.echo(f"warning: {warning}", err=True)
    body: dict[str, Any] = {
        "graph_id": known.graph_id,
        "target": known.target,
        "config": list(known.config),
        "compiler_options": derived,
        "speedup": known.speedup,
        "speedup_low": known.speedup_low,
        "p_value": known.p_value,
        "writers": known.writers,
        "decided_at": known.decided_at,
        "compiler": known.compiler,
        "stale": known.stale,
    }
    if json_:
        typer.echo(json.dumps(body, indent=2))
        return
    stale = f" (STALE: this is {printable(compiler)})" if known.stale else ""
    options = short(derived) if derived is not None else "none: not a valid row"
    if row.stale:
        options = "none: STALE here, it sets an option this jaxlib rejects"
    for line in (
        f"program {printable(known.graph_id[:12])} on {printable(known.target)}",
        f"options: {printable(options)}",
        f"speedup {known.speedup:.3f}x (low {known.speedup_low:.3f}), "
        f"{known.writers} writer(s)",
        f"decided {printable(known.decided_at)} under {printable(known.compiler)}"
        f"{stale}",
    ):
        typer.echo(line)


def _options_warning(
    known: BestKnown, row: Served, derived: dict[str, Any] | None
) -> str:
    """What is wrong with the answer's options ("" if nothing): a row outside the
    compiler's space, one stale here, or ``compiler_options`` other than the row's."""
    if derived is None:
        why = printable(row.why)
        return f"the decided row {why}: jit and tune compile the default"
    if dict(known.compiler_options) != derived:
        sent = json.dumps(dict(known.compiler_options), sort_keys=True, default=str)
        return (
            f"the service sent compiler_options {printable(sent)} that are not "
            "the row's: shown and compiled are the row's"
        )
    return ""
