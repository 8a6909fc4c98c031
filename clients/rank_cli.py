"""``costmodel rank``: rank configs of one program against a service (rendering only).

The program is HLO text (a file), a TpuGraphs ``.npz`` (its graph, and its configs
unless ``--configs`` names others) or ``FILE.py:NAME`` as ``costmodel tune`` takes it,
lowered here to pre-optimization HLO (what the xla_cpu model is trained on; needs the
xla extra). The configs are ``--configs N`` sampled XLA:CPU option sets (``xla_cpu/2``
rows, row 0 XLA's default; xla_cpu only; ranked for this CPU with jax installed,
less the rows that set an option this jaxlib rejects: ``spec_rows.candidates``) or a
file: ``.json`` (a list of raw configs, e.g. ``compiler_options`` dicts, or of
feature rows) or ``.npy`` (feature rows; ``xla_cpu/1`` rows are upgraded).

An HLO program ranked by the xla_cpu model is ranked for this machine's CPU
(``machine.target()``, as ``costmodel tune`` measures it) unless ``--target`` names
another; the target used is printed. What the program prints while it is imported
and lowered goes to stderr (``user_output``): stdout carries the table or the JSON.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.errors import CostModelError
from xla_costmodel.clients.hlo import Hlo
from xla_costmodel.clients.user_output import to_stderr
from xla_costmodel.clients.wire import RankResult
from xla_costmodel.tpugraphs import collections, machine, xla_cpu2
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.reader import load_npz

XLA_CPU = "xla_cpu"
DEFAULT_SAMPLE = 64
# What shaped a ranking besides the model: printed under the table, kept in --json.
SHAPED_BY = (
    "adapted",
    "target_programs",
    "target_measurements",
    "knowledge_weight",
    "prior_weight",
)


def rank(
    program: str = typer.Argument(
        ...,
        metavar="PROGRAM",
        help="An HLO text file, a TpuGraphs .npz, or FILE.py:NAME (NAME() returns "
        "(fn, args); lowered to pre-optimization HLO, needs the xla extra).",
    ),
    server: str = typer.Option(
        "http://127.0.0.1:8000",
        "--server",
        envvar="COSTMODEL_SERVER",
        show_envvar=True,
        help="Service base URL.",
    ),
    model: str = typer.Option(XLA_CPU, "--model", help="Model to ask."),
    target: str | None = typer.Option(
        None,
        "--target",
        help="Hardware the ranking is for (default: this machine's CPU for an HLO "
        "program and the xla_cpu model, else the model's).",
    ),
    configs: str | None = typer.Option(
        None,
        "--configs",
        metavar="N|FILE",
        help=f"N sampled XLA:CPU option sets (xla_cpu; default {DEFAULT_SAMPLE}, row "
        "0 the default; for this CPU, none this jaxlib rejects), or a .json list of "
        "configs / .npy rows; an .npz program's own configs by default.",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the sampled option sets."),
    top_k: int = typer.Option(5, "--top-k", min=1, help="Configs to print."),
    json_: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Rank configs of a program against a service: the best first, and what shaped
    the ranking (the graph's measurements, the target's knowledge, the prior)."""
    with to_stderr():  # the user's program may print while imported or traced
        graph, given = load_graph(program)
    target = target or default_target(model, graph)
    here = target is not None and target == machine.target()
    rows, shown = load_configs(
        configs, given, model, seed, here=here, loops=loops_of(graph)
    )
    try:
        with CostModelClient(server) as client:
            result = client.rank(model, graph, rows, top_k=top_k, target=target)
    except CostModelError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    answer = to_json(result, shown, target)
    if json_:
        typer.echo(json.dumps(answer, indent=2))
        return
    console = Console(width=120)
    console.print(render(answer, program))
    typer.echo(shaped_by(answer))


def load_graph(program: str) -> tuple[Any, Any | None]:
    """(the graph input, the program's own configs or None)."""
    path_text, sep, _ = program.rpartition(":")
    if sep and path_text.endswith(".py"):
        return Hlo(lower(program)), None
    path = Path(program)
    if not path.is_file():
        raise typer.BadParameter(f"no such file: {program}")
    if path.suffix == ".npz":
        try:
            sample = load_npz(path)
        except GraphFormatError as exc:
            raise typer.BadParameter(f"{path}: {exc}") from None
        return sample.graph, sample.configs
    return Hlo.read(path), None


def default_target(model: str, graph: Any) -> str | None:
    """This machine's target for a program lowered or dumped here (HLO) and ranked by
    the xla_cpu model, whose targets are CPUs; None (the model's) otherwise: an
    ``.npz`` carries another machine's graph."""
    return machine.target() if model == XLA_CPU and isinstance(graph, Hlo) else None


def lower(spec: str) -> str:
    """``FILE.py:NAME``'s program as pre-optimization HLO text."""
    if importlib.util.find_spec("jax") is None:
        typer.echo(
            "costmodel rank FILE.py:NAME needs the xla extra: "
            "pip install 'xla-costmodel[xla]'",
            err=True,
        )
        raise typer.Exit(1)
    import jax

    from xla_costmodel.clients.xla.programs import load_program

    fn, args = load_program(spec)
    return str(jax.jit(fn).lower(*args).as_text(dialect="hlo"))


def load_configs(
    spec: str | None,
    given: Any | None,
    model: str,
    seed: int,
    *,
    here: bool = False,
    loops: bool = True,
) -> tuple[Any, list[Any]]:
    """(the configs to send, one JSON-ready description per config). ``here``: the
    ranking is for this machine's CPU (sampled rows this jaxlib rejects are left
    out); ``loops``: the program has a while loop (else sampled rows that differ
    only in the loop threshold are left out: ``xla_cpu2.for_program``)."""
    if spec is None and given is not None:
        rows = np.asarray(given)
        return rows, [None] * len(rows)
    if spec is None or spec.isdigit():
        if model != XLA_CPU:
            raise typer.BadParameter(
                "only xla_cpu option sets are sampled: pass --configs FILE",
                param_hint="--configs",
            )
        try:
            sampled = sample(int(spec or DEFAULT_SAMPLE), seed, here, loops)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--configs") from None
        return sampled, [xla_cpu2.to_options(row).flat() for row in sampled]
    path = Path(spec)
    if not path.is_file():
        raise typer.BadParameter(f"no such file: {spec}", param_hint="--configs")
    if path.suffix == ".npy":
        rows = np.load(path, allow_pickle=False)
        return rows, described(rows, model)
    loaded = json.loads(path.read_text())
    if not isinstance(loaded, list) or not loaded:
        raise typer.BadParameter(
            f"{spec}: expected a non-empty JSON list", param_hint="--configs"
        )
    if isinstance(loaded[0], dict):
        return loaded, list(loaded)
    rows = np.asarray(loaded, dtype=np.float32)
    return rows, described(rows, model)


def sample(n: int, seed: int, here: bool, loops: bool = True) -> Any:
    """``n`` sampled ``xla_cpu/2`` rows (``sample_for_program``: without loops, none
    that differ only in the loop threshold); for
    this machine with jax installed, less those this jaxlib rejects
    (``spec_rows.candidates``: a probe of a few tiny compiles). Without jax, or for
    another CPU, this jaxlib says nothing."""
    if not here or importlib.util.find_spec("jax") is None:
        return xla_cpu2.sample_for_program(n, seed, loops)
    from xla_costmodel.clients.xla import spec_rows

    spec = spec_rows.spec_named(spec_rows.SPEC)
    return spec_rows.candidates(spec, n, seed, loops).rows


def loops_of(graph: Any) -> bool:
    """Whether the program to rank has a while loop (an HLO text or a graph)."""
    if isinstance(graph, Hlo):
        from xla_costmodel.clients.xla.spec_rows import has_loops

        return has_loops(graph.text)
    return xla_cpu2.has_loops(graph.node_opcode)


def described(rows: Any, model: str) -> list[Any]:
    """xla_cpu rows (an older spec's upgraded) as their compiler options, as
    ``CompilerOptions.flat`` spells them (None for an invalid row); other rows are
    not described."""
    spec = collections.get(XLA_CPU)
    if model != XLA_CPU or np.ndim(rows) != 2:
        return [None] * len(rows)
    if np.shape(rows)[1:] not in spec.config_shapes():
        return [None] * len(rows)
    return [_options(row) for row in spec.upgrade(np.asarray(rows, np.float32))]


def _options(row: Any) -> dict[str, Any] | None:
    try:
        return xla_cpu2.to_options(row).flat()
    except ValueError:
        return None


def to_json(result: RankResult, shown: list[Any], target: str | None) -> dict[str, Any]:
    """The answer as ``costmodel rank --json`` prints it."""
    scores = result.scores or ()
    return {
        "model": result.model,
        "model_version": result.model_version,
        "graph_id": result.graph_id,
        "target": target,
        "cache": result.cache,
        "ranking_id": result.ranking_id,
        "configs": len(result.ranking),
        **{name: getattr(result, name) for name in SHAPED_BY},
        "top_k": [
            {
                "index": i,
                "score": scores[i] if scores else None,
                "config": shown[i] if i < len(shown) else None,
            }
            for i in result.top_k
        ],
        "ranking": list(result.ranking),
    }


def render(answer: dict[str, Any], program: str) -> Table:
    """The top configs, best first."""
    table = Table(
        title=f"rank {program}: {answer['model']}:{answer['model_version']}, "
        f"top {len(answer['top_k'])} of {answer['configs']}"
    )
    for column in ("rank", "index", "score"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("config", overflow="fold")
    for place, entry in enumerate(answer["top_k"], 1):
        score = entry["score"]
        table.add_row(
            str(place),
            str(entry["index"]),
            "-" if score is None else f"{score:.4f}",
            describe(entry["config"]),
        )
    return table


def describe(config: Any) -> str:
    if config is None:
        return ""
    if isinstance(config, dict) and all(k.startswith("xla_") for k in config):
        from xla_costmodel.clients.xla.programs import short

        return short(config)
    return json.dumps(config, separators=(",", ":"))


def shaped_by(answer: dict[str, Any]) -> str:
    """One line: where the ranking came from."""
    target = answer["target"] or "the model's default"
    if target == machine.target():
        target += ", this machine's"
    parts = ", ".join(f"{name} {answer[name]}" for name in SHAPED_BY)
    return f"shaped by: {parts} (target: {target}; cache: {answer['cache']})"
