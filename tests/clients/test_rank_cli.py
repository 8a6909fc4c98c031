"""``costmodel rank`` against a real service: HLO files, TpuGraphs npz, FILE.py:NAME,
sampled option sets and config files; the ranking and what shaped it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from xla_costmodel import cli
from xla_costmodel.harness import ServiceServer, free_port
from xla_costmodel.tpugraphs import machine, xla_cpu, xla_cpu2

REPO = Path(__file__).resolve().parents[2]
MLP_HLO = "hlo/jax/mlp_infer.pre.hlo.txt"
FUSION_191 = (
    "pb/official_testdata/op_tuning_data.converted/fusion.191_4ae805e53b8d2b8a.npz"
)
SHAPED_BY = (
    "adapted",
    "target_programs",
    "target_measurements",
    "knowledge_weight",
    "prior_weight",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {
        "COSTMODEL_MODEL_DIR": str(REPO / "models" / "artifacts"),
        "COSTMODEL_MODELS": "tile,xla_cpu",
        "COSTMODEL_LOG_LEVEL": "WARNING",
        "COSTMODEL_DATA_DIR": str(tmp_path_factory.mktemp("data")),
    }
    with ServiceServer(tmp_path_factory.mktemp("rank-cli"), env) as s:
        yield s.url


def rank(*args: str) -> Result:
    return CliRunner().invoke(cli.build_app(), ["rank", *args], terminal_width=200)


def answer(*args: str) -> dict[str, Any]:
    ran = rank(*args, "--json")
    assert ran.exit_code == 0, ran.output
    parsed: dict[str, Any] = json.loads(ran.stdout)
    return parsed


def test_sampled_option_sets_for_an_hlo_file(server: str, shared_data: Path) -> None:
    got = answer(str(shared_data / MLP_HLO), "--server", server, "--configs", "16")
    assert got["model"] == "xla_cpu" and got["model_version"] == "1"
    assert got["configs"] == 16 and sorted(got["ranking"]) == list(range(16))
    assert [e["index"] for e in got["top_k"]] == got["ranking"][:5]
    # xla_cpu/2 rows, for this CPU: none this jaxlib rejects (all, on 0.10.2); the
    # MLP has no while loop: no row differs from another only in the loop threshold
    sampled = xla_cpu2.sample_for_program(16, seed=0, loops=False)
    assert (sampled[:, xla_cpu2.V1_WIDTH] == 1).all()
    for entry in got["top_k"]:
        assert entry["config"] == xla_cpu2.to_options(sampled[entry["index"]]).flat()
        assert isinstance(entry["score"], float)
    # What shaped it: no measurement of this graph, the shipped seeds of the target.
    assert got["adapted"] == 0 and got["target_programs"] > 0
    assert set(SHAPED_BY) <= set(got) and got["ranking_id"]


def test_the_table_and_what_shaped_it(server: str, shared_data: Path) -> None:
    ran = rank(str(shared_data / MLP_HLO), "--server", server, "--top-k", "3")
    assert ran.exit_code == 0, ran.output
    assert "top 3 of 64" in ran.stdout  # 64 sampled by default
    last = ran.stdout.strip().splitlines()[-1]
    assert last.startswith("shaped by: adapted 0, target_programs "), last
    assert "prior_weight" in last
    assert f"(target: {machine.target()}, this machine's; cache: " in last


def test_an_hlo_program_is_ranked_for_this_machines_cpu(
    server: str, shared_data: Path
) -> None:
    """xla_cpu, HLO from here: the default target is this CPU's (as `tune` measures
    it), the same ranking as naming it, and not the model's own default target."""
    here = machine.target()
    hlo = (str(shared_data / MLP_HLO), "--server", server, "--configs", "16")
    got = answer(*hlo)
    assert got["target"] == here
    named = answer(*hlo, "--target", here)
    shaped = ("ranking", *SHAPED_BY)
    assert [got[k] for k in shaped] == [named[k] for k in shaped]
    manifest = REPO / "models" / "artifacts" / "xla_cpu" / "1" / "manifest.json"
    models_own = json.loads(manifest.read_text())["target"]
    if here != models_own:  # the knowledge differs per CPU: the target reached it
        own = answer(*hlo, "--target", models_own)
        assert [got[k] for k in SHAPED_BY] != [own[k] for k in SHAPED_BY]


def test_an_npz_ranks_its_own_configs(server: str, shared_data: Path) -> None:
    got = answer(str(shared_data / FUSION_191), "--server", server, "--model", "tile")
    assert got["model"] == "tile" and got["configs"] == 579
    assert all(e["config"] is None for e in got["top_k"])
    assert got["target"] is None  # another machine's graph: the model's target


def test_a_configs_file_and_a_target(
    server: str, shared_data: Path, tmp_path: Path
) -> None:
    # xla_cpu/1 option dicts (an older file): still read, as the same configs
    options = [xla_cpu.to_options(row) for row in xla_cpu.sample(6, seed=3)]
    configs = tmp_path / "configs.json"
    configs.write_text(json.dumps(options))
    got = answer(
        str(shared_data / MLP_HLO),
        *("--server", server, "--configs", str(configs)),
        *("--target", "cpu-amd-26.2-avx512", "--top-k", "6"),
    )
    assert got["target"] == "cpu-amd-26.2-avx512" and got["configs"] == 6
    assert [e["config"] for e in got["top_k"]] == [options[i] for i in got["ranking"]]


def test_a_python_program_is_lowered_to_pre_optimization_hlo(server: str) -> None:
    pytest.importorskip("jax")
    spec = str(REPO / "examples" / "rank_own_hlo.py") + ":program"
    got = answer(spec, "--server", server, "--configs", "8", "--top-k", "2")
    assert got["configs"] == 8 and len(got["top_k"]) == 2


def test_refusals_name_the_problem(shared_data: Path) -> None:
    hlo = str(shared_data / MLP_HLO)
    ran = rank(hlo, "--model", "tile")  # nothing to sample for tile
    assert ran.exit_code == 2 and "--configs FILE" in ran.output
    ran = rank("nowhere.hlo.txt")
    assert ran.exit_code == 2 and "no such file" in ran.output
    gone = f"http://127.0.0.1:{free_port()}"
    ran = rank(hlo, "--server", gone, "--configs", "4")
    assert ran.exit_code == 1 and ran.stdout == "", ran.output
    assert ran.stderr == (
        f"error: no costmodel service at {gone}: start one with `costmodel serve`\n"
    )
