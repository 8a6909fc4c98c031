"""Secrets for Ray replicas travel as private files, never as runtime-env variables."""

from __future__ import annotations

import stat

from xla_costmodel.service.secrets_dir import (
    SECRETS_DIR_ENV,
    replica_secrets_dir,
    secrets_dir,
    split_secrets,
)
from xla_costmodel.service.settings import Settings

ENV = {
    "COSTMODEL_MODELS": "tile",
    "COSTMODEL_DATABASE_URL": "postgresql://writer:hunter2@db:5432/costmodel",
    "COSTMODEL_REDIS_URL": "redis://:r3dis-pw@cache:6379/0",
    "COSTMODEL_ADMIN_TOKEN": "adm1n",
}


def test_secrets_leave_the_variables_and_come_back_from_files() -> None:
    plain, secret = split_secrets(ENV)
    assert plain == {"COSTMODEL_MODELS": "tile"}
    assert not any(v in str(plain) for v in ("hunter2", "r3dis-pw", "adm1n"))
    path = secrets_dir(secret)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
        for file in path.iterdir():
            assert stat.S_IMODE(file.stat().st_mode) == 0o600
        env = {**plain, SECRETS_DIR_ENV: str(path)}
        settings = Settings.load(replica_secrets_dir(env), models=["tile"])
        stores, token = settings.stores, settings.server.admin_token
        assert stores.database_url is not None and stores.redis_url is not None
        assert token is not None
        assert stores.database_url.get_secret_value() == ENV["COSTMODEL_DATABASE_URL"]
        assert stores.redis_url.get_secret_value() == ENV["COSTMODEL_REDIS_URL"]
        assert token.get_secret_value() == "adm1n"
    finally:
        for file in path.iterdir():
            file.unlink()
        path.rmdir()
    assert replica_secrets_dir({}) is None
