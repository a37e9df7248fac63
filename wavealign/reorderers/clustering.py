"""``clustering``: rows grouped by k-means into ceil(MB / wave_size) clusters, on the GPU or the CPU.

Rows are 0/1 vectors over the K/V blocks; Lloyd's algorithm (Lloyd, "Least squares quantization in PCM", 1982) from
a k-means++ start (Arthur and Vassilvitskii, SODA 2007) minimises each row's squared distance to its cluster mean,
i.e. groups rows whose K/V sets differ in few blocks. k is the number of waves, so a cluster is about one wave's
rows (k-means does not balance sizes). Clusters are laid out by their first row, rows within in original order.
"""

from __future__ import annotations

from functools import partial

import torch

from wavealign import reorderers
from wavealign.blockmask import check_int


def _kmeans_pp(x: torch.Tensor, k: int, uniform: torch.Tensor) -> torch.Tensor:
    """(G, k, NB) start centroids: the first row drawn uniformly, each next with probability ~ squared distance to
    the nearest centroid so far (inverse-CDF draws from ``uniform`` (G, k), so a seed draws alike on any device)."""
    g, mb, _ = x.shape
    sq = (x * x).sum(-1)
    first = (uniform[:, 0] * mb).long().clamp(max=mb - 1)
    centroids = [x[torch.arange(g), first]]
    nearest = torch.full((g, mb), float("inf"), device=x.device)
    for j in range(1, k):
        c = centroids[-1]
        d2 = (sq - 2 * torch.bmm(x, c.unsqueeze(-1)).squeeze(-1) + (c * c).sum(-1, keepdim=True)).clamp_min(0)
        nearest = torch.minimum(nearest, d2)
        cdf = nearest.cumsum(-1)
        target = (uniform[:, j] * cdf[:, -1]).unsqueeze(-1)
        pick = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp(max=mb - 1)
        centroids.append(x[torch.arange(g), pick])
    return torch.stack(centroids, 1)


def kmeans_labels(x: torch.Tensor, k: int, iters: int, uniform: torch.Tensor) -> torch.Tensor:
    """(G, MB) cluster of each row of ``x`` (G, MB, NB) float after ``iters`` Lloyd steps from k-means++ drawn with
    ``uniform`` (G, k) numbers in [0, 1)."""
    g, mb, _ = x.shape
    uniform = uniform.to(x.device)
    centroids = _kmeans_pp(x, k, uniform)
    labels = torch.zeros(g, mb, dtype=torch.long, device=x.device)
    for step in range(iters + 1):
        # ||x||^2 is the same for every centroid of a row: the nearest minimises ||c||^2 - 2 x.c
        score = (centroids * centroids).sum(-1).unsqueeze(1) - 2 * torch.bmm(x, centroids.transpose(1, 2))
        new = score.argmin(-1)
        if step and torch.equal(new, labels):
            break
        labels = new
        if step == iters:
            break
        onehot = torch.nn.functional.one_hot(labels, k).to(x.dtype).transpose(1, 2)  # (G, k, MB)
        sizes = onehot.sum(-1, keepdim=True)
        means = torch.bmm(onehot, x) / sizes.clamp_min(1)
        centroids = torch.where(sizes > 0, means, centroids)  # an empty cluster keeps its centroid
    return labels


def group(mask: torch.Tensor, *, wave_size: int, seed: int, iters: int) -> torch.Tensor:
    """Each head's rows, k-means cluster by cluster (k = number of waves)."""
    g, mb, _ = mask.shape
    k = reorderers.blocks_per_wave(mb, wave_size)
    if k < 2:
        return torch.arange(mb, device=mask.device).expand(g, mb).contiguous()
    uniform = torch.rand(g, k, generator=reorderers.cpu_generator(seed))
    step = reorderers.heads_per_chunk(mask, 4, budget_bytes=1 << 30)
    labels = torch.cat([kmeans_labels(mask[h:h + step].float(), k, iters, uniform[h:h + step])
                        for h in range(0, g, step)])
    return reorderers.order_by_group(labels)


reorderers.register(
    "clustering", group, {"iters": 20},  # Lloyd steps at most (fewer once no row changes cluster)
    "k-means (k-means++ start, Lloyd steps) of rows into as many clusters as waves",
    reference="Lloyd 1982; Arthur and Vassilvitskii, SODA 2007 (k-means++)",
    checks={"iters": partial(check_int, lo=0, hi=10_000)}, label="Clustering", color="tab:cyan")
