"""Settings from the environment, in groups by component, and the ``serve`` command
that uses them."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
import typer
import uvicorn
from fastapi import FastAPI
from pydantic import ValidationError

from xla_costmodel.service import cli
from xla_costmodel.service.core.inputs import Limits
from xla_costmodel.service.middleware import RequestContext
from xla_costmodel.service.setting_groups import (
    DeveloperSettings,
    LimitSettings,
    RequestSettings,
)
from xla_costmodel.service.settings import REMOVED, Settings

REPO = Path(__file__).resolve().parents[2]
SERVICE = REPO / "service"
MAX_OPERATOR_SETTINGS = 30  # issue 36: what an operator has to read stays small


def test_defaults() -> None:
    s = Settings()
    assert s.scoring.models == ["tile", "layout", "xla_cpu"]
    # the shipped artifacts wherever the package is, not relative to the working dir
    assert s.scoring.model_dir.resolve() == REPO / "models" / "artifacts"
    assert (s.scoring.model_dir / "tile" / "1" / "manifest.json").is_file()
    assert s.stores.redis_url is None and s.server.admin_token is None
    assert s.developer.redis_timeout_s <= 0.25


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSTMODEL_MODELS", "tile")
    monkeypatch.setenv("COSTMODEL_REDIS_URL", "redis://cache:6379/1")
    monkeypatch.setenv("COSTMODEL_ADMIN_TOKEN", "t0k")
    monkeypatch.setenv("COSTMODEL_MAX_CONFIGS", "7")
    s = Settings()
    redis, token = s.stores.redis_url, s.server.admin_token
    assert s.scoring.models == ["tile"] and redis is not None
    assert redis.get_secret_value() == "redis://cache:6379/1"
    assert token is not None and token.get_secret_value() == "t0k"
    assert s.limits.max_configs == 7
    assert "t0k" not in repr(s)
    monkeypatch.setenv("COSTMODEL_REDIS_URL", "")  # empty = no Redis (compose default)
    monkeypatch.setenv("COSTMODEL_ADMIN_TOKEN", "")
    s = Settings()
    assert s.stores.redis_url is None and s.server.admin_token is None


def test_flat_names_reach_their_group_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COSTMODEL_MAX_NODES", "7")
    monkeypatch.setenv("COSTMODEL_MAX_CONFIGS", "9")
    s = Settings(max_nodes=5, freshness_s=1.5)
    assert (s.limits.max_nodes, s.limits.max_configs) == (5, 9)
    assert s.developer.freshness_s == 1.5
    given = Settings(limits=LimitSettings(max_nodes=3), max_configs=4)
    assert (given.limits.max_nodes, given.limits.max_configs) == (3, 4)
    with pytest.raises(ValidationError, match="no_such_setting"):
        Settings(no_such_setting=1)  # a typo in code is an error, not ignored


def test_every_setting_has_one_flat_name() -> None:
    groups = [info.annotation for info in Settings.model_fields.values()]
    names = [n for group in groups for n in group.model_fields]  # type: ignore[union-attr]
    assert len(names) == len(set(names)) == len(Settings.flat_fields())


def test_components_are_built_from_their_group_by_keyword() -> None:
    limits = Limits(**LimitSettings().model_dump())
    assert {f.name for f in dataclasses.fields(Limits)} - {"max_edges"} == set(
        LimitSettings.model_fields
    )
    assert limits.max_edges > limits.max_nodes
    parameters = inspect.signature(RequestContext).parameters
    assert set(RequestSettings.model_fields) <= set(parameters)


@pytest.mark.parametrize("name", sorted(REMOVED))
def test_a_variable_that_is_no_longer_a_setting_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv("COSTMODEL_NO_SUCH_SETTING", "1")
    Settings()  # an unknown name is ignored (pydantic-settings)...
    monkeypatch.setenv(name, "64")
    with pytest.raises(ValidationError, match=f"{name} is no longer a setting"):
        Settings()  # ...one that was a setting is not: its value would not apply
    with pytest.raises(typer.BadParameter, match=name):
        cli.serve()  # the start fails before anything is served


def test_a_former_setting_given_by_name_is_refused_by_name() -> None:
    """What a Ray Serve config's ``env`` turns into (``ray_app.ReplicaArgs``)."""
    with pytest.raises(ValidationError, match="COSTMODEL_SCORE_CHUNK_ROWS is no"):
        Settings(score_chunk_rows=1024)


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
        database = s.stores.database_url
        assert database is not None and database.get_secret_value() == url
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
    settings = Settings(host=host, feedback_auth=mode)
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
    assert settings.scoring.model_dir == tmp_path
    assert settings.stores.redis_url.get_secret_value() == "redis://cli:6379/0"
    with pytest.raises(typer.BadParameter):
        cli.serve(redis_url="http://nope")


def test_redis_with_tokens_needs_a_seal_key_a_redis_client_does_not_hold() -> None:
    redis = {"redis_url": "redis://:pw@cache:6379/0", "feedback_auth": "token"}
    with pytest.raises(ValidationError, match="COSTMODEL_REDIS_HMAC_KEY"):
        Settings(**redis)
    keyed = Settings(**redis, redis_hmac_key="seal-xyzzy")
    derived = Settings(
        **redis, database_url="postgresql://costmodel:db-pw@pg/costmodel"
    )
    other = Settings(**redis, database_url="postgresql://costmodel:other@pg/costmodel")
    keys = {s.stores.redis_seal_key for s in (keyed, derived, other)}
    assert len(keys) == 3 and all(len(k) >= 1 for k in keys)
    assert b"db-pw" not in derived.stores.redis_seal_key  # derived, one-way
    assert "seal-xyzzy" not in repr(keyed)  # a secret


def _variables(text: str) -> list[str]:
    """The ``COSTMODEL_*`` names a markdown table's rows are about, in order."""
    return re.findall(r"^\|(?: [\w() ]+ \|)? `(COSTMODEL_[A-Z_]+)` \|", text, re.M)


def test_the_settings_page_lists_the_operator_settings_apart() -> None:
    page = (REPO / "docs" / "settings.md").read_text()
    operator = page.split("## Operator settings")[1].split("\n## ")[0]
    developer = page.split("## Developer settings")[1].split("\n## ")[0]
    listed = _variables(operator)
    developers = set(DeveloperSettings.model_fields)
    fields = {n for n in Settings.flat_fields() if n not in developers}
    assert sorted(listed) == sorted(
        [*(f"COSTMODEL_{n.upper()}" for n in fields), "COSTMODEL_SECRETS_DIR"]
    )
    assert len(listed) <= MAX_OPERATOR_SETTINGS
    assert sorted(_variables(developer)) == sorted(
        f"COSTMODEL_{n.upper()}" for n in developers
    )
    assert [name for name in REMOVED if f"`{name}`" not in page] == []


def test_the_settings_import_nothing_of_the_core() -> None:
    for module in ("settings.py", "setting_groups.py"):
        tree = ast.parse((SERVICE / module).read_text())
        imported = [
            node.module or ""
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
        ]
        assert not [m for m in imported if ".service.core" in m], module
