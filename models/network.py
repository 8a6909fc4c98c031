"""The networks: a graph encoder (once per graph) and a scorer (per batch of configs).

No I/O here. Normalisation statistics live in buffers, so the exported ONNX graphs take
raw TpuGraphs values. Every op in a scorer acts on one config at a time (no batch
statistics), so a config's score never depends on the other configs in its batch.

The forward passes are written for what the exported graphs cost in onnxruntime (one
thread, measured A/B): the log is signed only on columns that may be negative, and tile
configs are read on their active columns only (``NormLinear``); a Linear over a
concatenation is a sum of Linears over its parts; gathers are ``index_select`` (ONNX
Gather, not GatherND); per-call affine terms (FiLM, biases, node context) are folded
into small tensors once per call, and matmuls over configs are 2-D so that bias and
ReLU fuse into Gemm. Each computes the plain form's function on valid inputs (to float
rounding), with the plain form's parameter names, shapes and initialisation, so older
checkpoints load unchanged (``tests/models/test_model_network.py`` holds them to it).

Edges: row ``[u, v]`` means u consumes v. Messages flow both ways: operands → users
(what a node is fed) and users → operands (how its output is used).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from xla_costmodel.models.data import SIGNED_NODE_COLUMNS
from xla_costmodel.tpugraphs.collections import CollectionSpec, get
from xla_costmodel.tpugraphs.spec import NODE_FEAT_DIM, NUM_OPCODES, Collection


@dataclass
class ModelConfig:
    collection: Collection
    hidden: int = 64  # node state width
    layers: int = 3  # message-passing rounds
    embed: int = 64  # graph_embedding width (D)
    scorer_hidden: int = 32  # per-config width; also node_context width (H)

    @property
    def spec(self) -> CollectionSpec:
        return get(self.collection)

    @property
    def config_dim(self) -> int:
        return self.spec.width

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def signed_log(x: Tensor) -> Tensor:
    """``sign(x) * log1p(|x|)``: shape products and window sizes span many decades; the
    log keeps them comparable. (What ``NormLinear(log=True)`` computes, more cheaply.)"""
    return torch.sign(x) * torch.log1p(torch.abs(x))


class NormLinear(nn.Module):
    """``Linear((f(x) - mean) * inv_std)`` with the standardisation folded into the weights.

    Folding avoids materialising a normalised copy of a large input (the layout scorer
    sees up to 1001 x 848 x 18 values). ``inv_std`` is 0 for columns that were constant
    in training, which masks them.

    ``log``: f is ``signed_log`` on the columns ``signed`` (those that may be negative)
    and ``log1p(max(x, 0))`` on the others (never negative: the same there).
    ``signed_log(x)`` is computed as ``log1p(max(x, 0)) - log(max(1 - x, 1))``, the
    second term on the active signed columns alone, ``1 - x`` of them by a Gemm with a
    0/-1 matrix: an ONNX Gather along columns cost more than the logs it saved, and
    ``Sign`` is slow in onnxruntime. ``select``: read only the active columns, through
    a 0/1 Gemm, for the positive part too; that pays where the input is narrow (tile
    configs: half the log for a 24-column Gemm), not for the 140 node features.
    """

    # Buffers, declared for the type checker (nn.Module's __getattr__ is untyped).
    mean: Tensor
    inv_std: Tensor
    cols: Tensor
    signed_cols: Tensor
    pick: Tensor
    negate: Tensor

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        log: bool,
        signed: tuple[int, ...] = (),
        select: bool = False,
    ) -> None:
        super().__init__()
        self.log = log
        self.signed = signed
        self.select = select
        self.linear = nn.Linear(in_dim, out_dim)
        self.register_buffer("mean", torch.zeros(in_dim))
        self.register_buffer("inv_std", torch.ones(in_dim))
        # Derived from inv_std by ``refresh`` (so never saved): the columns read (all
        # active ones; the signed active ones) and their 0/1 and 0/-1 pickers.
        for name in ("cols", "signed_cols", "pick", "negate"):
            self.register_buffer(name, torch.empty(0), persistent=False)
        self.register_load_state_dict_post_hook(  # type: ignore[no-untyped-call]
            lambda module, _: module.refresh()
        )
        self.refresh()

    def set_stats(self, mean: Tensor, std: Tensor) -> None:
        self.mean.copy_(mean)
        self.inv_std.copy_(torch.where(std > 1e-6, 1.0 / std.clamp_min(1e-6), 0.0))
        self.refresh()

    def refresh(self) -> None:
        # At least one column (a masked one if need be) keeps every shape non-empty.
        cols = [int(i) for i in torch.nonzero(self.inv_std).flatten()] or [0]
        signed = [i for i in cols if i in self.signed]
        self.cols, self.signed_cols = torch.tensor(cols), torch.tensor(signed)
        eye = torch.eye(self.inv_std.numel())
        self.pick, self.negate = eye[cols], -eye[signed]

    def folded(
        self, scale: Tensor | None = None, shift: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """(weight, bias) of the whole affine map on f(x), with an optional per-output
        ``* scale + shift`` after it folded in too."""
        weight = self.linear.weight * self.inv_std
        bias = self.linear.bias - weight @ self.mean
        if scale is not None:
            weight = weight * scale.unsqueeze(1)
            bias = bias * scale
        if shift is not None:
            bias = bias + shift
        return weight, bias

    def forward(
        self, x: Tensor, scale: Tensor | None = None, shift: Tensor | None = None
    ) -> Tensor:
        weight, bias = self.folded(scale, shift)
        if not self.log:
            return F.linear(x, weight, bias)
        one = torch.ones(1)
        if self.select:
            positive = torch.log(torch.clamp_min(F.linear(x, self.pick, one), 1.0))
            out = F.linear(positive, weight.index_select(1, self.cols), bias)
        else:
            out = F.linear(torch.log1p(torch.relu(x)), weight, bias)
        if self.signed_cols.numel():
            negative = torch.log(torch.clamp_min(F.linear(x, self.negate, one), 1.0))
            out = out - F.linear(negative, weight.index_select(1, self.signed_cols))
        return out


class Edges(NamedTuple):
    """A graph's edges as message passing reads them, built once per graph."""

    users: Tensor  # [E] edge (u, v): u consumes v
    operands: Tensor  # [E]
    inv_in: Tensor  # [N, 1] 1 / max(1, number of operands)
    inv_out: Tensor  # [N, 1] 1 / max(1, number of users)

    @classmethod
    def of(cls, edge_index: Tensor, num_nodes: int) -> Edges:
        users, operands = edge_index[:, 0], edge_index[:, 1]
        ones = torch.ones_like(users, dtype=torch.float32)
        zeros = torch.zeros(num_nodes)
        inv_in = 1.0 / zeros.index_add(0, users, ones).clamp_min(1.0).unsqueeze(1)
        inv_out = 1.0 / zeros.index_add(0, operands, ones).clamp_min(1.0).unsqueeze(1)
        return cls(users, operands, inv_in, inv_out)


def mean_over(h: Tensor, src: Tensor, dst: Tensor, inv_count: Tensor) -> Tensor:
    """Per node, the mean of ``h[src]`` over the edges whose ``dst`` it is (0 if none).

    ``index_select`` exports as ONNX Gather (``h[src]`` as GatherND) and ``index_add``
    as ScatterND(reduction="add"); ``scatter_add`` (ScatterElements) was 10x slower in
    onnxruntime, and one gather + scatter over both directions at once was no faster.
    """
    return torch.zeros_like(h).index_add(0, dst, h.index_select(0, src)) * inv_count


class MessagePassing(nn.Module):
    """One residual round of mean aggregation over operands and over users."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        # Acts on [h, from_operands, from_users]; applied block by block (below).
        self.update = nn.Linear(3 * hidden, hidden)
        self.norm = nn.LayerNorm(hidden)  # per node: no statistics across nodes

    def forward(self, h: Tensor, edges: Edges) -> Tensor:
        from_operands = mean_over(h, edges.operands, edges.users, edges.inv_in)
        from_users = mean_over(h, edges.users, edges.operands, edges.inv_out)
        # update(cat([h, from_operands, from_users])) without the [N, 3h] concatenation
        # (a Concat was 14% of the encoder): onnxruntime fuses each add into a Gemm.
        w_self, w_in, w_out = self.update.weight.chunk(3, dim=1)
        msg = F.linear(h, w_self, self.update.bias) + from_operands @ w_in.t()
        msg = msg + from_users @ w_out.t()
        out: Tensor = self.norm(h + torch.relu(msg))  # Module.__call__ is untyped
        return out


class GraphEncoder(nn.Module):
    """Node states by message passing, pooled (mean + max) into one graph embedding."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.node_in = NormLinear(
            NODE_FEAT_DIM, cfg.hidden, log=True, signed=SIGNED_NODE_COLUMNS
        )
        self.opcode = nn.Embedding(NUM_OPCODES, cfg.hidden)
        self.layers = nn.ModuleList(
            MessagePassing(cfg.hidden) for _ in range(cfg.layers)
        )
        self.pool = nn.Linear(2 * cfg.hidden, cfg.embed)

    def node_states(
        self, node_feat: Tensor, node_opcode: Tensor, edge_index: Tensor
    ) -> Tensor:
        h = torch.relu(self.node_in(node_feat) + self.opcode(node_opcode))
        edges = Edges.of(edge_index, h.shape[0])
        for layer in self.layers:
            h = layer(h, edges)
        return h

    def pool_graph(self, h: Tensor) -> Tensor:
        pooled = torch.cat([h.mean(dim=0), h.amax(dim=0)])
        return torch.relu(self.pool(pooled))


class TileEncoder(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gnn = GraphEncoder(cfg)

    def forward(
        self, node_feat: Tensor, node_opcode: Tensor, edge_index: Tensor
    ) -> Tensor:
        return self.gnn.pool_graph(
            self.gnn.node_states(node_feat, node_opcode, edge_index)
        )


class LayoutEncoder(nn.Module):
    """Also returns each configurable node's context, already projected to the scorer's
    width, so the scorer's per-(config, node) work stays small."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gnn = GraphEncoder(cfg)
        self.context = nn.Linear(cfg.hidden, cfg.scorer_hidden)

    def forward(
        self,
        node_feat: Tensor,
        node_opcode: Tensor,
        edge_index: Tensor,
        node_config_ids: Tensor,
    ) -> tuple[Tensor, Tensor]:
        h = self.gnn.node_states(node_feat, node_opcode, edge_index)
        return self.gnn.pool_graph(h), self.context(h.index_select(0, node_config_ids))


class TileScorer(nn.Module):
    """Config MLP modulated (FiLM) by the graph: the graph decides which config values
    matter. Scores one row per config (tile, xla_cpu).

    Tile configs are sizes (never negative, ``config_log``), so their log is
    ``log1p(max(x, 0))``: a negative value, which no valid config holds, is read as 0.
    Collections without ``config_log`` (xla_cpu's option codes) are read raw.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        s, log = cfg.scorer_hidden, cfg.spec.config_log
        self.config_in = NormLinear(cfg.config_dim, s, log=log, select=log)
        self.film = nn.Linear(cfg.embed, 2 * s)
        self.hidden = nn.Linear(s, s)
        self.out = nn.Linear(s, 1)

    def forward(self, graph_embedding: Tensor, config_feat: Tensor) -> Tensor:
        gamma, beta = self.film(graph_embedding).chunk(2)
        # config_in(x) * (1 + gamma) + beta, with the FiLM folded into its weights.
        x = torch.relu(self.config_in(config_feat, 1.0 + gamma, beta))
        x = torch.relu(self.hidden(x))
        scores: Tensor = self.out(x).squeeze(-1)
        return scores


class LayoutScorer(nn.Module):
    """Per (config, node): project the node's config + add its context + ReLU + one layer;
    mean over nodes; a small head."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        s = cfg.scorer_hidden
        self.config_in = NormLinear(cfg.config_dim, s, log=False)
        self.node_layer = nn.Linear(s, s)
        self.graph_in = nn.Linear(cfg.embed, s)
        self.head = nn.Linear(s, s)
        self.out = nn.Linear(s, 1)

    def forward(
        self, graph_embedding: Tensor, node_context: Tensor, node_config_feat: Tensor
    ) -> Tensor:
        c, nc, f = node_config_feat.shape
        weight, bias = self.config_in.folded()
        # config_in(x) + node_context, the bias added to the context once per call.
        h = weight.shape[0]
        x = node_config_feat.reshape(c * nc, f) @ weight.t()
        x = torch.relu(x.reshape(c, nc, h) + (node_context + bias))  # [C,NC,H]
        x = torch.relu(self.node_layer(x.reshape(c * nc, h)))
        x = x.reshape(c, nc, h).mean(dim=1)  # [C,H]
        x = torch.relu(self.head(x) + self.graph_in(graph_embedding))
        scores: Tensor = self.out(x).squeeze(-1)
        return scores


class CostModel(nn.Module):
    """Encoder + scorer of one collection; ``score`` is what training optimises. A
    ``per_node`` collection (layout) gets the per-node pair, the others the per-graph
    one (tile, xla_cpu)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        per_node = cfg.spec.per_node
        self.encoder: TileEncoder | LayoutEncoder = (
            LayoutEncoder(cfg) if per_node else TileEncoder(cfg)
        )
        self.scorer: TileScorer | LayoutScorer = (
            LayoutScorer(cfg) if per_node else TileScorer(cfg)
        )

    def encode(self, graph: dict[str, Tensor]) -> tuple[Tensor, ...]:
        args = [graph["node_feat"], graph["node_opcode"], graph["edge_index"]]
        if self.cfg.spec.per_node:
            return tuple(self.encoder(*args, graph["node_config_ids"]))
        return (self.encoder(*args),)

    def forward(self, graph: dict[str, Tensor], configs: Tensor) -> Tensor:
        scores: Tensor = self.scorer(*self.encode(graph), configs)
        return scores

    def set_stats(self, stats: dict[str, tuple[Tensor, Tensor]]) -> None:
        """Install training-partition statistics: ``{"node": (mean, std), "config": ...}``."""
        self.encoder.gnn.node_in.set_stats(*stats["node"])
        self.scorer.config_in.set_stats(*stats["config"])


def embedding_names(collection: str) -> list[str]:
    """The encoder's outputs: a graph embedding, and a per-node context (per_node)."""
    if get(collection).per_node:
        return ["graph_embedding", "node_context"]
    return ["graph_embedding"]
