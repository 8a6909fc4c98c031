"""Multiprocess mode: several workers, one directory of per-process metric files."""

from __future__ import annotations

import os

from prometheus_client import multiprocess


def multiprocess_dir() -> str | None:
    """The directory of multiprocess mode, or None in one process."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def forget_dead_workers(path: str) -> None:
    """Drop the live* gauges of workers that died without their lifespan's exit
    (uvicorn kills a hung or crashed worker and starts another, with no hook)."""
    pids = {
        int(name.rsplit("_", 1)[1][: -len(".db")])
        for name in os.listdir(path)
        if name.startswith("gauge_live") and name.endswith(".db")
    }
    for pid in pids:
        try:
            os.kill(pid, 0)  # signal 0: only asks whether the process exists
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
        except PermissionError:  # alive, another user's: not ours to judge
            pass


def mark_dead(pid: int) -> None:
    """A worker's exit: its live* gauges leave the merged view."""
    multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
