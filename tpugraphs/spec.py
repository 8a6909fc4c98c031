"""Constants of the TpuGraphs format (see datasets/tpugraphs/FORMAT.md).

What differs between collections (config key and width, normalisers, default config,
metrics, ...) is declared once in ``xla_costmodel.tpugraphs.collections``; ``Collection``
is the static type of their names, which that registry checks it declares exactly.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

Collection = Literal["tile", "layout", "xla_cpu"]
COLLECTION_NAMES: Final[tuple[Collection, ...]] = get_args(Collection)

NODE_FEAT_DIM: Final = 140
TILE_CONFIG_DIM: Final = 24
LAYOUT_CONFIG_DIM: Final = 18
# Official opcode table has ids 1..120 (0 = unknown); embedding tables need 121 rows.
NUM_OPCODES: Final = 121

# Keys of a graph (the part an encoder sees) and the configs/labels of each collection.
GRAPH_KEYS: Final = ("node_feat", "node_opcode", "edge_index")
TILE_KEYS: Final = (
    *GRAPH_KEYS,
    "config_feat",
    "config_runtime",
    "config_runtime_normalizers",
)
LAYOUT_KEYS: Final = (
    *GRAPH_KEYS,
    "node_config_feat",
    "node_config_ids",
    "config_runtime",
    "node_splits",
)
# Files whose configs follow a versioned encoding name it in this unicode scalar
# (``"xla_cpu/1"``); a reader that does not know the spec refuses the file.
CONFIG_SPEC_KEY: Final = "config_spec"
XLA_CPU_KEYS: Final = (
    *GRAPH_KEYS,
    "config_feat",
    "config_runtime",
    "config_runtime_normalizers",
    CONFIG_SPEC_KEY,
)

OPCODES: Final = (
    "unknown",
    "abs",
    "add",
    "add-dependency",
    "after-all",
    "all-reduce",
    "all-to-all",
    "atan2",
    "batch-norm-grad",
    "batch-norm-inference",
    "batch-norm-training",
    "bitcast",
    "bitcast-convert",
    "broadcast",
    "call",
    "ceil",
    "cholesky",
    "clamp",
    "collective-permute",
    "count-leading-zeros",
    "compare",
    "complex",
    "concatenate",
    "conditional",
    "constant",
    "convert",
    "convolution",
    "copy",
    "copy-done",
    "copy-start",
    "cosine",
    "custom-call",
    "divide",
    "domain",
    "dot",
    "dynamic-slice",
    "dynamic-update-slice",
    "exponential",
    "exponential-minus-one",
    "fft",
    "floor",
    "fusion",
    "gather",
    "get-dimension-size",
    "set-dimension-size",
    "get-tuple-element",
    "imag",
    "infeed",
    "iota",
    "is-finite",
    "log",
    "log-plus-one",
    "and",
    "not",
    "or",
    "xor",
    "map",
    "maximum",
    "minimum",
    "multiply",
    "negate",
    "outfeed",
    "pad",
    "parameter",
    "partition-id",
    "popcnt",
    "power",
    "real",
    "recv",
    "recv-done",
    "reduce",
    "reduce-precision",
    "reduce-window",
    "remainder",
    "replica-id",
    "reshape",
    "reverse",
    "rng",
    "rng-get-and-update-state",
    "rng-bit-generator",
    "round-nearest-afz",
    "rsqrt",
    "scatter",
    "select",
    "select-and-scatter",
    "send",
    "send-done",
    "shift-left",
    "shift-right-arithmetic",
    "shift-right-logical",
    "sign",
    "sine",
    "slice",
    "sort",
    "sqrt",
    "subtract",
    "tanh",
    "trace",
    "transpose",
    "triangular-solve",
    "tuple",
    "tuple-select",
    "while",
    "cbrt",
    "all-gather",
    "collective-permute-start",
    "collective-permute-done",
    "logistic",
    "dynamic-reshape",
    "all-reduce-start",
    "all-reduce-done",
    "reduce-scatter",
    "all-gather-start",
    "all-gather-done",
    "opt-barrier",
    "async-start",
    "async-update",
    "async-done",
    "round-nearest-even",
    "stochastic-convert",
    "tan",
)
OPCODE_IDS: Final = {name: i for i, name in enumerate(OPCODES)}
assert len(OPCODES) == NUM_OPCODES
