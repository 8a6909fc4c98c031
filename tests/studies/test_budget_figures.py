"""docs/tuning-budgets.md quotes the committed run it reports
(studies/results/budgets.json), to the digits printed."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_budget_table_quotes_its_json() -> None:
    ran = json.loads((REPO / "studies/results/budgets.json").read_text())
    expected = [
        [
            name,
            str(t["programs"]),
            str(r["history"]),
            str(r["K"]),
            *(f"{r[k]:.3f}" for k in ("model", "random", "fixed", "oracle")),
            f"{r['regressions']:.1%}",
            f"{r['slower_of_kept']:.1%}",
            f"{r['pairs']:.1f}",
        ]
        for name, t in ran["targets"].items()
        for r in t["by_history"]
    ]
    quoted = []
    for line in (REPO / "docs/tuning-budgets.md").read_text().splitlines():
        cells = [c.strip().strip("*`") for c in line.strip().strip("|").split("|")]
        if line.startswith("| cpu-") and len(cells) == 11 and cells[1].isdigit():
            quoted.append(cells)
    assert quoted == expected
    assert ran["budgets"] == [1, 2, 4, 8, 16] and ran["prior"]


def test_the_readme_quotes_the_budget_json() -> None:
    """The short table (docs/tuning-budgets.md's summary, which the README points
    to): h = 0, the targets held to the goals."""
    ran = json.loads((REPO / "studies/results/budgets.json").read_text())
    expected = []
    for name, t in ran["targets"].items():
        if t["programs"] < 30:
            continue
        by = {r["K"]: r for r in t["by_history"] if r["history"] == 0}
        (match,) = [
            m for m in t["random_to_match"] if m["history"] == 0 and m["model_K"] == 2
        ]
        expected.append(
            [
                name,
                " / ".join(f"{by[k]['model']:.3f}" for k in (1, 2, 4, 8, 16)),
                f"{by[8]['random']:.3f} / {by[16]['random']:.3f}",
                f"{by[8]['oracle']:.3f}",
                f"{match['random_K']:.1f}",
            ]
        )
    quoted = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in (REPO / "docs/tuning-budgets.md").read_text().splitlines()
        if line.startswith("| cpu-") and line.count("|") == 7
    ]
    # The second column names the CPU in words (every figure names its CPU).
    assert all(row[1].startswith(("AMD EPYC", "Intel Xeon")) for row in quoted)
    assert [[row[0], *row[2:]] for row in quoted] == expected
