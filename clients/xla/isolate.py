"""Running a ``costmodel`` command in a child process, restarted after XLA crashes it.

Some XLA:CPU option sets crash XLA itself (a segfault compiling, or running the
executable the first time): nothing in the process can catch that. ``costmodel
tune`` and ``costmodel collect`` therefore do their work in a child process; the
restarted child finds the crashing config in its crash journal (``probe.Journal``)
and leaves it out.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

Log = Callable[[str], None]


def supervise(argv: list[str], restarts: int, log: Log) -> int:
    """Run ``costmodel *argv`` in a child process, again after each crash (signal)."""
    code = "from xla_costmodel.cli import main; main()"
    for attempt in range(restarts + 1):
        rc = subprocess.run([sys.executable, "-c", code, *argv], check=False).returncode
        if rc >= 0:  # finished, or failed in Python (a bug: restarting would not help)
            return rc
        log(f"worker killed by signal {-rc} (start {attempt + 1}); restarting")
    return 1
