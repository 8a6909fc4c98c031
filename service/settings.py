"""Service settings: one typed object, read from ``COSTMODEL_*`` environment variables.

Tests and the CLI build ``Settings(...)`` directly; nothing reads the environment at
import time.
"""

from __future__ import annotations

import hmac
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from xla_costmodel import shipped_models
from xla_costmodel.service.core.binding import is_loopback

MiB = 1 << 20
# Former settings, now constants next to the code that reads them (docs/settings.md):
# a deployment that still sets one is refused by name rather than started as if the
# value took effect. (pydantic-settings ignores any other unknown COSTMODEL_* name.)
REMOVED = {
    "COSTMODEL_ADAPT_CACHE_ENTRIES": "now CACHE_ENTRIES in service/core/adaptation.py",
    "COSTMODEL_INTER_OP_THREADS": "onnxruntime ignores it: sessions run sequentially",
}


class Settings(BaseSettings):
    """Everything the service can be told; every field is ``COSTMODEL_<NAME>``."""

    model_config = SettingsConfigDict(
        env_prefix="COSTMODEL_",
        protected_namespaces=(),
        extra="forbid",
        # A refused value is never echoed: a database or Redis URL carries a password.
        hide_input_in_errors=True,
    )

    # Where and what to serve.
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    workers: int = Field(
        default=1,
        ge=1,
        description="uvicorn worker processes, each loading every model; metrics "
        "merged across them (docs/serving-workers.md)",
    )
    model_dir: Path = Field(default_factory=shipped_models)
    models: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["tile", "layout", "xla_cpu"], min_length=1
    )
    keep_versions: int = Field(
        default=2,
        ge=1,
        description="versions kept loaded per model, so pinned requests "
        "keep working across a reload (the newest serves unpinned requests)",
    )

    # Embedding cache: the in-process LRU, then Redis when a URL is given.
    redis_url: SecretStr | None = Field(
        default=None, description="redis://[:password@]host:port/db (a secret)"
    )
    redis_timeout_s: float = Field(default=0.1, gt=0, le=5)
    redis_connect_timeout_s: float = Field(default=0.1, gt=0, le=5)
    redis_cooldown_s: float = Field(
        default=2.0, ge=0, description="after a Redis failure, skip Redis for this long"
    )
    cache_ttl_s: int = Field(default=7 * 24 * 3600, ge=1)
    redis_hmac_key: SecretStr | None = Field(
        default=None,
        description="seals every value and message the service keeps in Redis "
        "(HMAC-SHA256), so a Redis client cannot forge them; unset: derived from "
        "the database URL's password, else from the data directory (no secret); "
        "required with Redis when feedback_auth is token (docs/security.md)",
    )
    memory_cache_bytes: int = Field(default=256 * MiB, ge=0)

    # onnxruntime: threads per session (intra-op: sessions run their nodes in
    # sequence, xla_costmodel/runner.py), and how many runs may execute at once.
    intra_op_threads: int = Field(default=1, ge=0)
    inference_workers: int = Field(
        default_factory=lambda: max(1, min(4, os.cpu_count() or 1)), ge=1
    )
    # Small enough that the layout scorer's per-row intermediates stay in cache and
    # the onnxruntime arena stays small: 1,001 nlp configs cost ~20% less server CPU
    # than at 262,144 (bench/README.md); 8,192-65,536 measured the same.
    score_chunk_rows: int = Field(
        default=32_768,
        ge=1,
        description="configs x configurable nodes scored per ONNX run",
    )

    # Request limits.
    max_body_bytes: int = Field(default=64 * MiB, ge=1024)
    max_json_body_bytes: int = Field(
        default=16 * MiB,
        ge=1024,
        description="a JSON body (its numbers decode to ~10x the text in Python "
        "objects); bigger batches go as application/x-npz",
    )
    body_budget_bytes: int = Field(
        default=256 * MiB,
        ge=1024,
        description="request bodies buffered at once per process (declared sizes "
        "reserved before reading); past it 503 overloaded + Retry-After",
    )
    max_decoded_bytes: int = Field(
        default=512 * MiB, ge=1024, description="uncompressed size of an npz body"
    )
    max_nodes: int = Field(default=200_000, ge=2)
    max_edges: int = Field(default=2_000_000, ge=1)
    max_configs: int = Field(default=100_000, ge=1)
    max_inflight: int = Field(default=64, ge=1, description="concurrent /v1 requests")
    body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="a /v1 request body must arrive within this long (else 408), "
        "before the request takes an in-flight slot",
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

    # Measurements (feedback) live in a database: a SQLite file under data_dir unless
    # a URL is given (postgresql://... for several replicas sharing them).
    database_url: SecretStr | None = Field(
        default=None,
        description="sqlite:///PATH, postgresql://... or postgres://... (a secret); "
        "unset: a SQLite file in data_dir",
    )
    data_dir: Path = Path("data")
    # Per-graph adaptation (its constants: service/core/adaptation.py).
    knowledge_refresh_s: float = Field(
        default=1.0,
        gt=0,
        description="how often each process checks a target's measurements for "
        "changes and refits its knowledge (the cross-replica staleness bound)",
    )
    freshness_s: float = Field(
        default=0.1,
        gt=0,
        le=60,
        description="while measurement generations cannot be notified (no Redis with "
        "several processes, or Redis down), a cached one is trusted this long: the "
        "staleness bound of adaptation then (service/core/generations.py)",
    )
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
    shared_ranking_bytes: int = Field(
        default=8 * MiB,
        ge=0,
        description="with Redis: rank batches up to this size are remembered there "
        "too, so feedback by index reaches any worker or replica (costs a Redis SET "
        "per rank request); 0: per process only",
    )

    # Retention (a sweep every retention_sweep_s in each process; 0 = keep forever).
    graph_retention_s: int = Field(
        default=30 * 24 * 3600,
        ge=0,
        description="graphs with no measurement are deleted this long after first seen",
    )
    idempotency_retention_s: int = Field(
        default=7 * 24 * 3600,
        ge=0,
        description="feedback Idempotency-Keys are forgotten after this long",
    )
    retention_sweep_s: float = Field(default=3600.0, gt=0)

    # Who may write measurements (docs/security.md).
    feedback_auth: Literal["auto", "token", "off"] = Field(
        default="auto",
        description="token: feedback needs a writer's bearer token; off: anyone; "
        "auto: token unless the server listens on loopback only",
    )
    feedback_quota_rows: int = Field(
        default=200_000,
        ge=0,
        description="measurements one writer may store per quota window (429 past "
        "it); 0: no quota",
    )
    feedback_quota_window_s: int = Field(default=3600, ge=1)
    feedback_quota_graph_bytes: int = Field(
        default=1024 * MiB,
        ge=0,
        description="compressed bytes of graphs one writer's feedback may archive "
        "per quota window (429 past it); 0: no cap",
    )

    # The fleet's tuning gain (/metrics, GET /v1/targets): read from the database
    # every fleet_refresh_s by each worker, off the request path; at most
    # fleet_max_targets target labels per model, the rest counted as "other".
    fleet_refresh_s: float = Field(default=60.0, gt=0, le=86_400)
    fleet_max_targets: int = Field(default=16, ge=1, le=1000)

    admin_token: SecretStr | None = None
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @classmethod
    def load(cls, secrets_dir: str | None = None, **fields: Any) -> Settings:
        """``fields`` over the environment over, with ``secrets_dir``, one file per
        secret setting (``costmodel_database_url``...: a Kubernetes Secret volume's
        layout; ``service/secrets_dir.py``)."""
        # pydantic-settings' init keyword; its mypy plugin does not know it.
        return cls(**fields, _secrets_dir=secrets_dir)  # type: ignore[call-arg]

    @property
    def feedback_tokens_required(self) -> bool:
        """Whether feedback needs a writer token, judging ``auto`` by ``host``: for
        launchers that bind exactly that host themselves (Ray Serve's proxy). The
        service itself judges ``auto`` by the sockets it listens on
        (``core/auth.py``), whatever ``host`` says."""
        if self.feedback_auth != "auto":
            return self.feedback_auth == "token"
        return not is_loopback(self.host)

    @property
    def redis_seal_key(self) -> bytes:
        """The key of the Redis seals (``core/redis_store.Seal``): every process of
        a deployment derives the same one, a Redis client alone cannot."""
        if self.redis_hmac_key is not None:
            return self.redis_hmac_key.get_secret_value().encode()
        if self._database_password() is not None:
            # The URL's password is a secret every replica shares: the key is a
            # one-way function of the whole URL, so Redis never learns it.
            assert self.database_url is not None
            secret = self.database_url.get_secret_value()
        else:
            secret = str(self.data_dir.resolve())  # one host's workers; no secret
        return hmac.digest(secret.encode(), b"costmodel redis seal v1", "sha256")

    def _database_password(self) -> str | None:
        if self.database_url is None:
            return None
        return urlsplit(self.database_url.get_secret_value()).password or None

    @model_validator(mode="before")
    @classmethod
    def _no_removed_variable(cls, data: Any) -> Any:
        """A ``COSTMODEL_*`` variable that is no longer a setting fails the start,
        named: ignored, the service would run unlike what its operator set."""
        found = sorted(name for name in os.environ if name.upper() in REMOVED)
        if found:
            raise ValueError(
                "; ".join(
                    f"{name} is no longer a setting ({REMOVED[name.upper()]}): unset it"
                    for name in found
                )
            )
        return data

    @model_validator(mode="after")
    def _redis_sealed_with_a_secret(self) -> Settings:
        """Where writers need tokens, forging Redis values must need more than the
        Redis password: a key of its own, or the database's password."""
        if (
            self.feedback_auth == "token"
            and self.redis_url is not None
            and self.redis_hmac_key is None
            and self._database_password() is None
        ):
            raise ValueError(
                "with Redis and COSTMODEL_FEEDBACK_AUTH=token, set "
                "COSTMODEL_REDIS_HMAC_KEY (or a database URL with a password)"
            )
        return self

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

    @field_validator(
        "redis_url", "admin_token", "database_url", "redis_hmac_key", mode="before"
    )
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        """An empty ``COSTMODEL_REDIS_URL`` means no Redis; an empty token, no admin
        API; an empty database URL, the default SQLite file."""
        return None if value == "" else value

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


_DATABASE = re.compile(r"^(sqlite|postgresql|postgres)(\+[a-z0-9]+)?://")
_REDIS = re.compile(r"^(redis|rediss|unix)://")
