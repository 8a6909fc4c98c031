"""What a client hears of a model that failed to load (issue 27): that it failed,
never the artifact's path or onnxruntime's words (the log keeps them)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from servicekit import AppClient

pytestmark = pytest.mark.anyio


async def test_readiness_and_503s_name_no_path_or_runtime_text(
    make_client: AppClient, model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (model_dir / "tile" / "1" / "encoder.onnx").write_bytes(b"not an onnx graph")
    caplog.set_level(logging.ERROR)
    client = await make_client()
    answers = [
        await client.get("/readyz"),
        await client.get("/v2/health/ready"),
        await client.post(
            "/v1/rank",
            json={"model": "tile", "graph_id": "a" * 64, "configs": [[0] * 24]},
        ),
    ]
    for r in answers:
        assert r.status_code == 503 and r.json()["error"]["code"] == "not_ready"
        text = r.text.lower()
        assert "failed to load" in text, r.text
        for leak in (str(model_dir).lower(), "onnx", "encoder", "/tmp"):
            assert leak not in text, (leak, r.text)
    assert str(model_dir) in caplog.text  # the operator still has the cause
