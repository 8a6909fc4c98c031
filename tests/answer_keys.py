"""Answers' JSON keys that tests in more than one folder check, written once.

``BEST_KEYS``: a ``GET /v1/best`` answer's, exactly (``service/test_decisions.py``);
``costmodel best --json`` prints all of them but the decision's provenance
(``BEST_PROVENANCE``: what the client's ``BestKnown`` does not carry;
``clients/test_reuse.py``).
"""

from __future__ import annotations

from typing import Final

BEST_KEYS: Final = frozenset(
    {
        "graph_id",
        "target",
        "config",
        "compiler_options",
        "speedup",
        "speedup_low",
        "p_value",
        "writers",
        "decided_at",
        "compiler",
        "stale",
        "model",
        "kept_default",
        "pairs",
        "strategy",
    }
)
BEST_PROVENANCE: Final = frozenset({"model", "kept_default", "pairs", "strategy"})
