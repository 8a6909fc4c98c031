"""Service settings: one typed object of groups, one per component
(``setting_groups.py``), read from ``COSTMODEL_*`` environment variables.

    Settings()                        the environment over the defaults
    Settings(max_nodes=5, ...)        flat names over the environment (tests, the CLI)
    Settings.load(secrets_dir, ...)   and one file per secret (``costmodel_redis_url``)
    settings.limits                   one component's group: ``Limits(**...model_dump())``

Each setting has one flat name, ``COSTMODEL_<NAME>`` in the environment and
``<name>=`` in code, whichever group holds it: the names are the operators' contract
(deploy/, docs/settings.md), the groups are the code's. ``developer`` holds the knobs
tests shrink, which operators leave alone. Former settings, now constants next to the
code that reads them, are refused by name (``REMOVED``). Nothing reads the environment
at import time, and nothing here imports the core.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from typing import Any, cast

from pydantic import BaseModel, Field, create_model, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
    SettingsConfigDict,
)

from xla_costmodel.service.loopback import is_loopback
from xla_costmodel.service.setting_groups import (
    CacheSettings,
    DeveloperSettings,
    FeedbackSettings,
    LimitSettings,
    RefreshSettings,
    RequestSettings,
    ScoringSettings,
    ServerSettings,
    StoreSettings,
)

ENV_PREFIX = "COSTMODEL_"
# Former settings, now constants next to the code that reads them (docs/settings.md):
# a deployment that still sets one is refused by name rather than started as if the
# value took effect. (pydantic-settings ignores any other unknown COSTMODEL_* name.)
REMOVED = {
    "COSTMODEL_ADAPT_CACHE_ENTRIES": "now CACHE_ENTRIES in service/core/adaptation.py",
    "COSTMODEL_INTER_OP_THREADS": "onnxruntime ignores it: sessions run sequentially",
    "COSTMODEL_INTRA_OP_THREADS": "one thread per session: xla_costmodel/runner.py",
    "COSTMODEL_KEEP_VERSIONS": "now KEEP_VERSIONS in service/app.py",
    "COSTMODEL_REDIS_CONNECT_TIMEOUT_S": "COSTMODEL_REDIS_TIMEOUT_S bounds both",
    "COSTMODEL_CACHE_TTL_S": "now CACHE_TTL_S in service/app.py",
    "COSTMODEL_MAX_JSON_BODY_BYTES": "a default of service/middleware.py",
    "COSTMODEL_BODY_BUDGET_BYTES": "a default of service/middleware.py",
    "COSTMODEL_MAX_EDGES": "now MAX_EDGES in service/core/inputs.py",
    "COSTMODEL_SCORE_CHUNK_ROWS": "now SCORE_CHUNK_ROWS in service/core/build.py",
    "COSTMODEL_SHARED_RANKING_BYTES": "now SHARED_RANKING_BYTES in service/core/build.py",
    "COSTMODEL_IDEMPOTENCY_RETENTION_S": "now IDEMPOTENCY_RETENTION_S in service/core/build.py",
    "COSTMODEL_FEEDBACK_QUOTA_WINDOW_S": "now QUOTA_WINDOW_S in service/core/build.py",
    "COSTMODEL_FEEDBACK_QUOTA_GRAPH_BYTES": "now QUOTA_GRAPH_BYTES in service/core/build.py",
}


class Settings(BaseSettings):
    """Everything the service can be told, by component; every setting is
    ``COSTMODEL_<NAME>`` whichever its group (``Settings.flat_fields()``)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="forbid",
        # A refused value is never echoed: a database or Redis URL carries a password.
        hide_input_in_errors=True,
    )

    server: ServerSettings = Field(default_factory=ServerSettings)
    scoring: ScoringSettings = Field(default_factory=ScoringSettings)
    requests: RequestSettings = Field(default_factory=RequestSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    stores: StoreSettings = Field(default_factory=StoreSettings)
    caches: CacheSettings = Field(default_factory=CacheSettings)
    feedback: FeedbackSettings = Field(default_factory=FeedbackSettings)
    refresh: RefreshSettings = Field(default_factory=RefreshSettings)
    developer: DeveloperSettings = Field(default_factory=DeveloperSettings)

    @classmethod
    def load(cls, secrets_dir: str | None = None, **fields: Any) -> Settings:
        """``fields`` (flat names) over the environment over, with ``secrets_dir``,
        one file per secret setting (``costmodel_database_url``...: a Kubernetes
        Secret volume's layout; ``service/secrets_dir.py``)."""
        # pydantic-settings' init keyword; its mypy plugin does not know it.
        return cls(**fields, _secrets_dir=secrets_dir)  # type: ignore[call-arg]

    @classmethod
    def flat_fields(cls) -> dict[str, FieldInfo]:
        """Every setting by its flat name (``COSTMODEL_<NAME>``), whichever its group."""
        return {
            name: info
            for group in _groups().values()
            for name, info in group.model_fields.items()
        }

    @property
    def feedback_tokens_required(self) -> bool:
        """Whether feedback needs a writer token, judging ``auto`` by ``host``: for
        launchers that bind exactly that host themselves (Ray Serve's proxy). The
        service itself judges ``auto`` by the sockets it listens on
        (``core/auth.py``), whatever ``host`` says."""
        if self.feedback.feedback_auth != "auto":
            return self.feedback.feedback_auth == "token"
        return not is_loopback(self.server.host)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The variables, then the secret files, read by flat name into the groups."""
        names = _variables()
        secrets = cast(SecretsSettingsSource, file_secret_settings).secrets_dir
        return (
            init_settings,
            _Grouped(settings_cls, EnvSettingsSource(names)),
            _Grouped(settings_cls, SecretsSettingsSource(names, secrets_dir=secrets)),
        )

    @model_validator(mode="before")
    @classmethod
    def _group_flat_names(cls, data: Any) -> Any:
        """``Settings(max_nodes=5)`` as ``limits={"max_nodes": 5}`` over what the
        environment gave that group. A name that is no longer a setting, set in the
        environment or given here, fails the start, named: ignored, the service
        would run unlike what its operator set."""
        if not isinstance(data, dict):
            return data
        _refuse_removed([*os.environ, *(ENV_PREFIX + str(name) for name in data)])
        data = dict(data)
        group_of = _group_of()
        for name in [key for key in data if key in group_of]:
            group = group_of[name]
            given = data.get(group, {})
            if isinstance(given, BaseModel):
                given = given.model_dump()
            data[group] = {**given, name: data.pop(name)}
        return data

    @model_validator(mode="after")
    def _redis_sealed_with_a_secret(self) -> Settings:
        """Where writers need tokens, forging Redis values must need more than the
        Redis password: a key of its own, or the database's password."""
        stores = self.stores
        if (
            self.feedback.feedback_auth == "token"
            and stores.redis_url is not None
            and stores.redis_hmac_key is None
            and stores.database_password() is None
        ):
            raise ValueError(
                "with Redis and COSTMODEL_FEEDBACK_AUTH=token, set "
                "COSTMODEL_REDIS_HMAC_KEY (or a database URL with a password)"
            )
        return self


class _Grouped(PydanticBaseSettingsSource):
    """What ``flat`` (pydantic-settings' own source) reads by flat name, each value
    under its name's group."""

    def __init__(
        self, settings_cls: type[BaseSettings], flat: PydanticBaseSettingsSource
    ) -> None:
        super().__init__(settings_cls)
        self.flat = flat

    def get_field_value(
        self, field: FieldInfo, field_name: str
    ) -> tuple[Any, str, bool]:
        return None, field_name, False  # not asked: ``__call__`` reads ``flat`` whole

    def __call__(self) -> dict[str, Any]:
        grouped: dict[str, dict[str, Any]] = {}
        for name, value in self.flat().items():
            grouped.setdefault(_group_of()[name], {})[name] = value
        return grouped


class _Variables(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, protected_namespaces=())


@functools.cache
def _groups() -> dict[str, type[BaseModel]]:
    """``Settings``' groups by field name."""
    fields = Settings.model_fields.items()
    return {name: cast(type[BaseModel], info.annotation) for name, info in fields}


@functools.cache
def _group_of() -> dict[str, str]:
    """Each flat name's group."""
    return {
        name: group for group, model in _groups().items() for name in model.model_fields
    }


@functools.cache
def _variables() -> type[BaseSettings]:
    """Every flat name, as text, for pydantic-settings to read from the environment
    and the secret files; never built: the groups validate what it read."""
    names: dict[str, Any] = {name: (str | None, None) for name in _group_of()}
    return create_model("Variables", __base__=_Variables, **names)


def _refuse_removed(names: Iterable[str]) -> None:
    found = sorted({name.upper() for name in names} & REMOVED.keys())
    if found:
        raise ValueError(
            "; ".join(
                f"{name} is no longer a setting ({REMOVED[name]}): unset it"
                for name in found
            )
        )
