"""The benchmark harness behind ``costmodel bench``.

It measures, in one run and on one machine, what the service adds to the model's own
compute: the tile scorer alone in onnxruntime (the physical limit), the same model in
PyTorch eager (what a researcher would do instead), ``POST /v1/rank`` through the real
client with binary and JSON bodies, an autotuner round on a real layout graph with a
cold and a warm embedding cache, and a bounded concurrent load. ``cli.bench`` is the
entry point; ``harness.run`` orchestrates the phases; every process it starts (a
``redis-server``, a uvicorn server; ``xla_costmodel.harness``) is stopped before it
returns.

The process harness (``harness/``) lives with the tests: the wheel and the image do not
hold it, so the bench, the chaos run and the studies that start servers run from a
clone. ``require_harness`` is the one check, called by a command before it first
imports anything that imports the harness; without it the command exits 1 with one line
instead of an ImportError.
"""

from __future__ import annotations

import importlib.util

HARNESS = "xla_costmodel.harness"
NEEDS_CLONE = "needs a clone of the repository (the test harness is not installed)"
FROM_A_CLONE = "run it from a clone, after pip install -e '.[service,bench]'"


def require_harness(command: str) -> None:
    """Exit 1 with one line naming ``command`` when the test harness is not installed
    (an install from the wheel or the service image; a clone's editable install has
    it)."""
    if importlib.util.find_spec(HARNESS) is None:
        raise SystemExit(f"{command} {NEEDS_CLONE}: {FROM_A_CLONE}")
