"""Whether a bind address reaches this machine only.

    is_loopback(host) -> bool            127/8, ::1, ``localhost``

A leaf (the standard library only): the settings (``Settings.feedback_tokens_required``,
judging a configured host) and the core (``core/binding.py``, judging the sockets the
process listens on) both read it, and neither imports the other for it.
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether a bind address reaches this machine only (``localhost``, 127/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False
