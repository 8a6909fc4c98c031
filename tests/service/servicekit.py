"""Helpers for the service tests: payload builders, settings, the service's command
line (the processes themselves are ``xla_costmodel.harness``'s)."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from xla_costmodel.harness import SERVE_MODULE
from xla_costmodel.service.settings import Settings
from xla_costmodel.tpugraphs.arrays import Sample

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "models" / "artifacts"
UNET = "npz/layout/xla/default/valid/unet_3d.4x4.bf16.npz"
SMALL_LAYOUT = "npz/layout/xla/default/test/cd708819d3f5103afd6460b15e74eaf3.npz"
TILE = "pb/official_testdata/op_tuning_data.converted/fusion.191_4ae805e53b8d2b8a.npz"
ADMIN = "s3cret"


def make_settings(model_dir: Path, **overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "model_dir": model_dir,
        "data_dir": model_dir.parent / "data",  # a SQLite file per test
        "admin_token": ADMIN,
        "redis_cooldown_s": 0.0,
        # In process nothing listens, so ``auto`` would require tokens (core/auth.py).
        "feedback_auth": "off",
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


# The service as the tests start it: its own command line (``costmodel serve``).
SERVE = [sys.executable, "-m", SERVE_MODULE]


def metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(name):
            series, value = line.rsplit(" ", 1)
            got = series[len(name) :].strip("{}")
            if ",".join(sorted(got.split(","))) == want:
                return float(value)
    return 0.0
