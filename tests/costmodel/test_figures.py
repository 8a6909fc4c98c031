"""Figures with a source: the tables in docs/ quote the committed JSON (or manifest)
they come from, to the digits printed, and every page with measured figures says when
and where they were measured."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from xla_costmodel.bench.report import GOALS, KEYS, markdown

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
DATE = re.compile(r"20\d\d-\d\d-\d\d")
# The CPUs figures were measured on, as the pages name them.
# A measured figure: a decimal number (not part of an address like 127.0.0.1).
DECIMAL = re.compile(r"(?<![\d.])\d+\.\d+(?![\d.])")
# Pages whose tables hold defaults and limits, not measurements.
SETTINGS_ONLY = {"settings.md"}
CPU = re.compile(r"Intel Xeon|AMD EPYC|family \d+ model \d+|CPU was not recorded")


def rows(page: str, first_cell: str) -> list[list[str]]:
    """Table rows of ``page`` whose first cell matches ``first_cell``, as cells with
    markdown emphasis and backticks removed."""
    found = []
    for line in (DOCS / page).read_text().splitlines():
        cells = [c.strip().strip("*`") for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and re.fullmatch(first_cell, cells[0]):
            found.append(cells)
    return found


def load(path: str) -> Any:
    return json.loads((REPO / path).read_text())


def test_the_fleet_simulation_table_quotes_its_json() -> None:
    """docs/xla-cpu.md quotes the K = 8 rows of ``make xla-tuning``'s output."""
    ran = load("studies/results/budgets.json")
    quoted = rows("xla-cpu.md", r"cpu-[a-z0-9.-]+")
    expected = [
        [
            target,
            str(t["programs"]),
            str(t["families"]),
            str(h["history"]),
            *(f"{h[k]:.3f}" for k in ("model", "random", "fixed", "oracle")),
            f"{h['regressions']:.1%}",
        ]
        for target, t in ran["targets"].items()
        for h in t["by_history"]
        if h["K"] == 8
    ]
    fleet_rows = [r for r in quoted if len(r) == 9]
    assert fleet_rows == expected


def test_the_replay_table_quotes_its_json() -> None:
    quoted = {r[0]: r[1:] for r in rows("replay.md", r"--budget.*")}
    for flag, path in (
        ("--budget 5", "studies/results/replay_budget5.json"),
        ("--budget-fraction 0.1", "studies/results/replay_fraction0.1.json"),
    ):
        m = load(path)["mean"]
        assert quoted[flag] == [
            f"{m['slowdown']:.3f}",
            f"{m['random_slowdown']:.3f}",
            f"{m['speedup_vs_default']:.3f} / {m['random_speedup_vs_default']:.3f}",
            f"{m['measured_fraction']:.1%}",
        ]


def test_the_tile_table_quotes_the_shipped_manifest() -> None:
    metrics = load("models/artifacts/tile/1/manifest.json")["metrics"]
    quoted = {r[0]: r[1:] for r in rows("training.md", r"(copy|fusion)\.\d+")}
    keys = ("top1_slowdown", "top5_slowdown", "top10_slowdown")
    for graph in metrics["graphs"]:
        name = graph["graph"].split("_")[0]
        assert quoted[name] == [
            str(graph["num_configs"]),
            " / ".join(f"{graph[k]:.3f}" for k in keys),
            " / ".join(f"{graph['random'][k]:.3f}" for k in keys),
            f"{graph['default']['top1_slowdown']:.3f}",
        ], name


def test_the_bench_tables_quote_their_json() -> None:
    """docs/benchmarks.md quotes ``bench/results/bench_full.json`` as the bench's report
    renders it (the main table with its goal column, the peer and workers tables, the
    run's line), and the goals marked there are the current goals' verdicts."""
    ran = load("bench/results/bench_full.json")
    assert ran["mode"] == "full"
    assert ran["goals"] == {key: goal.check(ran) for key, goal in GOALS.items()}
    text = (DOCS / "benchmarks.md").read_text()
    blocks = markdown(ran).strip().split("\n\n")
    main = blocks[0].splitlines()
    assert len(main) == 2 + len(KEYS)
    for block in blocks:
        assert block in text, block.splitlines()[0]
    # No second row for a figure of the main table elsewhere on the page.
    for key in KEYS:
        assert text.count(f"| `{key}` (") == 1, key


def test_every_page_with_measured_figures_says_when_and_where() -> None:
    """A table with decimal figures comes with a date and a CPU (or machine)."""
    for page in sorted(DOCS.glob("*.md")):
        if page.name in SETTINGS_ONLY:
            continue
        text = page.read_text()
        rows = re.findall(r"^\|.*\|$", text, re.M)
        figures = [r for r in rows if len(DECIMAL.findall(r)) >= 2]
        if len(figures) < 3:
            continue
        assert DATE.search(text) and CPU.search(text), page.name


README = (REPO / "README.md").read_text()
RESULT = r"((?:studies|bench)/results/[\w.-]+\.json)"
RESULTS_LINK = re.compile(rf"\[{RESULT}\]\({RESULT}\)")  # [path](path), a JSON


def budgets_summary() -> str:
    """docs/tuning-budgets.md's summary, which the README points to."""
    page = (DOCS / "tuning-budgets.md").read_text()
    return page.split("## In short", 1)[1].split("\n#", 1)[0]


def test_every_readme_figure_links_its_json_and_names_the_cpu() -> None:
    """Outside quoted command output, a README paragraph or table with 3 or more
    decimal figures links (itself, or in the paragraph before) a committed results
    JSON that exists, and names the CPU."""
    blocks = re.split(r"\n\s*\n", re.sub(r"```.*?```", "", README, flags=re.S))
    for before, block in zip(["", *blocks], blocks, strict=False):
        if len(DECIMAL.findall(block)) < 3:
            continue
        links = RESULTS_LINK.findall(block) or RESULTS_LINK.findall(before)
        assert links, block[:200]
        assert all(text == href and (REPO / href).is_file() for text, href in links)
        assert CPU.search(block), block[:200]


def test_the_readme_budget_table_quotes_its_json() -> None:
    """The README's K table: h = 0, every target with goals, as budgets.json has it,
    each with the CPU its target name stands for."""
    ran = load("studies/results/budgets.json")
    section = budgets_summary()
    assert "[studies/results/budgets.json](../studies/results/budgets.json)" in section
    quoted = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| cpu-")
    ]
    expected = []
    for target in ran["goals"]:
        t = ran["targets"][target]
        h0 = {h["K"]: h for h in t["by_history"] if h["history"] == 0}
        curve = {r["K"]: r["random"] for r in t["random_curve"]}
        (match,) = [
            m for m in t["random_to_match"] if m["history"] == 0 and m["model_K"] == 2
        ]
        vendor, family_model = target.split("-")[1:3]
        family, model = family_model.split(".")
        cpu = {"amd": "AMD EPYC", "intel": "Intel Xeon"}[vendor]
        expected.append(
            [
                target,
                f"{cpu}, family {family} model {model}",
                " / ".join(f"{h0[k]['model']:.3f}" for k in (1, 2, 4, 8, 16)),
                " / ".join(f"{curve[k]:.3f}" for k in (8, 16)),
                f"{h0[8]['oracle']:.3f}",
                f"{match['random_K']:.1f}",
            ]
        )
    assert quoted == expected


def test_the_readme_real_program_figures_quote_their_json() -> None:
    ran = load("studies/results/real_fleet.json")
    section = budgets_summary()
    para = section[section.index("On 12 real programs") :].split("\n\n", 1)[0]
    para = " ".join(para.split())
    assert (
        "[studies/results/real_fleet.json](../studies/results/real_fleet.json)" in para
    )
    cpu = ran["cpu"]
    assert f"family {cpu['cpu_family']} model {cpu['cpu_model_id']}" in para
    assert f"{cpu['cores']} cores" in para and len(ran["programs"]) == 12
    means = ran["geomean"]
    for name in ("model@2", "model@8", "random@8", "random@16"):
        assert f"{name} {means[name]:.3f}" in para, name
    assert f"fixed set {means['fixed']:.3f}" in para
    kept = [
        p
        for p in ran["programs"]
        if p["options"]["model@8"] != "(default)" and p["model@8"] > 1
    ]
    assert f"model@8 kept a faster config for {len(kept)} of the 12" in para
    worst = min(ran["worst"][s] for s in ran["strategies"] if s.startswith("model"))
    assert f"re-measured at {worst:.3f}x the default's speed" in para
