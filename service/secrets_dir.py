"""Secrets for processes the service starts elsewhere (Ray Serve replicas), as files.

    split_secrets(env) -> (plain, secrets)     COSTMODEL_* variables, secrets apart
    secrets_dir(secrets) -> Path               a private directory, one file each
    SECRETS_DIR_ENV                            where a replica finds that directory

Ray's runtime environment is visible to anyone who can reach the cluster's dashboard
or state API (``ray list actors --detail`` prints every actor's env vars), so the
database URL (with its password), the Redis URL and the admin token do not travel
there: the driver writes each to a file (mode 0600 in a 0700 directory) and the
replicas read them with pydantic-settings' ``secrets_dir`` (the layout of a
Kubernetes Secret mounted as files). Only the directory's path is in the runtime
environment. The trade-off: the files must be readable where the replicas run, so
this covers a local Ray (``costmodel serve --ray``); on a multi-node cluster mount
the same files on every node (a Kubernetes Secret volume) and set
``COSTMODEL_SECRETS_DIR`` in the Serve config (docs/security.md).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

SECRETS_DIR_ENV = "COSTMODEL_SECRETS_DIR"
# Settings fields that are secrets (SecretStr): their variables never go to Ray.
SECRET_ENV = frozenset(
    {
        "COSTMODEL_ADMIN_TOKEN",
        "COSTMODEL_DATABASE_URL",
        "COSTMODEL_REDIS_URL",
        "COSTMODEL_REDIS_HMAC_KEY",
    }
)


def split_secrets(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(plain variables, secret ones) of ``env``; empty secrets are dropped."""
    plain = {k: v for k, v in env.items() if k.upper() not in SECRET_ENV}
    secrets = {k: v for k, v in env.items() if k.upper() in SECRET_ENV and v}
    return plain, secrets


def secrets_dir(secrets: Mapping[str, str]) -> Path:
    """A new private directory holding ``<name lowercased>`` = value per secret."""
    path = Path(tempfile.mkdtemp(prefix="costmodel-secrets-"))  # mode 0700
    for name, value in secrets.items():
        file = path / name.lower()
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(value)
    return path


def replica_secrets_dir(env: Mapping[str, str]) -> str | None:
    """The directory a replica reads its secrets from (None: none given)."""
    return env.get(SECRETS_DIR_ENV) or None
