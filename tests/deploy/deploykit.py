"""What the deployment files must agree with: the Dockerfile, the app's routes and
the ``Settings`` fields, read from the code itself rather than restated in tests."""

from __future__ import annotations

import json
import os
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from xla_costmodel.service.app import create_app
from xla_costmodel.service.settings import Settings

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
COMPOSE = REPO / "docker-compose.yml"
ENV_PREFIX = "COSTMODEL_"


@dataclass(frozen=True)
class Image:
    """Facts of the image the repository's Dockerfile builds."""

    port: int  # EXPOSE
    cmd_port: int  # --port of the CMD
    uid: int  # the user it runs as
    env: dict[str, str]  # ENV


def dockerfile() -> Image:
    text = (REPO / "Dockerfile").read_text()
    joined = re.sub(r"\\\n\s*", " ", text)  # continuation lines
    env: dict[str, str] = {}
    for line in joined.splitlines():
        if line.startswith("ENV "):
            for pair in shlex.split(line[4:]):
                key, _, value = pair.partition("=")
                env[key] = value
    cmd = re.search(r"^CMD (\[.*\])$", joined, re.M)
    expose = re.search(r"^EXPOSE (\d+)$", joined, re.M)
    uid = re.search(r"useradd .*--uid (\d+)", joined)
    assert cmd and expose and uid, "Dockerfile lacks CMD, EXPOSE or useradd --uid"
    args = json.loads(cmd.group(1))  # exec form: a JSON array
    return Image(
        port=int(expose.group(1)),
        cmd_port=int(args[args.index("--port") + 1]),
        uid=int(uid.group(1)),
        env=env,
    )


def get_paths() -> set[str]:
    """Paths the app answers GET on, from its real route table (no server).

    Read through the OpenAPI document FastAPI builds from the routes: since FastAPI
    0.16x, ``app.routes`` holds included routers as opaque entries, not their routes.
    """
    schema = create_app(Settings()).openapi()
    return {path for path, methods in schema["paths"].items() if "get" in methods}


def package_version() -> str:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return str(project["version"])


def check_settings_env(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> Settings:
    """``Settings`` as a process with exactly ``env`` would read them.

    Every ``COSTMODEL_`` name must be a field (pydantic-settings would ignore a
    typo silently), and the values must pass the fields' validation.
    """
    fields = set(Settings.flat_fields())
    unknown = [
        name
        for name in env
        if name.startswith(ENV_PREFIX) and name[len(ENV_PREFIX) :].lower() not in fields
    ]
    assert not unknown, f"not Settings fields: {unknown}"
    for name in [n for n in os.environ if n.startswith(ENV_PREFIX)]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings()
