"""Settings from the environment, and the ``serve`` command that uses them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
import uvicorn
from fastapi import FastAPI
from pydantic import ValidationError

from xla_costmodel.service import cli
from xla_costmodel.service.settings import Settings


def test_defaults() -> None:
    s = Settings()
    assert s.models == ["tile", "layout", "xla_cpu"]
    # the shipped artifacts wherever the package is, not relative to the working dir
    assert (
        s.model_dir.resolve()
        == Path(__file__).resolve().parents[2] / "models" / "artifacts"
    )
    assert (s.model_dir / "tile" / "1" / "manifest.json").is_file()
    assert s.redis_url is None and s.admin_token is None
    assert s.redis_timeout_s <= 0.25 and s.cache_ttl_s > 0


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSTMODEL_MODELS", "tile")
    monkeypatch.setenv("COSTMODEL_REDIS_URL", "redis://cache:6379/1")
    monkeypatch.setenv("COSTMODEL_ADMIN_TOKEN", "t0k")
    monkeypatch.setenv("COSTMODEL_MAX_CONFIGS", "7")
    s = Settings()
    assert s.models == ["tile"] and s.redis_url is not None
    assert s.redis_url.get_secret_value() == "redis://cache:6379/1"
    assert s.admin_token is not None and s.admin_token.get_secret_value() == "t0k"
    assert s.max_configs == 7
    assert "t0k" not in repr(s)
    monkeypatch.setenv("COSTMODEL_REDIS_URL", "")  # empty = no Redis (compose default)
    monkeypatch.setenv("COSTMODEL_ADMIN_TOKEN", "")
    s = Settings()
    assert s.redis_url is None and s.admin_token is None


def test_a_variable_that_is_no_longer_a_setting_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COSTMODEL_NO_SUCH_SETTING", "1")
    Settings()  # an unknown name is ignored (pydantic-settings)...
    monkeypatch.setenv("COSTMODEL_ADAPT_CACHE_ENTRIES", "64")
    with pytest.raises(ValidationError, match="COSTMODEL_ADAPT_CACHE_ENTRIES is no"):
        Settings()  # ...one that was a setting is not: its value would not apply
    with pytest.raises(typer.BadParameter, match="COSTMODEL_ADAPT_CACHE_ENTRIES"):
        cli.serve()  # the start fails before anything is served


@pytest.mark.parametrize(
    "bad",
    [
        {"models": "tile,tile"},
        {"models": ""},
        {"redis_url": "http://x"},
        {"max_configs": 0},
        {"database_url": "mysql://writer:hunter2@db/costmodel"},
        {"feedback_auth": "maybe"},
    ],
)
def test_invalid_settings_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError) as refused:
        Settings(**bad)
    assert "hunter2" not in str(refused.value)  # a refused value is never echoed


def test_database_urls_are_secrets_and_postgres_is_accepted() -> None:
    for url in (
        "postgres://u:pw@db/x",
        "postgresql+psycopg://u:pw@db/x",
        "sqlite:///data/x.db",
    ):
        s = Settings(database_url=url)
        assert s.database_url is not None and s.database_url.get_secret_value() == url
        assert "pw@" not in repr(s) and "pw@" not in str(s.model_dump())


@pytest.mark.parametrize(
    ("host", "mode", "required"),
    [
        ("127.0.0.1", "auto", False),
        ("localhost", "auto", False),
        ("::1", "auto", False),
        ("127.0.0.2", "auto", False),
        ("0.0.0.0", "auto", True),
        ("10.0.0.5", "auto", True),
        ("costmodel.internal", "auto", True),
        ("127.0.0.1", "token", True),
        ("0.0.0.0", "off", False),
    ],
)
def test_auto_requires_tokens_unless_the_server_listens_on_loopback_only(
    host: str, mode: str, required: bool
) -> None:
    settings = Settings(host=host, feedback_auth=mode)  # type: ignore[arg-type]
    assert settings.feedback_tokens_required is required


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
    assert settings.model_dir == tmp_path
    assert settings.redis_url.get_secret_value() == "redis://cli:6379/0"
    with pytest.raises(typer.BadParameter):
        cli.serve(redis_url="http://nope")


def test_redis_with_tokens_needs_a_seal_key_a_redis_client_does_not_hold() -> None:
    redis = {"redis_url": "redis://:pw@cache:6379/0", "feedback_auth": "token"}
    with pytest.raises(ValidationError, match="COSTMODEL_REDIS_HMAC_KEY"):
        Settings(**redis)  # type: ignore[arg-type]
    keyed = Settings(**redis, redis_hmac_key="seal-xyzzy")  # type: ignore[arg-type]
    derived = Settings(
        **redis,  # type: ignore[arg-type]
        database_url="postgresql://costmodel:db-pw@pg/costmodel",
    )
    other = Settings(
        **redis,  # type: ignore[arg-type]
        database_url="postgresql://costmodel:other@pg/costmodel",
    )
    keys = {s.redis_seal_key for s in (keyed, derived, other)}
    assert len(keys) == 3 and all(len(k) >= 1 for k in keys)
    assert b"db-pw" not in derived.redis_seal_key  # derived, one-way
    assert "seal-xyzzy" not in repr(keyed)  # a secret
