"""The store's exceptions, and the one place database errors are translated into them.

    StoreError                  anything the store cannot do
     ├── StoreUnavailable       unreachable, locked too long, full, read-only, schema
     │                          newer than this code: try again later / elsewhere
     ├── IdempotencyKeyReused   an idempotency key resent with a different request
     ├── UnknownGraph           measurements for a graph that was never saved
     └── (writers.py) WriterExists, UnknownWriter, WriterQuotaExceeded

SQLAlchemy and DB-API exceptions never leave the store: ``translated`` turns them into
the tree above with a one-line message (no SQL, no parameters), the original chained
as ``__cause__`` for logs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import exc as sa_exc


class StoreError(Exception):
    """The measurement store could not do what was asked."""


class StoreUnavailable(StoreError):
    """The database cannot be used right now: unreachable, locked, full, read-only."""


class IdempotencyKeyReused(StoreError):
    """An idempotency key was sent again with a different request."""


class UnknownGraph(StoreError):
    """Measurements name a graph the store does not hold (save the graph first)."""


# Connection-level failures that are not ``OperationalError`` in every driver.
_UNAVAILABLE = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.TimeoutError,
    sa_exc.DisconnectionError,
)


def reason(exc: BaseException) -> str:
    """First line of the driver's message (never the statement or its parameters)."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip()
    first = text.splitlines()[0].strip() if text else ""
    return first or type(orig if orig is not None else exc).__name__


@contextmanager
def translated(dialect: str, action: str) -> Iterator[None]:
    """Run a block, re-raising database errors as ``StoreError``/``StoreUnavailable``."""
    try:
        yield
    except StoreError:
        raise
    except _UNAVAILABLE as exc:
        raise StoreUnavailable(
            f"{dialect} database unavailable ({action}): {reason(exc)}"
        ) from exc
    except sa_exc.DBAPIError as exc:
        if exc.connection_invalidated:
            raise StoreUnavailable(
                f"{dialect} connection lost ({action}): {reason(exc)}"
            ) from exc
        raise StoreError(f"{dialect} database error ({action}): {reason(exc)}") from exc
    except sa_exc.SQLAlchemyError as exc:
        raise StoreError(f"{dialect} database error ({action}): {reason(exc)}") from exc
    except OSError as exc:  # creating the SQLite directory, a driver's raw socket error
        raise StoreUnavailable(
            f"{dialect} database unavailable ({action}): {exc}"
        ) from exc
