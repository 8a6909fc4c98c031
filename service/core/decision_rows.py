"""What a decision's body is checked into: a row of the collection, the options the
row stands for, and the figures of the writer's paired runtimes.

    checked_row(spec, value, field, max_nodes) -> row    the shape, finite float32,
                                                          an older spec's upgraded
    options_of(spec, row, field) -> options               derived from the row alone
    decided_figures(spec, row, kept_default, pairs) -> PairedSummary
                                                          the server's figures
    refutation(spec, row, other, refuted) -> (row, reason)  a refutation, checked
    paired_measurements(default, row, pairs, refuted, refuted_pairs)
                                      -> (configs, runtimes) as measurement rows

A decision is a row, nothing else: its compiler options are derived from the row by
the collection (``CollectionSpec.decision_options``: ``xla_cpu`` refuses a row
outside its spec, or one its sampler never draws), never taken from the request;
its speedup and bounds are computed from the paired runtimes it brings
(``tpugraphs.paired``), never claimed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from xla_costmodel.service.core.errors import DecisionUnmeasured, InvalidRequest
from xla_costmodel.service.core.feedback import compact
from xla_costmodel.service.core.inputs import config_array
from xla_costmodel.tpugraphs.collections import CollectionSpec
from xla_costmodel.tpugraphs.paired import PairedSummary, summarize

FLOAT32_MAX = float(np.finfo(np.float32).max)
Options = dict[str, str | bool | int | float]
Pairs = Sequence[Sequence[int]]
# A kept default's figures: no pairs, the default against itself.
_DEFAULT = PairedSummary(
    speedup=1.0, speedup_low=1.0, speedup_high=1.0, p_value=1.0, pairs=0
)


class Refuted(Protocol):
    """What a refutation says (``decisions.Refutation``)."""

    @property
    def reason(self) -> str: ...
    @property
    def paired_runtimes_ns(self) -> Pairs | None: ...


def checked_row(
    spec: CollectionSpec, value: Any, field: str, max_nodes: int
) -> np.ndarray[Any, Any]:
    """One row of ``spec``'s configs ([width], or [NC, width] per node), compacted
    to the smallest exact dtype; ``InvalidRequest`` naming ``field``. A row of an
    older spec (``xla_cpu/1``'s [17]) is upgraded to today's first: it is the same
    config, stored, compared and voted on as today's row."""
    _numbers(value, field)
    arr = config_array(value, field).astype(np.float64)
    widths = {shape[-1] for shape in spec.config_shapes()}  # today's, older specs'
    ndim = 2 if spec.per_node else 1
    if arr.ndim != ndim or arr.shape[-1] not in widths or arr.size == 0:
        want = f"[NC,{spec.width}]" if spec.per_node else f"[{spec.width}]"
        older = "".join(f" (or [{o.width}], {o.name})" for o in spec.older)
        raise InvalidRequest(
            f"{spec.name} configs are one row of shape {want}{older}, got "
            f"{list(arr.shape)}",
            field,
        )
    if spec.per_node and arr.shape[0] > max_nodes:
        raise InvalidRequest(f"more than {max_nodes} rows", field)
    if not np.all(np.abs(arr) <= FLOAT32_MAX):
        raise InvalidRequest("values must be finite float32 numbers", field)
    batch: np.ndarray[Any, Any] = arr[None]
    if arr.shape[-1] != spec.width:  # an older spec's row (float32 holds it exactly)
        batch = spec.upgrade(batch.astype(np.float32))
    row: np.ndarray[Any, Any] = compact(batch)[0]
    return row


def options_of(spec: CollectionSpec, row: np.ndarray[Any, Any], field: str) -> Options:
    """The compiler options ``row`` stands for ({} where rows are not options);
    ``InvalidRequest`` naming ``field`` for a row no tuner could have measured."""
    if spec.decision_options is None:
        return {}
    try:
        return dict(spec.decision_options(row))
    except ValueError as exc:
        raise InvalidRequest(f"not a {spec.name} decision: {exc}", field) from None


def is_default(spec: CollectionSpec, row: np.ndarray[Any, Any]) -> bool:
    """Whether ``row`` is the collection's default row (False where it has none)."""
    default = spec.default_config
    return default is not None and np.array_equal(row, np.asarray(default))


def measured(pairs: Pairs, field: str) -> PairedSummary:
    """The figures of (default_ns, config_ns) pairs (the schema bounds them)."""
    try:
        return summarize(np.asarray(pairs, dtype=np.int64))
    except (ValueError, OverflowError) as exc:
        raise InvalidRequest(str(exc), field) from None


def pair_rows(
    default: np.ndarray[Any, Any] | None, row: np.ndarray[Any, Any], pairs: Pairs
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The pairs as measurement rows: per pair the default's and the row's
    runtime; the row's alone where the collection has no default row (tile and
    layout files mark theirs per program, so the service cannot name it)."""
    arr = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if default is None:
        return np.repeat(row[None], len(arr), axis=0), arr[:, 1].copy()
    configs = np.stack([np.asarray(default, dtype=row.dtype), row])
    return np.tile(configs, (len(arr),) + (1,) * row.ndim), arr.reshape(-1)


def paired_measurements(
    default: Sequence[float] | None,
    row: np.ndarray[Any, Any],
    pairs: Pairs | None,
    refuted: np.ndarray[Any, Any] | None,
    refuted_pairs: Pairs | None,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """A decision's pairs and its refutation's, as measurement rows in ``row``'s
    dtype ([0, ...] when it brings none)."""
    base = None if default is None else np.asarray(default)
    parts = [] if pairs is None else [pair_rows(base, row, pairs)]
    if refuted is not None and refuted_pairs is not None:
        parts.append(pair_rows(base, refuted, refuted_pairs))
    if not parts:
        return np.zeros((0, *row.shape), row.dtype), np.zeros(0, np.int64)
    configs = np.concatenate([np.asarray(c, np.float64) for c, _ in parts])
    runtimes = np.concatenate([r for _, r in parts])
    return configs.astype(row.dtype), runtimes


def decided_figures(
    spec: CollectionSpec,
    row: np.ndarray[Any, Any],
    kept_default: bool,
    pairs: Pairs | None,
) -> PairedSummary:
    """The server's figures: from the pairs, or the default's own for a kept
    default (which is the collection's default row, and brings no pairs)."""
    if kept_default:
        if spec.default_config is not None and not is_default(spec, row):
            raise InvalidRequest(
                "kept_default: config must be the collection's default row",
                "config",
            )
        if pairs is not None:
            raise InvalidRequest(
                "kept_default: the default is not timed against itself (send "
                "no paired_runtimes_ns)",
                "paired_runtimes_ns",
            )
        return _DEFAULT
    if is_default(spec, row):
        raise InvalidRequest(
            "config is the default row: send kept_default true", "kept_default"
        )
    if pairs is None:
        raise DecisionUnmeasured(
            "a decision for a row other than the default needs the writer's "
            "paired_runtimes_ns ([default_ns, config_ns] timed together); "
            "claimed speedups are not taken",
            "paired_runtimes_ns",
        )
    return measured(pairs, "paired_runtimes_ns")


def refutation(
    spec: CollectionSpec,
    row: np.ndarray[Any, Any],
    other: np.ndarray[Any, Any],
    refuted: Refuted,
) -> tuple[np.ndarray[Any, Any], str]:
    """The refuted row ``other`` (its shape checked already), checked: a row of
    the spec other than the decision's and the default; "slower" with pairs that
    show it slower, "outputs" bare."""
    options_of(spec, other, "refuted.config")
    if is_default(spec, other) or np.array_equal(other, row):
        raise InvalidRequest(
            "refuted: a row other than the default and the decision's own",
            "refuted.config",
        )
    pairs = refuted.paired_runtimes_ns
    if refuted.reason == "outputs":
        if pairs is not None:
            raise InvalidRequest(
                "refuted: an outputs report brings no pairs",
                "refuted.paired_runtimes_ns",
            )
    elif pairs is None:
        raise DecisionUnmeasured(
            "refuted as slower: send the paired runtimes that show it",
            "refuted.paired_runtimes_ns",
        )
    elif not measured(pairs, "refuted.paired_runtimes_ns").slower:
        raise InvalidRequest(
            "refuted as slower, but the pairs do not show it slower (the upper "
            "bound of the median speedup is not below 1)",
            "refuted",
        )
    return other.astype(row.dtype), refuted.reason


def _numbers(value: Any, field: str) -> None:
    """Numbers, or lists of numbers: JSON true/false are not config values."""
    rows = value if value and isinstance(value[0], list) else [value]
    for row in rows:
        if not isinstance(row, list) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in row
        ):
            raise InvalidRequest("expected numbers (a row, or rows of one)", field)
