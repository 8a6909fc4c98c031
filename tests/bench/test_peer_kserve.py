"""KServe as the benchmark's peer, for real: its model server process from
``.venv-kserve`` with the shipped tile scorer, asked over v2 REST with binary tensors.

kserve 0.21 cannot live in our environment (it pins protobuf < 7), so it has its own
virtualenv, made by ``make kserve-venv`` or the first ``costmodel bench`` (about a
minute; ``make test`` makes it). Without it these tests fail and say why.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xla_costmodel.bench import peer_kserve
from xla_costmodel.bench.data import tile_workload
from xla_costmodel.bench.inproc import open_runner

ARTIFACT = Path(__file__).resolve().parents[2] / "models" / "artifacts" / "tile" / "1"


@pytest.fixture(scope="module")
def kserve_python() -> Path:
    if not peer_kserve.kserve_ready():
        # `make test` builds it first; like redis-server, a missing peer is a failure.
        pytest.fail(
            f"no KServe virtualenv at {peer_kserve.VENV}: run `make kserve-venv`"
        )
    return peer_kserve.venv_python()


def test_kserve_scores_equal_onnxruntime_and_binds_loopback_only(
    tmp_path: Path, shared_data: Path, kserve_python: Path
) -> None:
    workload = tile_workload(pool=300, root=shared_data)
    runner = open_runner(ARTIFACT, 1)
    embedding = runner.encode(workload.main.graph)
    configs = workload.main_configs
    expected = runner.score(embedding, configs)
    with peer_kserve.KServeServer(
        tmp_path, kserve_python, ARTIFACT / "scorer.onnx"
    ) as server:
        ranker = peer_kserve.KServeRanker(server.url)
        try:
            got = ranker.scores(embedding["graph_embedding"], configs)
            ranking = ranker.rank(embedding["graph_embedding"], configs[:1])
            ranker.live()
        finally:
            ranker.close()
        listening = _listening_ports(server.pid)
    assert got.dtype == np.float32 and np.array_equal(got, expected)
    assert ranking.tolist() == [0]
    assert listening and all(host == "127.0.0.1" for host, _ in listening), listening
    assert not server.running


def _listening_ports(pid: int) -> set[tuple[str, int]]:
    """(address, port) of the TCP sockets the process listens on, from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                addr, port = fields[1].split(":")
                found.add((_ip(addr), int(port, 16)))
    return found


def _ip(hex_addr: str) -> str:
    if len(hex_addr) != 8:
        return hex_addr  # IPv6: never loopback-v4, fails the assertion as it should
    return ".".join(str(int(hex_addr[i : i + 2], 16)) for i in (6, 4, 2, 0))
