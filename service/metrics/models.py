"""The models' figures: which versions are loaded (``RegistryEvents``) and what their
stages cost (``StageEvents``)."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from xla_costmodel.runner import ArtifactRunner
from xla_costmodel.service.metrics.buckets import BATCH_BUCKETS, LATENCY_BUCKETS


class RegistryMetrics:
    """``xla_costmodel.service.core.registry.RegistryEvents``."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.model_info = Gauge(
            "costmodel_model_info",
            "Loaded model versions (1 = serves unpinned requests).",
            ["model", "version", "collection"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.reloads = Counter(
            "costmodel_model_reloads",
            "Model loads and reloads by result.",
            ["model", "result"],
            registry=r,
        )
        self._loaded: dict[str, list[tuple[str, str, str]]] = {}

    def model_versions(self, name: str, loaded: Sequence[ArtifactRunner]) -> None:
        for labels in self._loaded.pop(name, []):
            # A worker's file keeps a removed series' value: 0, not a stale 1.
            self.model_info.labels(*labels).set(0)
            self.model_info.remove(*labels)
        self._loaded[name] = [(name, run.version, run.collection) for run in loaded]
        for i, labels in enumerate(self._loaded[name]):
            self.model_info.labels(*labels).set(1 if i == len(loaded) - 1 else 0)

    def model_reload(self, name: str, result: str) -> None:
        self.reloads.labels(name, result).inc()


class StageMetrics:
    """``xla_costmodel.service.core.inference.StageEvents``."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.encode_seconds = Histogram(
            "costmodel_encode_duration_seconds",
            "Encoder run time (one graph).",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.score_seconds = Histogram(
            "costmodel_score_duration_seconds",
            "Scorer run time (one config batch).",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "costmodel_rank_batch_size",
            "Configs per rank request.",
            ["model"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.configs_ranked = Counter(
            "costmodel_configs_ranked", "Configs scored.", ["model"], registry=r
        )

    def encoded(self, model: str, seconds: float) -> None:
        self.encode_seconds.labels(model).observe(seconds)

    def scored(self, model: str, seconds: float, configs: int) -> None:
        self.score_seconds.labels(model).observe(seconds)
        self.batch_size.labels(model).observe(configs)
        self.configs_ranked.labels(model).inc(configs)
