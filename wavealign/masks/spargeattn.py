"""SpargeAttn (Zhang et al., 2025) block prediction from pooled Q/K, and its per-head autotune.

Per head: K is smoothed by subtracting its mean key; Q and smoothed K are mean-pooled per block. A block
is *self-similar* when the mean pairwise cosine of its tokens (self-pairs included) exceeds
``simthreshd1``; pooling only represents self-similar blocks, so a non-self-similar query block is
computed against every kv block (a whole row) and a non-self-similar kv block by every query block (a
whole column). For the rest, softmax(pooled_q pooled_k^T / sqrt(d)) over the self-similar kv blocks is
sorted and blocks are kept while the cumulative mass stays <= ``cdfthreshd``: **the crossing block is
not kept**, but at least one block is. ``attention_sink`` adds kv-block 0 to every row; as upstream, heads
are tuned with it off and run with it on (the default).

Bidirectional: upstream's non-causal path, unchanged (no causal mask on the pooled scores).

The paper runs SpargeAttn with a per-head tuned config: ``tune_head`` searches ``simthreshd1`` over a grid
and, for each, bisects ``cdfthreshd`` for the smallest value whose output L1 error
sum|o - o_dense| / sum|o_dense| on sampled query blocks stays under ``l1_bound``; the sparsest passing
setting wins. With ``autotune`` (the default) ``build`` tunes every head it has no config for, so any caller
(a sweep cell, ``lab/mask_fidelity.py``) gets the tuned mask; ``autotune=False`` uses the fixed thresholds. Tuned
configs can be cached per (model, layer, head) in a JSON file (``tuned_config``), read first and extended, or kept
in a ``masks.TunedConfigs`` store across builds (what the integrations do: a live layer tunes once, then predicts).

On a GPU the prediction runs as GPU kernels (``masks._kernels``: one read of Q and K for the pooled blocks and their
self-similarity, one program per row for the masked softmax and the cdf cut, every head at once); the torch code
here is their reference and the CPU path. The autotune's error estimate stays torch code on either device.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch

from wavealign import masks
from wavealign.blockmask import check_int
from wavealign.masks import _kernels, _tuned
from wavealign.masks._common import (
    BlockPartials,
    block_rows,
    check_flag,
    check_fraction,
    check_number,
    check_qkv,
    num_blocks,
    per_head,
    pool_blocks,
    sample_query_blocks,
)

PARAMS: dict[str, Any] = {"simthreshd1": 0.6, "cdfthreshd": 0.98, "attention_sink": True, "autotune": True,
                          "l1_bound": 0.06, "sample_blocks": 8, "tuned_config": None, "model": "", "layer": 0,
                          "heads": None}
SIM_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def _pool_and_similarity(x: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean-pooled blocks (NB, D) and each block's mean pairwise cosine similarity (NB,)."""
    unit = x.float() / x.float().norm(dim=-1, keepdim=True).clamp_min(1e-6)
    n = x.shape[0]
    counts = torch.full((num_blocks(n, block_size),), float(block_size), device=x.device)
    counts[-1] = n - (len(counts) - 1) * block_size
    # mean over all ordered token pairs of u_i . u_j = |sum_i u_i|^2 / n^2
    unit_sum = pool_blocks(unit, block_size) * counts.unsqueeze(-1)
    return pool_blocks(x, block_size), unit_sum.pow(2).sum(-1) / counts.pow(2)


def cdf_select(probs: torch.Tensor, cdfthreshd: float) -> torch.Tensor:
    """Per row of ``probs`` (MB, NB), the highest blocks (ties in index order) while their cumulative mass (summed
    in float64, as a fraction of the row's) stays <= ``cdfthreshd`` (a float32): the block whose cdf crosses the
    threshold is dropped, but every row keeps at least one block."""
    return _Ranked(probs).select(cdfthreshd)


def _float32(x: float) -> float:
    """``x`` rounded to the nearest float32."""
    return float(torch.tensor(x, dtype=torch.float32))


class _Ranked:
    """Rows of block probabilities sorted once, so the selection at any ``cdfthreshd`` is a count and a scatter:
    the autotune's bisection asks for many thresholds of the same probabilities."""

    def __init__(self, probs: torch.Tensor) -> None:
        sorted_p, self.order = torch.sort(probs, dim=-1, descending=True, stable=True)
        self.cdf = torch.cumsum(sorted_p.double(), dim=-1)

    def select(self, cdfthreshd: float) -> torch.Tensor:
        """``cdf_select`` of the ranked rows at ``cdfthreshd``."""
        # the cdf as a fraction of the row's total, so that cdfthreshd=1 keeps every block; the threshold in float32,
        # as upstream compares it with its float32 cdf
        keep_n = (self.cdf <= _float32(cdfthreshd) * self.cdf[..., -1:]).sum(-1, keepdim=True).clamp(min=1)
        take = torch.arange(self.cdf.shape[-1], device=self.cdf.device) < keep_n
        return torch.zeros_like(take).scatter_(-1, self.order, take)


class _HeadStats:
    """What SpargeAttn's prediction needs of one head, computed once and reused across thresholds: pooled Q and
    smoothed K blocks, their self-similarities and the pooled scores. ``kernels``: masks by the GPU kernel."""

    def __init__(self, pooled_q: torch.Tensor, sim_q: torch.Tensor, pooled_k: torch.Tensor, sim_k: torch.Tensor,
                 scores: torch.Tensor, kernels: bool = False) -> None:
        self.pooled_q, self.sim_q, self.pooled_k, self.sim_k, self.scores = pooled_q, sim_q, pooled_k, sim_k, scores
        self.kernels = kernels

    @classmethod
    def of(cls, q: torch.Tensor, k: torch.Tensor, block_size: int) -> _HeadStats:
        """The statistics of one head (q, k each (N, D)) by torch code."""
        k_smooth = k.float() - k.float().mean(0, keepdim=True)
        pooled_q, sim_q = _pool_and_similarity(q, block_size)
        pooled_k, sim_k = _pool_and_similarity(k_smooth, block_size)
        return cls(pooled_q, sim_q, pooled_k, sim_k, (pooled_q @ pooled_k.T) / math.sqrt(q.shape[-1]))

    def mask(self, simthreshd1: float, cdfthreshd: float, attention_sink: bool) -> torch.Tensor:
        """The head's (MB, NB) mask at these thresholds."""
        if self.kernels:
            thresholds = [torch.tensor([x], device=self.scores.device) for x in (simthreshd1, cdfthreshd)]
            return _kernels.spargeattn_select(self.scores[None], self.sim_q[None], self.sim_k[None], *thresholds,
                                              attention_sink)[0]
        return self.predict(simthreshd1).mask(cdfthreshd, attention_sink)

    def predict(self, simthreshd1: float, rows: torch.Tensor | None = None) -> _Prediction:
        """The prediction at ``simthreshd1`` for query blocks ``rows`` (default all), ready for any cdfthreshd."""
        return _Prediction(self, simthreshd1, rows)


def _all_head_stats(q: torch.Tensor, k: torch.Tensor, block_size: int) -> list[_HeadStats]:
    """``_HeadStats`` of every head of q, k (H, N, D) by the GPU kernels: one read of each for the pooled blocks and
    self-similarities (K smoothed by its mean key), one batched product for the pooled scores."""
    pooled_q, sim_q = _kernels.block_stats(q, block_size)
    pooled_k, sim_k = _kernels.block_stats(k, block_size, mean=k.mean(1, dtype=torch.float32))
    scores = torch.bmm(pooled_q, pooled_k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    return [_HeadStats(pooled_q[h], sim_q[h], pooled_k[h], sim_k[h], scores[h], kernels=True)
            for h in range(q.shape[0])]


class _Prediction:
    """One head's prediction at one ``simthreshd1`` for some of its query blocks. Each row depends on that query
    block alone, so the autotune's error, which reads a few sampled blocks, is computed on those rows only."""

    def __init__(self, stats: _HeadStats, simthreshd1: float, rows: torch.Tensor | None) -> None:
        scores, sim_q = stats.scores, stats.sim_q
        if rows is not None:
            rows = rows.to(scores.device)
            scores, sim_q = scores[rows], sim_q[rows]
        self.q_sim, self.k_sim = sim_q > simthreshd1, stats.sim_k > simthreshd1
        probs = torch.softmax(scores.masked_fill(~self.k_sim, float("-inf")), dim=-1).nan_to_num(0.0)
        self.ranked = _Ranked(probs)

    def mask(self, cdfthreshd: float, attention_sink: bool) -> torch.Tensor:
        """The rows' mask: the cdf selection, plus every block a non-self-similar query or kv block touches (and
        kv-block 0 with ``attention_sink``)."""
        mask = self.ranked.select(cdfthreshd)
        mask[:, ~self.k_sim] = True
        mask[~self.q_sim, :] = True
        if attention_sink:
            mask[:, 0] = True
        return mask


CHECKS = {"simthreshd1": partial(check_number, lo=-1.0, hi=1.0),  # a cosine
          "cdfthreshd": check_fraction, "attention_sink": check_flag, "autotune": check_flag,
          "l1_bound": check_fraction, "sample_blocks": partial(check_int, lo=1)}


def build(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, *, simthreshd1: float,
          cdfthreshd: float, attention_sink: bool, autotune: bool, l1_bound: float, sample_blocks: int,
          tuned_config: str | _tuned.TunedConfigs | None, model: str, layer: int,
          heads: list[int] | None) -> torch.Tensor:
    """SpargeAttn block mask (B, H, MB, NB): each head with its tuned config (from ``tuned_config``, a file or a
    ``masks.TunedConfigs`` store, else tuned now when ``autotune``), else the fixed thresholds; predicted by the GPU
    kernels where they run, else by ``reference``.

    ``heads`` names the model heads that q's H heads are (default 0..H-1), to key tuned configs.
    """
    check_qkv(q, k, v, block_size)
    b, h, n, d = q.shape
    if not (_kernels.enabled(q) and _kernels.block_stats_supports(block_size, d)):
        return _reference(q, k, v, block_size, simthreshd1, cdfthreshd, attention_sink, autotune, l1_bound,
                          sample_blocks, tuned_config, model, layer, heads)
    configs = _tuned.HeadConfigs("spargeattn", tuned_config, model, layer, heads, h)
    stats = _all_head_stats(q.reshape(b * h, n, d), k.reshape(b * h, n, d), block_size)
    chosen = []
    for i, head in enumerate(stats):
        qh, kh, vh = (t[i // h, i % h] for t in (q, k, v))
        tune = (lambda head=head, qh=qh, kh=kh, vh=vh: _tune(head, qh, kh, vh, block_size, l1_bound=l1_bound,
                                                             sample_blocks=sample_blocks)) if autotune else None
        chosen.append(configs.get(i % h, tune) or {"simthreshd1": simthreshd1, "cdfthreshd": cdfthreshd})
    thresholds = [torch.tensor([cfg[name] for cfg in chosen], device=q.device)
                  for name in ("simthreshd1", "cdfthreshd")]
    mask = _kernels.spargeattn_select(torch.stack([s.scores for s in stats]), torch.stack([s.sim_q for s in stats]),
                                      torch.stack([s.sim_k for s in stats]), *thresholds, attention_sink)
    return mask.view(b, h, *mask.shape[-2:])


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, *, simthreshd1: float,
              cdfthreshd: float, attention_sink: bool, autotune: bool, l1_bound: float, sample_blocks: int,
              tuned_config: str | _tuned.TunedConfigs | None, model: str, layer: int,
              heads: list[int] | None) -> torch.Tensor:
    """``build`` by this module's torch code, head by head, on any device."""
    check_qkv(q, k, v, block_size)
    return _reference(q, k, v, block_size, simthreshd1, cdfthreshd, attention_sink, autotune, l1_bound,
                      sample_blocks, tuned_config, model, layer, heads)


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int, simthreshd1: float,
               cdfthreshd: float, attention_sink: bool, autotune: bool, l1_bound: float, sample_blocks: int,
               tuned_config: str | _tuned.TunedConfigs | None, model: str, layer: int,
               heads: list[int] | None) -> torch.Tensor:
    configs = _tuned.HeadConfigs("spargeattn", tuned_config, model, layer, heads, q.shape[1])

    def head_mask(h: int, qh: torch.Tensor, kh: torch.Tensor, vh: torch.Tensor) -> torch.Tensor:
        stats = _HeadStats.of(qh, kh, block_size)
        tune = (lambda: _tune(stats, qh, kh, vh, block_size, l1_bound=l1_bound, sample_blocks=sample_blocks)
                ) if autotune else None
        cfg = configs.get(h, tune) or {"simthreshd1": simthreshd1, "cdfthreshd": cdfthreshd}
        return stats.mask(cfg["simthreshd1"], cfg["cdfthreshd"], attention_sink)

    return per_head(q, k, v, block_size, head_mask)


def tune_head(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, *, l1_bound: float = 0.06,
              sample_blocks: int = 8, bisect_steps: int = 8, attention_sink: bool = False) -> dict[str, float]:
    """Autotune one head (q, k, v each (N, D)): the sparsest (simthreshd1, cdfthreshd) with L1 error
    under ``l1_bound`` on ``sample_blocks`` evenly spread query blocks; returns it with its density and error."""
    return _tune(_HeadStats.of(q, k, block_size), q, k, v, block_size, l1_bound=l1_bound,
                 sample_blocks=sample_blocks, bisect_steps=bisect_steps, attention_sink=attention_sink)


def _tune(stats: _HeadStats, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int, *, l1_bound: float,
          sample_blocks: int, bisect_steps: int = 8, attention_sink: bool = False) -> dict[str, float]:
    """``tune_head`` on the head's prediction statistics, computed once by the caller and reused for its mask."""
    blocks = sample_query_blocks(stats.scores.shape[0], sample_blocks)
    q_rows, owner = block_rows(q, blocks, block_size)
    partials = BlockPartials(q_rows, k, v, block_size)
    all_kept = torch.ones(len(blocks), partials.den.shape[-1], dtype=torch.bool, device=partials.den.device)

    def errors(sampled_masks: list[torch.Tensor]) -> list[float]:
        # all thresholds asked at once: one pass over the partials (~1.5 GB per head at 364K tokens) serves them.
        # The dense output is computed in the same pass, so a mask that keeps every block scores exactly 0 (the
        # batched sums round differently from a single mask's)
        dense, *out = partials.output(torch.stack([all_kept, *sampled_masks])[:, owner])
        return ((torch.stack(out) - dense).abs().sum((1, 2)) / dense.abs().sum().clamp_min(1e-12)).tolist()

    # every simthreshd1 is bisected in lockstep, on its sampled blocks' rows sorted once; error(cdf=1) is 0 only
    # if every block is kept, so a simthreshd1 that fails it has nothing to bisect
    sampled = [stats.predict(sim, blocks) for sim in SIM_GRID]
    at_one = errors([p.mask(1.0, attention_sink) for p in sampled])
    live = [i for i, err in enumerate(at_one) if err <= l1_bound]
    lo, hi, hi_err = dict.fromkeys(live, 0.0), dict.fromkeys(live, 1.0), {i: at_one[i] for i in live}
    for _ in range(bisect_steps if live else 0):
        mid = {i: (lo[i] + hi[i]) / 2 for i in live}
        for i, err in zip(live, errors([sampled[i].mask(mid[i], attention_sink) for i in live]), strict=True):
            if err <= l1_bound:
                hi[i], hi_err[i] = mid[i], err
            else:
                lo[i] = mid[i]
    best: dict[str, float] | None = None
    for i in live:
        sim = SIM_GRID[i]
        # the density by the torch prediction on either device: one head's mask at a time is the batched GPU
        # kernel's slow case, and the winner's mask is built with the others' afterwards
        density = float(stats.predict(sim).mask(hi[i], attention_sink).float().mean())
        candidate = {"simthreshd1": sim, "cdfthreshd": hi[i], "density": density, "l1_error": hi_err[i]}
        if best is None or candidate["density"] < best["density"]:
            best = candidate
    if best is None:  # nothing passes: the densest setting (all blocks) is exact
        best = {"simthreshd1": 1.0, "cdfthreshd": 1.0, "density": 1.0, "l1_error": 0.0}
    return best


def autotune(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, *, model: str,
             layer: int, heads: list[int] | None = None, cache: str | None = None, l1_bound: float = 0.06,
             sample_blocks: int = 8) -> dict[str, dict[str, float]]:
    """Tune every head of q (1, H, N, D); return {"model/layer/head": config} and merge it into ``cache``."""
    check_qkv(q, k, v, block_size)
    l1_bound = CHECKS["l1_bound"]("l1_bound", l1_bound)  # autotune runs on its own too (tune-masks)
    sample_blocks = CHECKS["sample_blocks"]("sample_blocks", sample_blocks)
    return _tuned.tune_heads("spargeattn", q, lambda i: tune_head(
        q[0, i], k[0, i], v[0, i], block_size, l1_bound=l1_bound, sample_blocks=sample_blocks),
        model=model, layer=layer, heads=heads, cache=cache)


masks.register("spargeattn", build, PARAMS, "pooled Q/K + self-similarity + cdf threshold (SpargeAttn)",
               checks=CHECKS, reference=reference, types={"tuned_config": str | None})

if __name__ == "__main__":
    from wavealign.masks._draw import main

    raise SystemExit(main("spargeattn"))
