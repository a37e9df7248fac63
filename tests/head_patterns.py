"""Synthetic attention heads built so that a known MInference candidate pattern wins its search (shared by the
mask tests and the upstream differential tests)."""

from __future__ import annotations

import math

import torch


def sink_and_band_head(n: int, d: int = 128, logit: float = 20.0) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k (1, 1, n, d) whose attention is the stream-LLM candidate's pattern: the first 100 keys (slightly
    preferred, so they are the top columns) and the keys of the query's 400-token segment and the one before
    (so every attended key is at most 799 tokens back); every other logit is 0, far below."""
    q, k = torch.zeros(n, d), torch.zeros(n, d)
    segment = torch.arange(n) // 400
    q[:, 0] = 1.0
    q[torch.arange(n), 1 + segment] = 1.0
    q[segment > 0, segment[segment > 0]] = 1.0  # 1 + (segment - 1): the previous segment's code
    k[torch.arange(n), 1 + segment] = 1.0
    k[:100] = 0.0
    k[:100, 0] = 1.05
    return (q * logit * math.sqrt(d)).view(1, 1, n, d), k.view(1, 1, n, d)


def clustered_blocks_head(n: int, d: int = 128, logit: float = 20.0) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k (1, 1, n, d) whose attention is block-sparse: each 32-token block belongs to one of 16 clusters
    (seeded), and a query attends only to the keys of its own cluster, fewer than 1/8 of the blocks of a row."""
    generator = torch.Generator().manual_seed(12)
    cluster = torch.randint(0, 16, (n // 32,), generator=generator).repeat_interleave(32)
    codes = torch.nn.functional.one_hot(cluster, d).float()
    return (codes * logit * math.sqrt(d)).view(1, 1, n, d), codes.view(1, 1, n, d)
