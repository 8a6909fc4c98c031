"""What a user's program prints goes to stderr, so a command's stdout stays its answer.

``costmodel tune``, ``rank`` and ``best`` import ``FILE.py`` and run ``NAME()``; a
library that prints while it is imported (or while the program is traced) would put
its lines before ``--json``'s object, and ``| jq`` fails. Inside ``to_stderr()``,
Python's ``sys.stdout`` and file descriptor 1 (where a C extension's ``printf``
lands) both go to stderr; the command prints its answer after the block.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator

STDOUT, STDERR = 1, 2


@contextlib.contextmanager
def to_stderr() -> Iterator[None]:
    """Within: whatever is written to stdout, by Python or by C, reaches stderr."""
    _flush()
    try:
        saved: int | None = os.dup(STDOUT)
        os.dup2(STDERR, STDOUT)
    except OSError:  # no descriptor 1 or 2 (a daemon, an embedding): Python's only
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _flush()
        if saved is not None:
            os.dup2(saved, STDOUT)
            os.close(saved)


def _flush() -> None:
    """Python's buffered streams and C's, before descriptor 1 changes: a line written
    inside the block must not be flushed to the real stdout after it."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):  # closed, or detached
                stream.flush()
    with contextlib.suppress(OSError, AttributeError, TypeError):  # no C library
        ctypes.CDLL(None).fflush(None)
