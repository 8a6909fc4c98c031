"""deploy/postgres/initdb.sh (Compose mounts it; Kubernetes ships it in a ConfigMap)
against a real PostgreSQL: the service's role can run its migrations and store
measurements in its own database, and is no superuser."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import psycopg
import pytest
from deploykit import REPO

from xla_costmodel.harness import LOOPBACK, PostgresServer, postgres_bindir
from xla_costmodel.service.store import MeasurementStore

SCRIPT = REPO / "deploy" / "postgres" / "initdb.sh"
PASSWORD = "role-secret"


@pytest.fixture
def service_role(postgres_server: PostgresServer) -> Iterator[str]:
    """Run the script as the image's entrypoint would; the role's database URL."""
    if postgres_server.proc is None:
        postgres_server.start()
    bindir = postgres_bindir()
    assert bindir is not None
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        "PGHOST": LOOPBACK,
        "PGPORT": str(postgres_server.port),
        "POSTGRES_USER": "postgres",
        "COSTMODEL_DB_PASSWORD": PASSWORD,
    }
    subprocess.run(["sh", str(SCRIPT)], env=env, check=True, capture_output=True)
    try:
        yield f"postgresql://costmodel:{PASSWORD}@{LOOPBACK}:{postgres_server.port}/costmodel"
    finally:
        postgres_server.execute("DROP DATABASE IF EXISTS costmodel")
        postgres_server.execute("DROP ROLE IF EXISTS costmodel")


def test_the_service_role_migrates_its_database_and_is_no_superuser(
    service_role: str, postgres_server: PostgresServer
) -> None:
    store = MeasurementStore.open(service_role)  # migrations create its tables
    try:
        store.ping()
    finally:
        store.close()
    with psycopg.connect(service_role, autocommit=True) as conn:
        role = conn.execute(
            "SELECT rolsuper, rolcreatedb, rolcreaterole FROM pg_roles "
            "WHERE rolname = current_user"
        ).fetchone()
        assert role == (False, False, False)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE DATABASE elsewhere")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT rolpassword FROM pg_authid")
