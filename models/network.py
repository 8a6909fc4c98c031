"""The networks: a graph encoder (once per graph) and a scorer (per batch of configs).

No I/O here. Normalisation statistics live in buffers, so the exported ONNX graphs take
raw TpuGraphs values. Every op in a scorer acts on one config at a time (no batch
statistics), so a config's score never depends on the other configs in its batch.

Edges: row ``[u, v]`` means u consumes v. Messages flow both ways: operands → users
(what a node is fed) and users → operands (how its output is used).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from tpugraphs.spec import (
    LAYOUT_CONFIG_DIM,
    NODE_FEAT_DIM,
    NUM_OPCODES,
    TILE_CONFIG_DIM,
)


@dataclass
class ModelConfig:
    collection: Literal["tile", "layout"]
    hidden: int = 64  # node state width
    layers: int = 3  # message-passing rounds
    embed: int = 64  # graph_embedding width (D)
    scorer_hidden: int = 32  # per-config width; also node_context width (H)

    @property
    def config_dim(self) -> int:
        return TILE_CONFIG_DIM if self.collection == "tile" else LAYOUT_CONFIG_DIM

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def signed_log(x: Tensor) -> Tensor:
    # Shape products and window sizes span many decades; log keeps them comparable.
    return torch.sign(x) * torch.log1p(torch.abs(x))


class NormLinear(nn.Module):
    """``Linear((f(x) - mean) * inv_std)`` with the standardisation folded into the weights.

    Folding avoids materialising a normalised copy of a large input (the layout scorer
    sees up to 1001 x 848 x 18 values). ``inv_std`` is 0 for columns that were constant
    in training, which masks them.
    """

    def __init__(self, in_dim: int, out_dim: int, log: bool) -> None:
        super().__init__()
        self.log = log
        self.linear = nn.Linear(in_dim, out_dim)
        self.register_buffer("mean", torch.zeros(in_dim))
        self.register_buffer("inv_std", torch.ones(in_dim))

    def set_stats(self, mean: Tensor, std: Tensor) -> None:
        self.mean.copy_(mean)
        self.inv_std.copy_(torch.where(std > 1e-6, 1.0 / std.clamp_min(1e-6), 0.0))

    def forward(self, x: Tensor) -> Tensor:
        if self.log:
            x = signed_log(x)
        weight = self.linear.weight * self.inv_std
        bias = self.linear.bias - weight @ self.mean
        return x @ weight.t() + bias


class MessagePassing(nn.Module):
    """One residual round of mean aggregation over operands and over users."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.update = nn.Linear(3 * hidden, hidden)
        self.norm = nn.LayerNorm(hidden)  # per node: no statistics across nodes

    def forward(
        self,
        h: Tensor,
        users: Tensor,
        operands: Tensor,
        inv_in: Tensor,
        inv_out: Tensor,
    ) -> Tensor:
        from_operands = torch.zeros_like(h).index_add(0, users, h[operands]) * inv_in
        from_users = torch.zeros_like(h).index_add(0, operands, h[users]) * inv_out
        msg = torch.cat([h, from_operands, from_users], dim=1)
        return self.norm(h + torch.relu(self.update(msg)))


class GraphEncoder(nn.Module):
    """Node states by message passing, pooled (mean + max) into one graph embedding."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.node_in = NormLinear(NODE_FEAT_DIM, cfg.hidden, log=True)
        self.opcode = nn.Embedding(NUM_OPCODES, cfg.hidden)
        self.layers = nn.ModuleList(
            MessagePassing(cfg.hidden) for _ in range(cfg.layers)
        )
        self.pool = nn.Linear(2 * cfg.hidden, cfg.embed)

    def node_states(
        self, node_feat: Tensor, node_opcode: Tensor, edge_index: Tensor
    ) -> Tensor:
        h = torch.relu(self.node_in(node_feat) + self.opcode(node_opcode))
        users, operands = edge_index[:, 0], edge_index[:, 1]
        ones = torch.ones_like(users, dtype=h.dtype)
        zeros = torch.zeros_like(h[:, 0])
        inv_in = 1.0 / zeros.index_add(0, users, ones).clamp_min(1.0).unsqueeze(1)
        inv_out = 1.0 / zeros.index_add(0, operands, ones).clamp_min(1.0).unsqueeze(1)
        for layer in self.layers:
            h = layer(h, users, operands, inv_in, inv_out)
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
        return self.gnn.pool_graph(h), self.context(h[node_config_ids])


class TileScorer(nn.Module):
    """Config MLP modulated (FiLM) by the graph: the graph decides which tile sizes matter."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        s = cfg.scorer_hidden
        self.config_in = NormLinear(TILE_CONFIG_DIM, s, log=True)
        self.film = nn.Linear(cfg.embed, 2 * s)
        self.hidden = nn.Linear(s, s)
        self.out = nn.Linear(s, 1)

    def forward(self, graph_embedding: Tensor, config_feat: Tensor) -> Tensor:
        gamma, beta = self.film(graph_embedding).chunk(2)
        x = torch.relu(self.config_in(config_feat) * (1.0 + gamma) + beta)
        x = torch.relu(self.hidden(x))
        return self.out(x).squeeze(-1)


class LayoutScorer(nn.Module):
    """Per (config, node): project the node's config + add its context + ReLU + one layer;
    mean over nodes; a small head."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        s = cfg.scorer_hidden
        self.config_in = NormLinear(LAYOUT_CONFIG_DIM, s, log=False)
        self.node_layer = nn.Linear(s, s)
        self.graph_in = nn.Linear(cfg.embed, s)
        self.head = nn.Linear(s, s)
        self.out = nn.Linear(s, 1)

    def forward(
        self, graph_embedding: Tensor, node_context: Tensor, node_config_feat: Tensor
    ) -> Tensor:
        x = torch.relu(self.config_in(node_config_feat) + node_context)  # [C,NC,H]
        x = torch.relu(self.node_layer(x)).mean(dim=1)  # [C,H]
        x = torch.relu(self.head(x) + self.graph_in(graph_embedding))
        return self.out(x).squeeze(-1)


class CostModel(nn.Module):
    """Encoder + scorer of one collection; ``score`` is what training optimises."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        tile = cfg.collection == "tile"
        self.encoder: nn.Module = TileEncoder(cfg) if tile else LayoutEncoder(cfg)
        self.scorer: nn.Module = TileScorer(cfg) if tile else LayoutScorer(cfg)

    def encode(self, graph: dict[str, Tensor]) -> tuple[Tensor, ...]:
        args = [graph["node_feat"], graph["node_opcode"], graph["edge_index"]]
        if self.cfg.collection == "layout":
            return tuple(self.encoder(*args, graph["node_config_ids"]))
        return (self.encoder(*args),)

    def forward(self, graph: dict[str, Tensor], configs: Tensor) -> Tensor:
        return self.scorer(*self.encode(graph), configs)

    def set_stats(self, stats: dict[str, tuple[Tensor, Tensor]]) -> None:
        """Install training-partition statistics: ``{"node": (mean, std), "config": ...}``."""
        self.encoder.gnn.node_in.set_stats(*stats["node"])
        self.scorer.config_in.set_stats(*stats["config"])


def embedding_names(collection: str) -> list[str]:
    return (
        ["graph_embedding"]
        if collection == "tile"
        else ["graph_embedding", "node_context"]
    )
