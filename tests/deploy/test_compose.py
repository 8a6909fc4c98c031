"""docker-compose.yml: the same parts as deploy/k8s (several service replicas, Redis,
PostgreSQL), wired to each other and to the code.

Docker is not installed on this machine, so the file is checked as data: parsed,
interpolated as Compose would with an empty environment, and its environment read
by the real ``Settings``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
import yaml
from deploykit import COMPOSE, REPO, check_settings_env, dockerfile, get_paths

from xla_costmodel.harness import free_port, wait_until
from xla_costmodel.service.cli import GRACEFUL_SHUTDOWN_S
from xla_costmodel.service.core.events import CHANNEL

# ${NAME}, ${NAME:-default}, ${NAME-default} and ${NAME:?message}: the file's forms.
VARIABLE = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<default>[^}]*))?\}")
# What an operator sets (compose has no default for any of them).
SECRETS = {
    "COSTMODEL_DB_PASSWORD": "db-secret",
    "COSTMODEL_DB_ADMIN_PASSWORD": "admin-secret",
    "COSTMODEL_REDIS_PASSWORD": "redis-secret",
    "COSTMODEL_REDIS_HMAC_KEY": "seal-secret",
}


class Unset(ValueError):
    """``${NAME:?}`` of a variable that is unset or empty: compose refuses to start."""


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's variable substitution over every string of the parsed file."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        name, op, default = match["name"], match["op"], match["default"] or ""
        if op == ":?" and not env.get(name):
            raise Unset(f"{name}: {default}")
        if op == ":-" and not env.get(name):
            return default
        if op == "-" and name not in env:
            return default
        return env.get(name, "")

    return VARIABLE.sub(substitute, value).replace("$$", "$")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return interpolate(yaml.safe_load(COMPOSE.read_text()), env=SECRETS)  # type: ignore[no-any-return]


def test_no_secret_has_a_default() -> None:
    text = COMPOSE.read_text()
    used = {m["name"]: m["op"] for m in VARIABLE.finditer(text)}
    secrets = {n for n in used if "PASSWORD" in n or "KEY" in n or "TOKEN" in n}
    assert set(SECRETS) <= secrets
    for name in secrets - {"COSTMODEL_ADMIN_TOKEN"}:  # unset: the admin API is off
        forms = {m["op"] for m in VARIABLE.finditer(text) if m["name"] == name}
        assert forms == {":?"}, (name, forms)
        with pytest.raises(Unset, match=name):
            interpolate(yaml.safe_load(text), {**SECRETS, name: ""})


def redis_users(command: list[str]) -> dict[str, list[str]]:
    """``--user NAME RULE...`` of a redis-server command line: name -> rules."""
    users: dict[str, list[str]] = {}
    for i, arg in enumerate(command):
        if arg == "--user":
            rest = command[i + 2 :]
            end = next((k for k, a in enumerate(rest) if a.startswith("--")), len(rest))
            users[command[i + 1]] = rest[:end]
    return users


def test_interpolation_follows_compose_rules() -> None:
    env = {"SET": "x", "EMPTY": ""}
    assert (
        interpolate("${SET:-d}/${EMPTY:-d}/${EMPTY-d}/${UNSET-d}/${UNSET}", env)
        == "x/d//d/"
    )
    assert interpolate("${SET:?m}", env) == "x"
    for name in ("EMPTY", "UNSET"):
        with pytest.raises(Unset):
            interpolate(f"${{{name}:?m}}", env)


def test_every_part_has_a_healthcheck_the_service_waits_for(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    # Parts behind a profile (prometheus) are optional: not started by default.
    default = {name for name, part in services.items() if "profiles" not in part}
    assert default == {"service", "redis", "postgres"}
    for name, service in services.items():
        check = service["healthcheck"]["test"]
        assert check[0] == "CMD" and len(check) > 1, name
    assert services["service"]["depends_on"] == {
        "redis": {"condition": "service_healthy"},
        "postgres": {"condition": "service_healthy"},
    }
    # The service's own check asks /readyz, which the app serves, on the image port.
    probe = " ".join(services["service"]["healthcheck"]["test"])
    url = re.search(r"http://[^'\"]+", probe)
    assert url is not None
    assert urlsplit(url[0]).path in get_paths() and urlsplit(url[0]).path == "/readyz"
    assert urlsplit(url[0]).port == dockerfile().port


def test_replicas_fit_the_published_ports(compose: dict[str, Any]) -> None:
    service = compose["services"]["service"]
    replicas = service["deploy"]["replicas"]
    assert replicas >= 2
    (mapping,) = service["ports"]
    address, host, container = mapping.split(":")
    assert address == "127.0.0.1"  # not on every interface of the host
    assert int(container) == dockerfile().port
    first, _, last = host.partition("-")
    assert int(last or first) - int(first) + 1 >= replicas  # one host port each
    # Docker's SIGKILL must not cut uvicorn's graceful shutdown short.
    assert int(service["stop_grace_period"].removesuffix("s")) > GRACEFUL_SHUTDOWN_S
    assert service["read_only"] is True and "/tmp" in service["tmpfs"]


def test_environment_is_settings_and_points_at_the_parts(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    services = compose["services"]
    env = {**dockerfile().env, **services["service"]["environment"]}
    settings = check_settings_env(monkeypatch, env)
    assert settings.server.admin_token is None  # unset in the shell: admin API off

    assert settings.feedback_tokens_required  # writers need tokens
    assert settings.stores.redis_hmac_key is not None  # Redis values are sealed
    assert settings.stores.redis_url is not None
    redis = urlsplit(settings.stores.redis_url.get_secret_value())
    assert (redis.hostname, redis.port) == ("redis", 6379)
    # Redis has no default user; the URL's user has the URL's password.
    acl = redis_users(services["redis"]["command"])
    assert acl["default"][0] == "off"
    assert redis.username == "costmodel" and redis.password
    assert f">{redis.password}" in acl[redis.username]
    assert services["redis"]["environment"]["REDISCLI_AUTH"] == redis.password
    check = services["redis"]["healthcheck"]["test"]
    assert check[check.index("--user") + 1] == redis.username
    assert settings.stores.database_url is not None
    database = urlsplit(settings.stores.database_url.get_secret_value())
    postgres = services["postgres"]["environment"]
    assert database.scheme == "postgresql" and (database.hostname, database.port) == (
        "postgres",
        5432,
    )
    # Not the superuser: initdb.sh's role, with its own password, owns the database.
    assert database.username != postgres["POSTGRES_USER"]
    assert database.password != postgres["POSTGRES_PASSWORD"]
    assert database.password == postgres["COSTMODEL_DB_PASSWORD"]
    (init,) = [v.split(":") for v in services["postgres"]["volumes"] if "initdb" in v]
    assert init[1].startswith("/docker-entrypoint-initdb.d/")
    script = (REPO / init[0]).read_text()
    role = re.search(r"CREATE ROLE (\w+) LOGIN ([A-Z ]+)", script)
    assert role is not None and role[1] == database.username
    assert "NOSUPERUSER" in role[2] and "NOCREATEROLE" in role[2]
    assert f"CREATE DATABASE {database.path[1:]} OWNER {database.username}" in script


def test_postgres_persists_and_redis_does_not(compose: dict[str, Any]) -> None:
    services = compose["services"]
    volume = services["postgres"]["volumes"][0].split(":")
    assert volume[0] in compose["volumes"]
    assert volume[1] == "/var/lib/postgresql/data"
    command = services["redis"]["command"]
    assert command[command.index("--save") + 1] == ""
    assert command[command.index("--appendonly") + 1] == "no"


def test_the_service_redis_user_reaches_its_keys_and_channel_only(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    """A real redis-server with the file's command line: what the service does works
    (sealed values, the namings set, the invalidation channel), nothing else does."""
    command = compose["services"]["redis"]["command"]
    binary = shutil.which("redis-server")
    assert binary is not None, "redis-server is not installed (`make test`)"
    port = free_port()
    argv = [binary, *command[1:], "--port", str(port), "--bind", "127.0.0.1"]
    server = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL)
    url = compose["services"]["service"]["environment"]["COSTMODEL_REDIS_URL"]
    url = url.replace("@redis:6379", f"@127.0.0.1:{port}")
    try:
        client = redis.Redis.from_url(url)
        assert wait_until(lambda: _pings(client), 10)
        client.set("costmodel:emb:x", b"v")
        client.sadd("costmodel:meta:v2:g:namings", b"n")
        assert client.publish(CHANNEL, b"m") == 0
        pubsub = client.pubsub()
        pubsub.subscribe(CHANNEL)
        pubsub.close()
        for forbidden in (
            lambda: client.get("elsewhere"),
            lambda: client.publish("elsewhere", b"m"),
            lambda: client.flushall(),
            lambda: client.keys("*"),
            lambda: client.config_get("*"),
        ):
            with pytest.raises(redis.exceptions.NoPermissionError):
                forbidden()
        anonymous = redis.Redis(port=port)
        with pytest.raises(redis.exceptions.AuthenticationError):
            anonymous.get("costmodel:emb:x")
        client.close()
        anonymous.close()
    finally:
        server.terminate()
        server.wait(10)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.exceptions.ConnectionError:
        return False
