"""The ranking losses: lower score = faster config."""

from __future__ import annotations

import torch


def pairwise_hinge(
    scores: torch.Tensor, targets: torch.Tensor, margin: float
) -> torch.Tensor:
    """Mean of ``relu(margin - (s_slow - s_fast))`` over pairs with different targets."""
    slower = targets[None, :] > targets[:, None]  # [i, j]: j is slower than i
    gaps = scores[None, :] - scores[:, None]
    losses = torch.relu(margin - gaps)[slower]
    return losses.mean() if losses.numel() else scores.sum() * 0.0


def list_mle(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """ListMLE (Xia et al., 2008) with lower score = faster: the negative log-likelihood
    of the measured order (fastest first) under a Plackett-Luce model of ``-scores``."""
    utility = -scores[torch.argsort(targets, stable=True)]
    tail_lse = torch.logcumsumexp(utility.flip(0), 0).flip(0)  # logsumexp of i..end
    return (tail_lse - utility).mean()
