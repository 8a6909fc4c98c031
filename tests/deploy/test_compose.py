"""docker-compose.yml: the same parts as deploy/k8s (several service replicas, Redis,
PostgreSQL), wired to each other and to the code.

Docker is not installed on this machine, so the file is checked as data: parsed,
interpolated as Compose would with an empty environment, and its environment read
by the real ``Settings``.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from deploykit import COMPOSE, check_settings_env, dockerfile, get_paths

from xla_costmodel.service.cli import GRACEFUL_SHUTDOWN_S

# ${NAME}, ${NAME:-default} and ${NAME-default}: the forms the file uses.
VARIABLE = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:?-)(?P<default>[^}]*))?\}")


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
        if op == ":-" and not env.get(name):
            return default
        if op == "-" and name not in env:
            return default
        return env.get(name, "")

    return VARIABLE.sub(substitute, value).replace("$$", "$")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return interpolate(yaml.safe_load(COMPOSE.read_text()), env={})  # type: ignore[no-any-return]


def test_interpolation_follows_compose_rules() -> None:
    env = {"SET": "x", "EMPTY": ""}
    assert (
        interpolate("${SET:-d}/${EMPTY:-d}/${EMPTY-d}/${UNSET-d}/${UNSET}", env)
        == "x/d//d/"
    )


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
    assert settings.admin_token is None  # unset in the shell: admin API off

    assert settings.feedback_tokens_required  # writers need tokens
    assert settings.redis_url is not None
    redis = urlsplit(settings.redis_url.get_secret_value())
    assert (redis.hostname, redis.port) == ("redis", 6379)
    command = services["redis"]["command"]  # Redis asks for the URL's password
    assert redis.password and command[command.index("--requirepass") + 1] == (
        redis.password
    )
    assert services["redis"]["environment"]["REDISCLI_AUTH"] == redis.password
    assert settings.database_url is not None
    database = urlsplit(settings.database_url.get_secret_value())
    postgres = services["postgres"]["environment"]
    assert database.scheme == "postgresql" and (database.hostname, database.port) == (
        "postgres",
        5432,
    )
    assert database.username == postgres["POSTGRES_USER"]
    assert database.password == postgres["POSTGRES_PASSWORD"]
    assert database.path == "/" + postgres["POSTGRES_DB"]


def test_postgres_persists_and_redis_does_not(compose: dict[str, Any]) -> None:
    services = compose["services"]
    volume = services["postgres"]["volumes"][0].split(":")
    assert volume[0] in compose["volumes"]
    assert volume[1] == "/var/lib/postgresql/data"
    command = services["redis"]["command"]
    assert command[command.index("--save") + 1] == ""
    assert command[command.index("--appendonly") + 1] == "no"
