"""The HTTP layer's figures (``xla_costmodel.service.middleware``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from xla_costmodel.service.metrics.buckets import LATENCY_BUCKETS


class RequestMetrics:
    def __init__(self, r: CollectorRegistry) -> None:
        self.request_seconds = Histogram(
            "costmodel_request_duration_seconds",
            "Request latency, whole request.",
            ["route", "method", "model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.requests = Counter(
            "costmodel_requests",
            "Responses by route and status.",
            ["route", "method", "status"],
            registry=r,
        )
        self.inflight = Gauge(
            "costmodel_inflight_requests",
            "Requests in progress.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.body_timeouts = Counter(
            "costmodel_body_timeouts",
            "Requests answered 408: the body did not "
            "arrive within COSTMODEL_BODY_TIMEOUT_S (before taking an in-flight slot).",
            registry=r,
        )
