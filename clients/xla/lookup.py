"""The process's clients for ``jit``'s lookups: one per (server, token).

    lookup_client(server, token) -> CostModelClient

However many functions ``jit`` wraps, a process keeps one client per server and
token (each holds a connection pool), as jax's own caches live as long as the
process does.
"""

from __future__ import annotations

import threading

import httpx

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.retry import RetryPolicy

# One lookup must not hold a program's first call back for long: a service that does
# not answer in this time is treated like no service (the default is compiled).
LOOKUP_TIMEOUT_S = 0.5
_CLIENTS: dict[tuple[str, str | None], CostModelClient] = {}
_CLIENTS_LOCK = threading.Lock()


def lookup_client(server: str, token: str | None) -> CostModelClient:
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
