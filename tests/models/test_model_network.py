"""The networks' fast forward passes compute the plain forms they replace.

``xla_costmodel.models.network`` writes each module for what its exported graph costs (column picks by
Gemm, a split Linear instead of a concatenation, folded FiLM and biases); these tests
hold each one to the plain PyTorch form, on inputs that include negative values where
the format allows them.
"""

from __future__ import annotations

import pytest
import torch

from xla_costmodel.models.data import SIGNED_NODE_COLUMNS
from xla_costmodel.models.network import (
    Edges,
    LayoutScorer,
    MessagePassing,
    ModelConfig,
    NormLinear,
    TileScorer,
    signed_log,
)
from xla_costmodel.tpugraphs.spec import (
    LAYOUT_CONFIG_DIM,
    NODE_FEAT_DIM,
    TILE_CONFIG_DIM,
)


def integer_features(rows: int, dim: int, signed: tuple[int, ...] = ()) -> torch.Tensor:
    """Integer-valued features spanning decades; negative only in ``signed`` columns."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 4, (rows, dim), generator=g) ** torch.randint(
        0, 9, (rows, dim), generator=g
    )
    x = x.float()
    if signed:
        cols = list(signed)
        x[:, cols] *= torch.randint(0, 2, (rows, len(cols)), generator=g) * 2.0 - 1.0
    return x


def with_stats(layer: NormLinear, x: torch.Tensor, masked: list[int]) -> NormLinear:
    f = signed_log(x)
    std = f.std(0)
    std[masked] = 0.0
    layer.set_stats(f.mean(0), std)
    return layer


def plain_norm_linear(layer: NormLinear, x: torch.Tensor) -> torch.Tensor:
    w = layer.linear.weight * layer.inv_std
    f = signed_log(x) if layer.log else x
    return f @ w.t() + (layer.linear.bias - w @ layer.mean)


@pytest.mark.parametrize("select", [False, True])
def test_norm_linear_is_the_signed_log_linear_on_valid_inputs(select: bool) -> None:
    torch.manual_seed(0)
    x = integer_features(300, NODE_FEAT_DIM, SIGNED_NODE_COLUMNS)
    assert (x[:, list(SIGNED_NODE_COLUMNS)] < 0).any()
    layer = NormLinear(
        NODE_FEAT_DIM, 16, log=True, signed=SIGNED_NODE_COLUMNS, select=select
    )
    with_stats(layer, x, masked=[1, 5, 53, 60, 130])
    assert 53 not in layer.signed_cols.tolist() and 54 in layer.signed_cols.tolist()
    torch.testing.assert_close(layer(x), plain_norm_linear(layer, x))


def test_norm_linear_column_picks_survive_a_state_dict_round_trip() -> None:
    x = integer_features(50, TILE_CONFIG_DIM)
    trained = NormLinear(TILE_CONFIG_DIM, 8, log=True, select=True)
    with_stats(trained, x, masked=[4, 5])
    fresh = NormLinear(TILE_CONFIG_DIM, 8, log=True, select=True)
    fresh.load_state_dict(trained.state_dict())
    assert fresh.cols.tolist() == trained.cols.tolist() and 4 not in fresh.cols
    torch.testing.assert_close(fresh(x), plain_norm_linear(trained, x))


@pytest.mark.parametrize("select", [False, True])
def test_norm_linear_with_every_column_masked_outputs_its_bias(select: bool) -> None:
    layer = NormLinear(TILE_CONFIG_DIM, 8, log=True, select=select)
    layer.set_stats(torch.zeros(TILE_CONFIG_DIM), torch.zeros(TILE_CONFIG_DIM))
    x = integer_features(5, TILE_CONFIG_DIM)
    torch.testing.assert_close(layer(x), layer.linear.bias.expand(5, 8))


def test_message_passing_is_the_concatenated_linear() -> None:
    torch.manual_seed(0)
    layer = MessagePassing(8)
    h = torch.randn(6, 8)
    edge_index = torch.tensor([[1, 0], [2, 0], [2, 1], [5, 2], [5, 4]])
    users, operands = edge_index[:, 0], edge_index[:, 1]
    a = torch.zeros(6, 8).index_add(0, users, h[operands])
    a = a / torch.bincount(users, minlength=6).clamp_min(1).unsqueeze(1)
    b = torch.zeros(6, 8).index_add(0, operands, h[users])
    b = b / torch.bincount(operands, minlength=6).clamp_min(1).unsqueeze(1)
    want = layer.norm(h + torch.relu(layer.update(torch.cat([h, a, b], dim=1))))
    torch.testing.assert_close(layer(h, Edges.of(edge_index, 6)), want)


def test_tile_scorer_is_the_film_mlp() -> None:
    torch.manual_seed(0)
    scorer = TileScorer(ModelConfig("tile", embed=16, scorer_hidden=8))
    x = integer_features(40, TILE_CONFIG_DIM)
    with_stats(scorer.config_in, x, masked=[16, 17])
    emb = torch.randn(16)
    gamma, beta = scorer.film(emb).chunk(2)
    h = torch.relu(plain_norm_linear(scorer.config_in, x) * (1 + gamma) + beta)
    want = scorer.out(torch.relu(scorer.hidden(h))).squeeze(-1)
    torch.testing.assert_close(scorer(emb, x), want)


def test_layout_scorer_is_the_per_node_mlp() -> None:
    torch.manual_seed(0)
    scorer = LayoutScorer(ModelConfig("layout", embed=16, scorer_hidden=8))
    configs = torch.randint(-1, 6, (7, 5, LAYOUT_CONFIG_DIM)).float()
    flat = configs.reshape(-1, LAYOUT_CONFIG_DIM)
    std = flat.std(0)
    std[[4, 5]] = 0.0
    scorer.config_in.set_stats(flat.mean(0), std)
    emb, context = torch.randn(16), torch.randn(5, 8)
    x = torch.relu(plain_norm_linear(scorer.config_in, configs) + context)
    x = torch.relu(scorer.node_layer(x)).mean(dim=1)
    x = torch.relu(scorer.head(x) + scorer.graph_in(emb))
    torch.testing.assert_close(scorer(emb, context, configs), scorer.out(x).squeeze(-1))
    assert scorer(emb, context, configs[:0]).shape == (0,)
