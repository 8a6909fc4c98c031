"""Settings from the environment, and the ``serve`` command that uses them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
import uvicorn
from fastapi import FastAPI

from xla_costmodel.service import cli
from xla_costmodel.service.settings import Settings


def test_defaults() -> None:
    s = Settings()
    assert s.models == ["tile", "layout", "xla_cpu"]
    # the shipped artifacts wherever the package is, not relative to the working dir
    assert s.model_dir == Path(__file__).resolve().parents[2] / "models" / "artifacts"
    assert (s.model_dir / "tile" / "1" / "manifest.json").is_file()
    assert s.redis_url is None and s.admin_token is None
    assert s.redis_timeout_s <= 0.25 and s.cache_ttl_s > 0


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSTMODEL_MODELS", "tile")
    monkeypatch.setenv("COSTMODEL_REDIS_URL", "redis://cache:6379/1")
    monkeypatch.setenv("COSTMODEL_ADMIN_TOKEN", "t0k")
    monkeypatch.setenv("COSTMODEL_MAX_CONFIGS", "7")
    s = Settings()
    assert s.models == ["tile"] and s.redis_url == "redis://cache:6379/1"
    assert s.admin_token is not None and s.admin_token.get_secret_value() == "t0k"
    assert s.max_configs == 7
    assert "t0k" not in repr(s)
    monkeypatch.setenv("COSTMODEL_REDIS_URL", "")  # empty = no Redis (compose default)
    monkeypatch.setenv("COSTMODEL_ADMIN_TOKEN", "")
    s = Settings()
    assert s.redis_url is None and s.admin_token is None


@pytest.mark.parametrize(
    "bad",
    [
        {"models": "tile,tile"},
        {"models": ""},
        {"redis_url": "http://x"},
        {"max_configs": 0},
    ],
)
def test_invalid_settings_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Settings(**bad)


def test_serve_passes_options_over_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}

    def fake_run(app: FastAPI, **kwargs: Any) -> None:
        seen.update(kwargs, settings=app.state.settings)

    monkeypatch.setattr(uvicorn, "run", fake_run)
    monkeypatch.setenv("COSTMODEL_PORT", "9999")
    monkeypatch.setenv("COSTMODEL_REDIS_URL", "redis://env:6379/0")
    cli.serve(host="0.0.0.0", model_dir=tmp_path, redis_url="redis://cli:6379/0")
    settings = seen["settings"]
    assert (seen["host"], seen["port"]) == ("0.0.0.0", 9999)
    assert settings.model_dir == tmp_path and settings.redis_url == "redis://cli:6379/0"
    with pytest.raises(typer.BadParameter):
        cli.serve(redis_url="http://nope")
