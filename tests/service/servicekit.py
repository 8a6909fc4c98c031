"""Helpers for the service tests: payload builders, artifact copies, a service process."""

from __future__ import annotations

import io
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from xla_costmodel.service.settings import Settings
from xla_costmodel.tpugraphs.arrays import Sample

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "models" / "artifacts"
UNET = "npz/layout/xla/default/valid/unet_3d.4x4.bf16.npz"
SMALL_LAYOUT = "npz/layout/xla/default/test/cd708819d3f5103afd6460b15e74eaf3.npz"
TILE = "pb/official_testdata/op_tuning_data.converted/fusion.191_4ae805e53b8d2b8a.npz"
ADMIN = "s3cret"


def set_version(artifact: Path, version: str) -> None:
    path = artifact / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["version"] = version
    path.write_text(json.dumps(manifest))


def add_version(
    model_dir: Path, name: str, version: str, corrupt: str | None = None
) -> Path:
    """Copy version 1 as ``version``; ``corrupt`` = "truncate" or "sha256"."""
    target = model_dir / name / version
    shutil.copytree(model_dir / name / "1", target)
    set_version(target, version)
    if corrupt == "truncate":
        onnx = target / "encoder.onnx"
        onnx.write_bytes(onnx.read_bytes()[:1000])
    elif corrupt == "sha256":
        path = target / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest["scorer"]["sha256"] = "0" * 64
        path.write_text(json.dumps(manifest))
    return target


def make_settings(model_dir: Path, **overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "model_dir": model_dir,
        "data_dir": model_dir.parent / "data",  # a SQLite file per test
        "admin_token": ADMIN,
        "redis_cooldown_s": 0.0,
    }
    return Settings(**{**base, **overrides})


AppClient = Callable[..., Any]


def graph_json(sample: Sample) -> dict[str, Any]:
    g = sample.graph
    body = {
        "node_feat": g.node_feat.tolist(),
        "node_opcode": g.node_opcode.tolist(),
        "edge_index": g.edge_index.tolist(),
    }
    if g.node_config_ids is not None:
        body["node_config_ids"] = g.node_config_ids.tolist()
    return body


def program(seed: int, nodes: int = 10) -> dict[str, Any]:
    """A small graph as JSON (any graph will do for an xla_cpu model)."""
    rng = np.random.default_rng(seed)
    return {
        "node_feat": rng.random((nodes, 140), dtype=np.float32).tolist(),
        "node_opcode": rng.integers(1, 120, nodes).tolist(),
        "edge_index": [[i, i - 1] for i in range(1, nodes)],
    }


def npz_bytes(**arrays: Any) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def graph_npz(sample: Sample, **extra: Any) -> bytes:
    g = sample.graph
    arrays = {
        "node_feat": g.node_feat,
        "node_opcode": g.node_opcode,
        "edge_index": g.edge_index,
    }
    if g.node_config_ids is not None:
        arrays["node_config_ids"] = g.node_config_ids
    return npz_bytes(**arrays, **extra)


NPZ = {"content-type": "application/x-npz"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServiceProcess:
    """``python -m xla_costmodel.service.cli`` on a free port; ``stop``/``start`` restart it."""

    def __init__(
        self,
        port: int,
        env: dict[str, str],
        log: Path,
        argv: list[str] | None = None,  # default: python -m xla_costmodel.service.cli
    ) -> None:
        self.port = port
        self.env = env
        self.log = log
        self.argv = argv or [sys.executable, "-m", "xla_costmodel.service.cli"]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*self.argv, "--port", str(self.port)],
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(
                    f"service exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}"
                )
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        pytest.fail(
            f"service not ready after {timeout}s: {self.log.read_text()[-2000:]}"
        )

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=15)
            self.proc = None


def metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(name):
            series, value = line.rsplit(" ", 1)
            got = series[len(name) :].strip("{}")
            if ",".join(sorted(got.split(","))) == want:
                return float(value)
    return 0.0
