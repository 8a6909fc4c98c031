"""The addresses this process actually listens on: what ``COSTMODEL_FEEDBACK_AUTH=auto``
decides from, not the configured host (uvicorn's own ``--host``, a Gunicorn bind, an
``--fd`` handed over by a supervisor all bypass ``COSTMODEL_HOST``).

    listening(port) -> tuple[str, ...]   the addresses of this process's listening
                                         TCP sockets on ``port``; () when unknown
    loopback_only(addresses) -> bool     every one reaches this machine only
                                         (``service/loopback.py``'s ``is_loopback``)

Read from the process's own file descriptors (``/proc/self/fd``, ``/dev/fd``): a
uvicorn worker inherits its parent's listening socket, so it sees it too. Anything
that cannot be read (another OS, a Unix socket, a socket a proxy holds) answers
nothing, and ``auto`` then requires tokens.
"""

from __future__ import annotations

import os
import socket

from xla_costmodel.service.loopback import is_loopback

_FD_DIRS = ("/proc/self/fd", "/dev/fd")
_INET = (socket.AF_INET, socket.AF_INET6)


def listening(port: int) -> tuple[str, ...]:
    """Addresses of this process's TCP sockets listening on ``port``."""
    for folder in _FD_DIRS:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        found = (_listener(int(n)) for n in names if n.isdigit())
        return tuple(host for host, bound in filter(None, found) if bound == port)
    return ()


def loopback_only(addresses: tuple[str, ...]) -> bool:
    """Whether there is an address and none is reachable from another machine."""
    return bool(addresses) and all(is_loopback(a.split("%")[0]) for a in addresses)


def _listener(fd: int) -> tuple[str, int] | None:
    """(host, port) of a listening TCP socket ``fd``; None for anything else."""
    try:
        copy = os.dup(fd)  # closed with the socket object; ``fd`` stays open
    except OSError:
        return None
    try:
        sock = socket.socket(fileno=copy)
    except OSError:  # not a socket
        os.close(copy)
        return None
    with sock:
        try:
            accepting = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            if sock.family not in _INET or not accepting:
                return None
            host, port = sock.getsockname()[:2]
        except OSError:
            return None
    return str(host), int(port)
