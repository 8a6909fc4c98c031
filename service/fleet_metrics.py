"""The fleet's tuning gain as Prometheus metric families, read from the latest snapshot.

    costmodel_fleet_graphs{model,target}               graphs with measurements
    costmodel_fleet_graphs_tuned{model,target}         ... whose default was measured
    costmodel_fleet_measurements{model,target}         measurements stored
    costmodel_fleet_gain{model,target}                 geometric mean of default/best
    costmodel_fleet_best_over_default{model,target}    per tuned graph (gauge histogram)
    costmodel_fleet_refresh_timestamp_seconds          when the snapshot was taken

A custom collector rather than prometheus_client's Gauge and Histogram objects: the
figures are a snapshot of the shared database, not counts this process made, so they
must be neither summed over workers (multiprocess mode) nor accumulated from one
refresh to the next. Every worker and replica answers the same values; aggregate them
with ``max``, not ``sum`` (deploy/monitoring/rules.yml does). The histogram is a
*gauge* histogram (OpenMetrics ``gaugehistogram``; ``_bucket``, ``_gcount``,
``_gsum`` in the Prometheus text format): a graph moves between buckets as its best
runtime improves, so read it with ``histogram_quantile`` directly, never over
``rate()``. Targets are capped per model (``FleetSnapshot.capped``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import (
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from xla_costmodel.service.core.fleet import FleetSnapshot, TargetFleet

# best / default: 1 is no gain; tuning on XLA:CPU found 0.46-0.99 (README).
RATIO_BUCKETS = (0.25, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 0.99, 1.0)
LABELS = ["model", "target"]


class FleetCollector(Collector):
    def __init__(self, snapshot: Callable[[], FleetSnapshot], max_targets: int) -> None:
        self.snapshot = snapshot
        self.max_targets = max_targets

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot()
        targets = snap.capped(self.max_targets)
        families: dict[str, tuple[str, Callable[[TargetFleet], float]]] = {
            "graphs": ("Graphs with measurements.", lambda t: t.programs),
            "graphs_tuned": (
                "Graphs whose default config was measured (they count in the gain).",
                lambda t: t.tuned,
            ),
            "measurements": ("Measurements stored.", lambda t: t.measurements),
        }
        for name, (doc, value) in families.items():
            family = GaugeMetricFamily(f"costmodel_fleet_{name}", doc, labels=LABELS)
            for t in targets:
                family.add_metric([t.model, t.target], value(t))
            yield family
        gain = GaugeMetricFamily(
            "costmodel_fleet_gain",
            "Geometric mean over tuned graphs of default runtime / best runtime.",
            labels=LABELS,
        )
        ratios = GaugeHistogramMetricFamily(
            "costmodel_fleet_best_over_default",
            "Best measured runtime / the default config's, one per tuned graph.",
            labels=LABELS,
        )
        for t in targets:
            if t.gain is not None:
                gain.add_metric([t.model, t.target], t.gain)
            buckets = [
                (_le(bound), float(sum(r <= bound for r in t.ratios)))
                for bound in RATIO_BUCKETS
            ]
            buckets.append(("+Inf", float(len(t.ratios))))
            ratios.add_metric([t.model, t.target], buckets, gsum_value=sum(t.ratios))
        yield gain
        yield ratios
        if snap.as_of is not None:
            yield GaugeMetricFamily(
                "costmodel_fleet_refresh_timestamp_seconds",
                "When the fleet figures were last read from the database.",
                value=snap.as_of.timestamp(),
            )


def _le(bound: float) -> str:
    return repr(float(bound))
