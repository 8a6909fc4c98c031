"""Service settings: one typed object, read from ``COSTMODEL_*`` environment variables.

Tests and the CLI build ``Settings(...)`` directly; nothing reads the environment at
import time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

MiB = 1 << 20
# The shipped artifacts: models/artifacts in the repository, and in an installed
# package (they are its package data), wherever it was installed.
SHIPPED_MODELS = Path(__file__).resolve().parents[1] / "models" / "artifacts"


class Settings(BaseSettings):
    """Everything the service can be told; every field is ``COSTMODEL_<NAME>``."""

    model_config = SettingsConfigDict(
        env_prefix="COSTMODEL_", protected_namespaces=(), extra="forbid"
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
    model_dir: Path = SHIPPED_MODELS
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
    redis_url: str | None = Field(default=None, pattern=r"^(redis|rediss|unix)://")
    redis_timeout_s: float = Field(default=0.1, gt=0, le=5)
    redis_connect_timeout_s: float = Field(default=0.1, gt=0, le=5)
    redis_cooldown_s: float = Field(
        default=2.0, ge=0, description="after a Redis failure, skip Redis for this long"
    )
    cache_ttl_s: int = Field(default=7 * 24 * 3600, ge=1)
    memory_cache_bytes: int = Field(default=256 * MiB, ge=0)

    # onnxruntime: threads per session, and how many runs may execute at once.
    intra_op_threads: int = Field(default=1, ge=0)
    inter_op_threads: int = Field(default=1, ge=0)
    inference_workers: int = Field(
        default_factory=lambda: max(1, min(4, os.cpu_count() or 1)), ge=1
    )
    # Small enough that the layout scorer's per-row intermediates stay in cache and
    # the onnxruntime arena stays small: 1,001 nlp configs cost ~20% less server CPU
    # than at 262,144 (benchmarks/README.md); 8,192-65,536 measured the same.
    score_chunk_rows: int = Field(
        default=32_768,
        ge=1,
        description="configs x configurable nodes scored per ONNX run",
    )

    # Request limits.
    max_body_bytes: int = Field(default=64 * MiB, ge=1024)
    max_decoded_bytes: int = Field(
        default=512 * MiB, ge=1024, description="uncompressed size of an npz body"
    )
    max_nodes: int = Field(default=200_000, ge=2)
    max_edges: int = Field(default=2_000_000, ge=1)
    max_configs: int = Field(default=100_000, ge=1)
    max_inflight: int = Field(default=64, ge=1, description="concurrent /v1 requests")

    # Measurements (feedback) live in a database: a SQLite file under data_dir unless
    # a URL is given (postgresql://... for several replicas sharing them).
    database_url: str | None = Field(
        default=None,
        pattern=r"^(sqlite|postgresql)(\+[a-z0-9]+)?://",
        description="unset: a SQLite file in data_dir",
    )
    data_dir: Path = Path("data")
    # Per-graph adaptation: from this many distinct measured configs of a graph (on
    # the request's target) on, rank scores combine the model with a per-graph fit.
    adapt_min_measurements: int = Field(default=4, ge=1)
    adapt_max_measurements: int = Field(
        default=4000, ge=1, description="newest measurements a per-graph fit uses"
    )
    adapt_cache_entries: int = Field(
        default=1024, ge=0, description="fitted per-graph models kept per process"
    )
    recent_rankings_bytes: int = Field(
        default=64 * MiB,
        ge=0,
        description="per process, best-effort: the configs and scores of recent rank "
        "requests, so feedback may name configs by index",
    )
    shared_ranking_bytes: int = Field(
        default=8 * MiB,
        ge=0,
        description="with Redis: rank batches up to this size are remembered there "
        "too, so feedback by index reaches any worker or replica (costs a Redis SET "
        "per rank request); 0: per process only",
    )

    admin_token: SecretStr | None = None
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("redis_url", "admin_token", "database_url", mode="before")
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
