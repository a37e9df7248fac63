"""FlexPrefill (Lai et al., 2025): per-head choice between query-aware and vertical-slash patterns, with
budgets set by attention coverage ``gamma`` (default 0.60, the WaveAlign paper's setting; upstream's is 0.9).

Per head, from the last block of queries (Alg. 1): a = softmax(q_last k^T / sqrt(d)) averaged over those
rows gives per-key (vertical) and per-diagonal (slash) scores; their budgets are the fewest tokens whose
sorted scores cover ``gamma``, in blocks, clamped to [``min_budget``, ``max_budget``] tokens. The pattern
is chosen by the square-root Jensen-Shannon distance between the block-pooled vertical scores and the
estimate softmax(mean(q_last) pooled_k^T / sqrt(d)): below ``tau`` (default 0.1, upstream's) the head is
*query-aware*: its vertical and slash budgets drop to ``min_budget`` and it adds the blocks of
softmax(pooled_q pooled_k^T / sqrt(d)) chosen globally over all rows, highest first, while the
cumulative mass stays within gamma x MB (gamma of each row's unit mass, pooled over rows). Otherwise it
keeps the top vertical and slash blocks. kv-block 0 and the diagonal are always kept.

Bidirectional port: no causal mask on the last block or on the pooled scores; a slash is scored by its
distance |i - j| and a chosen distance is kept on both sides of the diagonal.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch

from wavealign import masks
from wavealign.blockmask import check_int
from wavealign.masks._common import (
    check_fraction,
    check_number,
    check_qkv,
    num_blocks,
    optional,
    per_head,
    pool_blocks,
)

PARAMS: dict[str, Any] = {"gamma": 0.6, "tau": 0.1, "min_budget": 1024, "max_budget": None}


def _cover_count(scores: torch.Tensor, gamma: float) -> int:
    """How many of the highest ``scores`` (summing to ~1) are needed to cover ``gamma``."""
    cdf = torch.cumsum(torch.sort(scores, descending=True).values, 0)
    return int((cdf <= gamma).sum()) + 1


def js_distance(p: torch.Tensor, q: torch.Tensor) -> float:
    """Square-root Jensen-Shannon divergence of two distributions (natural log)."""
    p, q = p.double().clamp_min(1e-12), q.double().clamp_min(1e-12)
    p, q = p / p.sum(), q / q.sum()
    m = (p + q) / 2
    return math.sqrt(max(float(0.5 * (p * (p / m).log()).sum() + 0.5 * (q * (q / m).log()).sum()), 0.0))


def _diagonal_mass(probs: torch.Tensor, n: int) -> torch.Tensor:
    """Per distance d, the mass of ``probs`` (the last rows' attention, (rows, n)) on the keys d tokens before
    or after each row's query, summed over rows: (n,). Gathered per side and summed in a fixed order, so the
    mask is the same on every run (a scatter-add on a GPU sums in whatever order its atomics land)."""
    rows = torch.arange(n - probs.shape[0], n, device=probs.device).unsqueeze(1)
    d = torch.arange(n, device=probs.device).unsqueeze(0)
    after, before = rows + d, rows - d
    mass_after = probs.gather(1, after.clamp(max=n - 1)) * (after < n)
    mass_before = probs.gather(1, before.clamp(min=0)) * ((before >= 0) & (d > 0))  # d = 0 counted once
    return (mass_after + mass_before).sum(0)


def head_mask(q: torch.Tensor, k: torch.Tensor, block_size: int, gamma: float, tau: float, min_budget: int,
              max_budget: int | None) -> torch.Tensor:
    """FlexPrefill block mask (MB, NB) of one head (q, k each (N, D))."""
    n, d = k.shape
    nb = num_blocks(n, block_size)
    last = q[-block_size:].float() / math.sqrt(d)
    probs = torch.softmax(last @ k.float().T, dim=-1)
    vertical = probs.mean(0)
    slash = _diagonal_mass(probs, n) / last.shape[0]
    lo = math.ceil(min_budget / block_size)
    hi = nb if max_budget is None else min(math.ceil(max_budget / block_size), nb)
    n_vertical = min(max(_cover_count(vertical, gamma) // block_size + 1, lo), hi)
    n_slash = min(max(_cover_count(slash, gamma) // block_size + 1, lo), hi)
    pad = nb * block_size - n
    vertical_blocks = torch.nn.functional.pad(vertical, (0, pad)).view(nb, block_size).sum(-1)
    slash_blocks = torch.nn.functional.pad(slash, (0, pad)).view(nb, block_size).sum(-1)
    pooled_k = pool_blocks(k, block_size)
    estimate = torch.softmax(last.mean(0) @ pooled_k.T, dim=-1)
    query_aware = js_distance(estimate, vertical_blocks) < tau
    if query_aware:
        n_vertical = n_slash = min(lo, nb)
    # the first kv block and the diagonal are always kept (upstream sets their scores to +inf)
    vertical_blocks[0] = float("inf")
    slash_blocks[0] = float("inf")
    columns = torch.topk(vertical_blocks, max(n_vertical, 1)).indices
    distances = torch.topk(slash_blocks, max(n_slash, 1)).indices
    mask = torch.zeros(nb, nb, dtype=torch.bool, device=k.device)
    mask[:, columns] = True
    r = torch.arange(nb, device=k.device)
    on_diagonal = torch.zeros(2 * nb - 1, dtype=torch.bool, device=k.device)
    on_diagonal[nb - 1 + distances] = True
    on_diagonal[nb - 1 - distances] = True
    mask |= on_diagonal[r.unsqueeze(1) - r.unsqueeze(0) + nb - 1]
    if query_aware:
        attn = torch.softmax(pool_blocks(q, block_size) @ pooled_k.T / math.sqrt(d), dim=-1).flatten()
        values, order = torch.sort(attn, descending=True)
        take = torch.cumsum(values, 0) <= gamma * nb
        mask.view(-1)[order[take]] = True
    return mask


def build(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, *, gamma: float, tau: float,
          min_budget: int, max_budget: int | None) -> torch.Tensor:
    """FlexPrefill block mask (B, H, MB, NB) at coverage ``gamma`` (paper setting 0.60)."""
    check_qkv(q, k, v, block_size)
    if max_budget is not None and max_budget < min_budget:
        raise ValueError(f"max_budget must be at least min_budget={min_budget} (or None), got {max_budget}")
    return per_head(q, k, v, block_size,
                    lambda _h, qh, kh, _v: head_mask(qh, kh, block_size, gamma, tau, min_budget, max_budget))


masks.register("flexprefill", build, PARAMS, "query-aware / vertical-slash by JS distance, gamma coverage "
               "(FlexPrefill)", checks={"gamma": check_fraction, "tau": partial(check_number, lo=0.0, hi=1.0),
                                        "min_budget": partial(check_int, lo=0),
                                        "max_budget": optional(partial(check_int, lo=1))})

if __name__ == "__main__":
    from wavealign.masks._draw import main

    raise SystemExit(main("flexprefill"))
