"""The settings' groups, one per component: what ``Settings`` (``settings.py``) holds
and each component is built from.

    ServerSettings     how ``costmodel serve`` runs          settings.server
    ScoringSettings    the models and their inference pool   settings.scoring
    RequestSettings    ``middleware.RequestContext``         settings.requests
    LimitSettings      ``core/inputs.Limits``                settings.limits
    StoreSettings      the database and Redis                settings.stores
    CacheSettings      per-process memory                    settings.caches
    FeedbackSettings   who may write, how much, how long     settings.feedback
    RefreshSettings    the periodic refreshes                settings.refresh
    DeveloperSettings  knobs tests shrink                    settings.developer

A field's name is its setting's flat name (``COSTMODEL_<NAME>``), unique across the
groups. Frozen: a component's settings do not change under it.
"""

from __future__ import annotations

import hmac
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
)

from xla_costmodel import shipped_models

MiB = 1 << 20
FeedbackAuthMode = Literal["auto", "token", "off"]
# An empty variable is no value: no Redis, no admin API, the default database.
Secret = Annotated[SecretStr | None, BeforeValidator(lambda v: None if v == "" else v)]
_DATABASE = re.compile(r"^(sqlite|postgresql|postgres)(\+[a-z0-9]+)?://")
_REDIS = re.compile(r"^(redis|rediss|unix)://")


class _Group(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", protected_namespaces=(), hide_input_in_errors=True
    )


class ServerSettings(_Group):
    """How ``costmodel serve`` runs: where it listens, its processes, its logs, and
    the admin API's token (unset: the admin API is off)."""

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    workers: int = Field(
        default=1,
        ge=1,
        description="uvicorn worker processes, each loading every model; metrics "
        "merged across them (docs/serving-workers.md)",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    admin_token: Secret = None


class ScoringSettings(_Group):
    """The models served (``core/registry.py``) and how many of their runs execute at
    once (``core/inference.py``)."""

    model_dir: Path = Field(default_factory=shipped_models)
    models: list[str] = Field(
        default_factory=lambda: ["tile", "layout", "xla_cpu"], min_length=1
    )
    inference_workers: int = Field(
        default_factory=lambda: max(1, min(4, os.cpu_count() or 1)), ge=1
    )

    @field_validator("models", mode="before")
    @classmethod
    def _split_models(cls, value: Any) -> Any:
        """Accept ``tile,layout`` (env) as well as a list (code)."""
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("models")
    @classmethod
    def _unique_names(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("model names must be unique")
        for name in value:
            if not name.replace("_", "").replace("-", "").isalnum():
                raise ValueError(f"invalid model name {name!r}")
        return value


class RequestSettings(_Group):
    """Every ``/v1`` request's body and slot: ``middleware.RequestContext``, built
    from this group by keyword (its body budget and JSON bound are its defaults)."""

    max_inflight: int = Field(default=64, ge=1, description="concurrent /v1 requests")
    max_body_bytes: int = Field(default=64 * MiB, ge=1024)
    body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="a /v1 request body must arrive within this long (else 408), "
        "before the request takes an in-flight slot",
    )


class LimitSettings(_Group):
    """What one request may ask: ``core/inputs.Limits``, built from this group by
    keyword."""

    max_nodes: int = Field(default=200_000, ge=2)
    max_configs: int = Field(default=100_000, ge=1)
    max_decoded_bytes: int = Field(
        default=512 * MiB, ge=1024, description="uncompressed size of an npz body"
    )
    max_hlo_bytes: int = Field(
        default=16 * MiB, ge=1024, description="HLO text, refused before featurizing"
    )
    max_hlo_instructions: int = Field(
        default=200_000,
        ge=1,
        description="HLO instructions, counted before featurizing",
    )
    # The float32 copy the scorer reads (int8 layout configs grow 4x): with the body
    # and its decoded arrays, what one request may hold; see deploy/k8s (tested).
    max_scored_bytes: int = Field(
        default=256 * MiB, ge=1024, description="float32 config bytes per request"
    )


class StoreSettings(_Group):
    """Where state lives: the measurement database (a SQLite file under ``data_dir``
    unless a URL is given: ``postgresql://...`` for several replicas) and Redis (the
    embeddings' second tier, the invalidations' channel), with the key that seals
    what the service keeps there."""

    database_url: Secret = Field(
        default=None,
        description="sqlite:///PATH, postgresql://... or postgres://... (a secret); "
        "unset: a SQLite file in data_dir",
    )
    data_dir: Path = Path("data")
    redis_url: Secret = Field(
        default=None, description="redis://[:password@]host:port/db (a secret)"
    )
    redis_hmac_key: Secret = Field(
        default=None,
        description="seals every value and message the service keeps in Redis "
        "(HMAC-SHA256), so a Redis client cannot forge them; unset: derived from "
        "the database URL's password, else from the data directory (no secret); "
        "required with Redis when feedback_auth is token (docs/security.md)",
    )

    @property
    def redis_seal_key(self) -> bytes:
        """The key of the Redis seals (``core/redis_store.Seal``): every process of
        a deployment derives the same one, a Redis client alone cannot."""
        if self.redis_hmac_key is not None:
            return self.redis_hmac_key.get_secret_value().encode()
        if self.database_password() is not None:
            # The URL's password is a secret every replica shares: the key is a
            # one-way function of the whole URL, so Redis never learns it.
            assert self.database_url is not None
            secret = self.database_url.get_secret_value()
        else:
            secret = str(self.data_dir.resolve())  # one host's workers; no secret
        return hmac.digest(secret.encode(), b"costmodel redis seal v1", "sha256")

    def database_password(self) -> str | None:
        if self.database_url is None:
            return None
        return urlsplit(self.database_url.get_secret_value()).password or None

    @field_validator("database_url")
    @classmethod
    def _database_scheme(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not _DATABASE.match(value.get_secret_value()):
            raise ValueError("expected sqlite:///PATH, postgresql://... or postgres://")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not _REDIS.match(value.get_secret_value()):
            raise ValueError("expected redis://, rediss:// or unix://")
        return value


class CacheSettings(_Group):
    """Per-process memory: the embedding LRU (``core/cache.py``, Redis behind it) and
    the recent rankings that feedback may name by index (``core/recent.py``)."""

    memory_cache_bytes: int = Field(default=256 * MiB, ge=0)
    recent_rankings_bytes: int = Field(
        default=64 * MiB,
        ge=0,
        description="per process, best-effort: the configs and scores of recent rank "
        "requests, so feedback may name configs by index",
    )
    recent_client_bytes: int = Field(
        default=16 * MiB,
        ge=1,
        description="of recent_rankings_bytes, what one client (its writer token, "
        "else its address) may hold: its churn evicts its own rankings, not others'",
    )


class FeedbackSettings(_Group):
    """Who may write measurements (``core/auth.py``, docs/security.md), how many, and
    how long a graph nobody measured is kept (``core/retention.py``)."""

    feedback_auth: FeedbackAuthMode = Field(
        default="auto",
        description="token: feedback needs a writer's bearer token; off: anyone; "
        "auto: token unless the server listens on loopback only",
    )
    feedback_quota_rows: int = Field(
        default=200_000,
        ge=0,
        description="measurements one writer may store per hour, with at most 1 GiB "
        "of archived graphs (429 past either); 0: no quota",
    )
    graph_retention_s: int = Field(
        default=30 * 24 * 3600,
        ge=0,
        description="graphs with no measurement are deleted this long after first "
        "seen; 0: kept",
    )


class RefreshSettings(_Group):
    """The periodic refreshes, off the request path: each target's knowledge
    (``core/knowledge.py``) and the fleet's tuning gain (/metrics, GET /v1/targets)."""

    knowledge_refresh_s: float = Field(
        default=1.0,
        gt=0,
        description="how often each process checks a target's measurements for "
        "changes and refits its knowledge (the cross-replica staleness bound)",
    )
    fleet_refresh_s: float = Field(default=60.0, gt=0, le=86_400)


class DeveloperSettings(_Group):
    """Knobs that tests shrink or stretch and the benchmark sets (it runs the service
    as a process), not operator settings: docs/settings.md lists them apart. Each
    would be a constructor parameter with its default if every test built these
    components itself rather than through ``COSTMODEL_*`` variables."""

    freshness_s: float = Field(
        default=0.1,
        gt=0,
        le=60,
        description="while invalidations cannot be heard (no Redis with several "
        "processes, or Redis down), a cached generation is trusted this long "
        "(core/event_bus.py)",
    )
    redis_timeout_s: float = Field(
        default=0.1, gt=0, le=5, description="Redis socket and connect timeouts"
    )
    redis_cooldown_s: float = Field(
        default=2.0, ge=0, description="after a Redis failure, skip Redis for this long"
    )
    retention_sweep_s: float = Field(default=3600.0, gt=0)
    fleet_max_targets: int = Field(default=16, ge=1, le=1000)
