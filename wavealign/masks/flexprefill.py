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

On a GPU every head is computed at once, with no wait for the device in between (``masks._kernels``: the last
rows' logits on the tensor cores, the per-diagonal sums and the pooled blocks by Triton kernels, the query-aware
selection by bisecting its cut-off value instead of sorting a head's MB x NB scores). Cut-offs and counts are
decided on values, so equal scores are kept or dropped together and the mask is the same on every run. The
per-head torch code here is the reference and the CPU path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from wavealign import masks
from wavealign.blockmask import check_int
from wavealign.masks import _kernels
from wavealign.masks._common import (
    check_fraction,
    check_number,
    check_qkv,
    diagonal_mass,
    num_blocks,
    optional,
    per_head,
    pool_blocks,
)

PARAMS: dict[str, Any] = {"gamma": 0.6, "tau": 0.1, "min_budget": 1024, "max_budget": None}


@dataclass
class _Estimate:
    """What FlexPrefill decides a head's pattern and budgets from, for H heads: the last block's attention averaged
    per key (``vertical``) and per diagonal distance (``slash``), (H, N); the pooled Q and K blocks (H, NB, D); and
    the last block's mean query over sqrt(d) (H, D)."""

    vertical: torch.Tensor
    slash: torch.Tensor
    pooled_q: torch.Tensor
    pooled_k: torch.Tensor
    last_mean: torch.Tensor


def _estimate_reference(q: torch.Tensor, k: torch.Tensor, block_size: int) -> _Estimate:
    """One head's estimate (q, k each (N, D)) by torch code, in float32 (Alg. 1 lines 1-3)."""
    n, d = k.shape
    last = q[-block_size:].float() / math.sqrt(d)
    probs = torch.softmax(last @ k.float().T, dim=-1)
    return _Estimate(probs.mean(0)[None], (diagonal_mass(probs, n) / last.shape[0])[None],
                     pool_blocks(q, block_size)[None], pool_blocks(k, block_size)[None], last.mean(0)[None])


def _estimate_kernels(q: torch.Tensor, k: torch.Tensor, block_size: int) -> _Estimate:
    """Every head's estimate (q, k (H, N, D)) at once: the last block's logits on the tensor cores, the per-diagonal
    sums and the pooled blocks by the GPU kernels."""
    n, d = k.shape[1:]
    rows = min(block_size, n)
    per_key, per_distance = _kernels.last_rows_mass(q, k, rows)
    (pooled_q, _), (pooled_k, _) = (_kernels.block_stats(x, block_size, with_similarity=False) for x in (q, k))
    return _Estimate(per_key / rows, per_distance / rows, pooled_q, pooled_k,
                     (q[:, -rows:].float() / math.sqrt(d)).mean(1))


def js_distance(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Square-root Jensen-Shannon divergence (natural log) of each pair of rows of p, q (..., K): (...,) float64."""
    p, q = p.double().clamp_min(1e-12), q.double().clamp_min(1e-12)
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    m = (p + q) / 2
    return (0.5 * (p * (p / m).log()).sum(-1) + 0.5 * (q * (q / m).log()).sum(-1)).clamp_min(0.0).sqrt()


def _top_per_head(scores: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Per head, the ``count[h]`` highest of ``scores`` (H, NB) as a bool (H, NB), ties in index order."""
    order = torch.sort(scores, dim=-1, descending=True, stable=True).indices
    taken = torch.arange(scores.shape[-1], device=scores.device) < count.unsqueeze(1)
    return torch.zeros_like(taken).scatter_(-1, order, taken)


def keep_by_mass_sorted(values: torch.Tensor, fraction: float) -> torch.Tensor:
    """Per head of ``values`` (H, L): the highest, ties in index order, while their cumulative sum (float64) stays
    within ``fraction`` of the head's total; a bool (H, L). The reference of ``masks._kernels.keep_by_mass``."""
    ordered, order = torch.sort(values, dim=-1, descending=True, stable=True)
    cumulative = torch.cumsum(ordered.double(), -1)
    take = cumulative <= fraction * cumulative[:, -1:]
    return torch.zeros_like(take).scatter_(-1, order, take)


def _decide(est: _Estimate, n: int, block_size: int, gamma: float, tau: float, min_budget: int,
            max_budget: int | None, keep_by_mass: Callable[[torch.Tensor, float], torch.Tensor]) -> torch.Tensor:
    """The (H, MB, NB) masks from the heads' estimates (Alg. 1 lines 4-12): budgets, the JS test, the patterns."""
    h = est.vertical.shape[0]
    nb = num_blocks(n, block_size)
    device = est.vertical.device
    lo = math.ceil(min_budget / block_size)
    hi = nb if max_budget is None else min(math.ceil(max_budget / block_size), nb)
    pad = nb * block_size - n
    vertical_blocks, slash_blocks = (torch.nn.functional.pad(x, (0, pad)).view(h, nb, block_size).sum(-1)
                                     for x in (est.vertical, est.slash))
    estimate = torch.softmax(torch.bmm(est.pooled_k, est.last_mean.unsqueeze(-1)).squeeze(-1), dim=-1)
    query_aware = js_distance(estimate, vertical_blocks) < tau
    counts = []
    for scores in (est.vertical, est.slash):
        # the fewest tokens whose sorted scores cover gamma of their total, in blocks, within [lo, hi] (lo if
        # query-aware); a count, which the order of equal scores does not change
        covered = keep_by_mass_sorted(scores, gamma).sum(-1) + 1
        count = (covered // block_size + 1).clamp(lo, hi)
        counts.append(torch.where(query_aware, min(lo, nb), count).clamp_min(1))
    vertical_blocks[:, 0] = float("inf")  # the first kv block and the diagonal are always kept (upstream: +inf)
    slash_blocks[:, 0] = float("inf")
    columns = _top_per_head(vertical_blocks, counts[0])
    distances = _top_per_head(slash_blocks, counts[1])
    on_diagonal = torch.cat([distances.flip(-1)[:, :-1], distances], dim=-1)  # offset r - c at r - c + nb - 1
    r = torch.arange(nb, device=device)
    mask = columns.unsqueeze(1) | on_diagonal[:, r.unsqueeze(1) - r.unsqueeze(0) + nb - 1]
    aware = query_aware.nonzero().flatten().tolist()  # the one wait for the device
    if aware:
        d = est.pooled_q.shape[-1]
        attn = torch.softmax(torch.bmm(est.pooled_q[aware], est.pooled_k[aware].transpose(1, 2)) / math.sqrt(d),
                             dim=-1)
        # query-aware blocks: chosen over all rows at once, highest first, within gamma of the rows' (unit) masses
        kept = keep_by_mass(attn.reshape(len(aware), -1), gamma)
        mask[aware] |= kept.view(len(aware), nb, nb)
    return mask


def head_mask(q: torch.Tensor, k: torch.Tensor, block_size: int, gamma: float, tau: float, min_budget: int,
              max_budget: int | None) -> torch.Tensor:
    """FlexPrefill block mask (MB, NB) of one head (q, k each (N, D)), by torch code."""
    return _decide(_estimate_reference(q, k, block_size), k.shape[0], block_size, gamma, tau, min_budget,
                   max_budget, keep_by_mass_sorted)[0]


def build(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, *, gamma: float, tau: float,
          min_budget: int, max_budget: int | None) -> torch.Tensor:
    """FlexPrefill block mask (B, H, MB, NB) at coverage ``gamma`` (paper setting 0.60): every head at once by the
    GPU kernels where they run, else by ``reference``."""
    _check(q, k, v, block_size, min_budget, max_budget)
    b, h, n, d = q.shape
    if not (_kernels.enabled(q) and _kernels.block_stats_supports(block_size, d)):
        return _reference(q, k, v, block_size, gamma, tau, min_budget, max_budget)
    est = _estimate_kernels(q.reshape(b * h, n, d), k.reshape(b * h, n, d), block_size)
    mask = _decide(est, n, block_size, gamma, tau, min_budget, max_budget, _kernels.keep_by_mass)
    return mask.view(b, h, *mask.shape[-2:])


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, *, gamma: float, tau: float,
              min_budget: int, max_budget: int | None) -> torch.Tensor:
    """``build`` by this module's torch code, head by head, on any device."""
    _check(q, k, v, block_size, min_budget, max_budget)
    return _reference(q, k, v, block_size, gamma, tau, min_budget, max_budget)


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int, min_budget: int,
           max_budget: int | None) -> None:
    check_qkv(q, k, v, block_size)
    if max_budget is not None and max_budget < min_budget:
        raise ValueError(f"max_budget must be at least min_budget={min_budget} (or None), got {max_budget}")


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int, gamma: float, tau: float,
               min_budget: int, max_budget: int | None) -> torch.Tensor:
    return per_head(q, k, v, block_size,
                    lambda _h, qh, kh, _v: head_mask(qh, kh, block_size, gamma, tau, min_budget, max_budget))


masks.register("flexprefill", build, PARAMS, "query-aware / vertical-slash by JS distance, gamma coverage "
               "(FlexPrefill)", checks={"gamma": check_fraction, "tau": partial(check_number, lo=0.0, hi=1.0),
                                        "min_budget": partial(check_int, lo=0),
                                        "max_budget": optional(partial(check_int, lo=1))},
               reference=reference, types={"max_budget": int | None})

if __name__ == "__main__":
    from wavealign.masks._draw import main

    raise SystemExit(main("flexprefill"))
