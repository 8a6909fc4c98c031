"""``costmodel tokens ...`` and ``costmodel measurements purge``: the operator's side of
who may write measurements (docs/security.md).

    costmodel tokens create NAME [--target T]... [--database-url URL]
    costmodel tokens list | revoke NAME [--redis-url URL]
    costmodel measurements purge --writer NAME [--redis-url URL]

``create`` prints the token alone on the last line of stdout, once: only its sha256
is stored, so it cannot be shown again (revoke and create anew). Everything else goes
to stderr, so ``TOKEN=$(costmodel tokens create tuner-1 | tail -1)`` works. The
database is the service's (``--database-url``, else ``COSTMODEL_DATABASE_URL``, else
the SQLite file in ``COSTMODEL_DATA_DIR``); these commands change it directly, and
every replica sees the change on its next request (a revoked token stops working, a
purged writer's rows leave every graph's fit). What the processes cache from it
(measurement generations, each graph's decisions) they drop when ``revoke`` and
``purge`` announce ``WritersChanged`` through the service's Redis (``--redis-url``,
else ``COSTMODEL_REDIS_URL``): at once, instead of within ``LIVE_TRUST_S`` (60 s). The
store is opened as ``costmodel dataset export`` opens it (``command_store.open_store``).
"""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import SecretStr
from rich.console import Console
from rich.table import Table

from xla_costmodel.service.command_store import open_store
from xla_costmodel.service.settings import Settings

URL_HELP = (
    "sqlite:///PATH or postgresql://…; default $COSTMODEL_DATABASE_URL, else "
    "costmodel.db in the service's data directory ($COSTMODEL_DATA_DIR, data/)."
)
DatabaseUrl = Annotated[str | None, typer.Option(help=URL_HELP)]
RedisUrl = Annotated[
    str | None,
    typer.Option(
        envvar="COSTMODEL_REDIS_URL",
        help="the service's Redis: every process hears of the change at once",
    ),
]
err = Console(stderr=True)


def create(
    name: Annotated[str, typer.Argument(help="the writer: a tuner, a team, a CI job")],
    target: Annotated[
        list[str] | None,
        typer.Option(help="a target it may write (repeat; none: any target)"),
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create a writer and print its token (the last line of stdout, shown once)."""
    with open_store(database_url, create=True) as store:
        try:
            token = store.writers.create(name, target or None)
        except ValueError as exc:
            err.print(f"[red]{exc}[/]")
            raise typer.Exit(2) from None
    scope = ", ".join(target) if target else "any target"
    err.print(f"writer {name!r} created ({scope}); its token, shown once:")
    typer.echo(token)


def list_writers(database_url: DatabaseUrl = None) -> None:
    """Writers: name, targets, created, revoked (never a token)."""
    with open_store(database_url) as store:
        found = store.writers.list()
    table = Table(title="writers")
    for column in ("name", "targets", "created", "revoked"):
        table.add_column(column)
    for w in found:
        targets = ", ".join(w.targets) if w.targets else "any"
        revoked = w.revoked.isoformat(timespec="seconds") if w.revoked else ""
        table.add_row(w.name, targets, w.created.isoformat(timespec="seconds"), revoked)
    Console().print(table)


def revoke(
    name: Annotated[str, typer.Argument(help="the writer")],
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
) -> None:
    """Revoke a writer's token at once (its measurements stay; see purge); every
    replica stops serving its decisions."""
    with open_store(database_url) as store:
        store.writers.revoke(name)
    err.print(f"writer {name!r} revoked")
    if redis_url:  # the processes cache its decisions (decision_cache.py)
        _announce(redis_url, database_url, "serves its decisions")


def purge(
    writer: Annotated[
        str,
        typer.Option(
            help="the writer whose measurements go; anonymous: the rows stored "
            "without a token"
        ),
    ],
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
) -> None:
    """Delete every measurement and decision a writer stored; every replica's
    rankings and answers forget them."""
    with open_store(database_url) as store:
        deleted = store.writers.purge(writer)
    err.print(f"deleted {deleted} measurements and the decisions of writer {writer!r}")
    if redis_url:
        _announce(redis_url, database_url, "remembers the purged rows")
    typer.echo(deleted)


def _announce(url: str, database_url: str | None, stale: str) -> None:
    """Tell the service's processes that writers or measurements changed: each
    drops what it cached (``event_bus.announce``), sealed as they seal
    (``COSTMODEL_REDIS_HMAC_KEY``, else derived from the database URL, as theirs);
    untold, the service ``stale`` for up to ``LIVE_TRUST_S``."""
    import asyncio

    from redis.exceptions import RedisError

    from xla_costmodel.service.core.event_bus import LIVE_TRUST_S, announce
    from xla_costmodel.service.core.redis_store import Seal, connect

    given = SecretStr(database_url) if database_url else None
    settings = Settings.load(database_url=given) if given else Settings()
    seal = Seal(settings.stores.redis_seal_key)  # open_store validated these

    async def run() -> None:
        client = connect(url, 2.0, 2.0)
        try:
            await announce(client, seal)
        finally:
            await client.aclose()

    try:
        asyncio.run(run())
    except (RedisError, OSError) as exc:
        err.print(
            f"[yellow]Redis not told ({exc}); the service {stale} for up to "
            f"{LIVE_TRUST_S:.0f} s[/]"
        )
