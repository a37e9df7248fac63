"""Sparse VideoGen 2's semantic-aware permutation (Yang et al., 2025), on our fixed 128 x 128 block grid.

Upstream: svg-project/Sparse-VideoGen (commit 5ce7b01), ``svg/kmeans_utils.py`` (``batch_kmeans_Euclid``,
``identify_dynamic_map``, ``weighted_softmax``, ``permute_tensor_by_labels``) as ``svg/models/wan/attention.py``
wires them (``WanAttn_SAPAttn_Processor.semantic_aware_permutation``); defaults from its Wan 720p run script
``scripts/wan/wan_t2v_720p_sap.sh`` (300 query and 1,000 key clusters, top-p 0.9, at least 10 % of the key clusters
per query cluster, 50 k-means iterations from a cold start).

Per head:

1. **k-means** (Euclidean, Lloyd) of the query tokens into ``q_clusters`` and of the key tokens into ``kv_clusters``:
   centroids start at tokens drawn at random (seeded), then ``iters`` rounds of "each token to its nearest centroid,
   each centroid to the mean of its tokens" (an emptied cluster keeps its centroid).
2. **Semantic-aware permutation**: tokens sorted by cluster (stably: within a cluster in their original order), the
   queries by their cluster, keys and values by the key's. This is the method's token order (``token_order``).
3. **Cluster pairs kept** (upstream's dynamic map): per query cluster, the centroid scores qc . kc / sqrt(D) go
   through a softmax weighted by each key cluster's size (its share of the tokens); key clusters are kept in
   descending probability while the probability before them is at most ``top_p`` (so the one crossing it is kept),
   and the ``min_kv_ratio`` x ``kv_clusters`` most probable are kept whatever their mass.
4. **Our block grid** (the approximation): upstream runs a kernel on variable-size blocks, one per (query cluster,
   key cluster), so it computes exactly the token pairs of kept cluster pairs. Our kernels take fixed 128 x 128
   blocks, so in the permuted sequence block (i, j) is kept iff ANY (query cluster, key cluster) pair overlapping it
   is kept. This covers every token pair upstream computes (its recall of upstream's pairs and of their attention
   mass is 1) and adds the pairs of dropped cluster pairs that share a block with a kept one: more density, more
   mass. How much, against upstream's rule on the same Q/K: ``benchmarks/results/svg2-approximation/``.

Differences from upstream, each for determinism or precision (none changes the rule): a fixed number of iterations
(upstream also stops once no centroid moves by 1e-4, and warm-starts later denoising steps from the last step's
centroids with 2 iterations; a mask here is built from its own Q/K alone, so each build is a cold start); centroid
sums in float64 (exact for bf16 tokens, so the same on every run and device; upstream adds float32 atomics);
centroids kept in float32 between iterations and rounded to the input dtype only for the distances (upstream keeps
them in the input dtype); probabilities and their cumulative sums in float64 (upstream: bf16 probabilities); stable
sorts, so ties fall in index order (upstream's ``argsort`` is unstable). The distance drops the token's own |x|^2,
which is the same for every centroid and does not move the argmin (upstream adds it and clamps at 0).

On a GPU each k-means iteration is two Triton kernels: the nearest-centroid search (the design of upstream's
``euclid_assign_triton``: a tile of tokens against every centroid chunk, a running argmin, no (N x C) distance matrix
in memory) and the cluster sums (upstream's ``triton_centroid_update_sorted_euclid``: tokens in label order, each
program sums the runs of its span and adds them atomically, here in float64, exact for bf16 tokens, so the same on
every run). The torch code here is the CPU path and what the tests hold the kernels to (``use_kernel=False`` runs it
on a GPU too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import torch

from wavealign import masks
from wavealign.blockmask import check_int, check_seed
from wavealign.masks import _kernels
from wavealign.masks._common import check_fraction, check_number, check_qkv, rows_per_chunk

try:
    import triton
    import triton.language as tl
except ImportError:  # the CPU build of torch on a machine without triton: the torch code runs
    triton = None

PARAMS = {"q_clusters": 300, "kv_clusters": 1000, "top_p": 0.9, "min_kv_ratio": 0.1, "iters": 50, "seed": 0}
# bounds checked before any work: upstream runs 100-300 query and 500-1000 key clusters and 50-100 rounds; 16x and
# 20x past them (q_clusters=1e9 allocated 16 GB before failing, iters=1e9 ran for minutes)
MAX_CLUSTERS, MAX_ITERS = 16384, 1000


@dataclass(frozen=True)
class Clusters:
    """One k-means result per head: ``labels`` int64 (H, N), ``centroids`` float32 (H, C, D), ``sizes`` int64 (H, C)
    (the number of tokens of each cluster; the centroid of an empty one is where it last was)."""

    labels: torch.Tensor
    centroids: torch.Tensor
    sizes: torch.Tensor


def kmeans(x: torch.Tensor, clusters: int, iters: int, seed: int = 0, *, use_kernel: bool | None = None) -> Clusters:
    """Lloyd's k-means of each head's tokens x (H, N, D), ``iters`` rounds from ``clusters`` tokens drawn with
    replacement (upstream's init: ``torch.randint``, here from a CPU generator seeded with ``seed``, so a head's start
    depends only on the seed and its place in x). The labels are the last assignment and the centroids their clusters'
    means (upstream without its early stop). ``use_kernel`` picks the Triton kernels (default: where
    ``_kernels.enabled``)."""
    h, n, d = x.shape
    clusters = check_int("clusters", clusters, lo=1, hi=MAX_CLUSTERS)
    iters = check_int("iters", iters, lo=1, hi=MAX_ITERS)
    start = torch.randint(n, (h, clusters), generator=torch.Generator().manual_seed(seed)).to(x.device)
    kernel = _kernels.enabled(x) if use_kernel is None else use_kernel
    labels = torch.empty(h, n, dtype=torch.long, device=x.device)
    centroids = torch.empty(h, clusters, d, device=x.device)
    sizes = torch.empty(h, clusters, dtype=torch.long, device=x.device)
    # the torch path's float64 copy of a head's tokens (for the centroid sums) is its largest buffer
    step = _kernels.heads_per_chunk(n * d * 8, x.device)
    for h0 in range(0, h, step):
        xs = x[h0:h0 + step]
        c = torch.gather(xs, 1, start[h0:h0 + step, :, None].expand(-1, -1, d)).float()
        for _ in range(iters):
            lab = nearest_centroid(xs, c, use_kernel=kernel)
            c, size = cluster_means(xs, lab, clusters, previous=c, use_kernel=kernel)
        labels[h0:h0 + step], centroids[h0:h0 + step], sizes[h0:h0 + step] = lab, c, size
    return Clusters(labels, centroids, sizes)


def nearest_centroid(x: torch.Tensor, centroids: torch.Tensor, *, use_kernel: bool = False) -> torch.Tensor:
    """Per token of x (H, N, D), the index of its nearest centroid (H, C, D) in Euclidean distance, int64 (H, N);
    ties to the lower index. Distances are |c|^2 - 2 x . c with the centroids rounded to x's dtype (bf16 on the tensor
    cores, as upstream), products and sums in float32."""
    c = centroids.to(x.dtype)
    c_sq = c.float().square().sum(-1)
    if use_kernel:
        return _nearest_centroid_triton(x, c, c_sq)
    h, n, _ = x.shape
    out = torch.empty(h, n, dtype=torch.long, device=x.device)
    cf = c.float().transpose(1, 2)
    step = rows_per_chunk(centroids.shape[1] * h, x.device)
    for s in range(0, n, step):
        dist = c_sq[:, None, :] - 2.0 * (x[:, s:s + step].float() @ cf)
        out[:, s:s + step] = dist.argmin(-1)
    return out


def cluster_means(x: torch.Tensor, labels: torch.Tensor, clusters: int, previous: torch.Tensor | None = None, *,
                  use_kernel: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Each cluster's mean token, float32 (H, C, D), and size, int64 (H, C), from x (H, N, D) and labels (H, N).
    Sums are float64: exact for bf16 tokens, so any order of the tokens (a permutation, the kernel's) gives the same
    means. An empty cluster keeps its ``previous`` centroid (zeros without one). ``use_kernel``: the sums by a Triton
    kernel over the tokens sorted by label."""
    h, n, d = x.shape
    flat = _flat(labels, clusters)
    sizes = torch.bincount(flat, minlength=h * clusters).view(h, clusters)
    if previous is None:
        previous = torch.zeros(h, clusters, d, device=x.device)
    if use_kernel:
        return _cluster_means_triton(x, labels, sizes, previous), sizes
    sums = torch.zeros(h * clusters, d, dtype=torch.float64, device=x.device)
    sums.index_add_(0, flat, x.reshape(h * n, d).double())
    means = (sums.view(h, clusters, d) / sizes[..., None].clamp(min=1)).float()
    return torch.where(sizes[..., None] > 0, means, previous), sizes


def keep_clusters(q_centroids: torch.Tensor, kv_centroids: torch.Tensor, kv_sizes: torch.Tensor, top_p: float,
                  min_kv_ratio: float) -> torch.Tensor:
    """Upstream's dynamic map: bool (H, Cq, Ck), the key clusters each query cluster keeps. Per query cluster, the
    softmax of its centroid scores weighted by the key clusters' sizes (empty ones weigh nothing); key clusters in
    descending probability (ties in index order) are kept while the probability before them is <= ``top_p``, and the
    first ``int(min_kv_ratio * Ck)`` (at least one) whatever their mass."""
    d = q_centroids.shape[-1]
    scores = (q_centroids.float() @ kv_centroids.float().transpose(1, 2)).double() / math.sqrt(d)
    present = (kv_sizes > 0)[:, None, :]
    top = scores.masked_fill(~present, float("-inf")).amax(-1, keepdim=True)
    weighted = torch.where(present, kv_sizes[:, None, :] * torch.exp(scores - top), 0.0)
    probs = weighted / weighted.sum(-1, keepdim=True)
    ordered, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    before = torch.nn.functional.pad(torch.cumsum(ordered, -1)[..., :-1], (1, 0))
    kept = before <= top_p
    kept[..., :max(1, int(min_kv_ratio * probs.shape[-1]))] = True
    return torch.zeros_like(kept).scatter_(-1, order, kept)


def block_mask(cluster_map: torch.Tensor, q_labels: torch.Tensor, kv_labels: torch.Tensor, block_size: int
               ) -> torch.Tensor:
    """Our grid's mask, bool (H, MB, NB), of the permuted sequence whose positions hold the clusters ``q_labels``
    (H, N) and ``kv_labels`` (H, N), each sorted: block (i, j) is kept iff some cluster pair of ``cluster_map``
    (H, Cq, Ck) meets it (a query cluster among rows i, a key cluster among columns j). An empty cluster meets no
    block, so its row and column of the map never count."""
    h, cq, ck = cluster_map.shape
    q_present = torch.bincount(_flat(q_labels, cq), minlength=h * cq).view(h, cq) > 0
    kv_present = torch.bincount(_flat(kv_labels, ck), minlength=h * ck).view(h, ck) > 0
    present = cluster_map & q_present[:, :, None] & kv_present[:, None, :]
    rows = _any_over_blocks(present, q_labels, block_size)  # (H, MB, Ck): the key clusters each query block keeps
    return _any_over_blocks(rows.transpose(1, 2), kv_labels, block_size).transpose(1, 2)


def _flat(labels: torch.Tensor, clusters: int) -> torch.Tensor:
    return (labels + clusters * torch.arange(labels.shape[0], device=labels.device)[:, None]).flatten()


def _any_over_blocks(table: torch.Tensor, sorted_labels: torch.Tensor, block_size: int) -> torch.Tensor:
    """table (H, C, X) bool, sorted_labels (H, N): per block of ``block_size`` positions, the OR of the rows of the
    clusters it holds, (H, ceil(N / block_size), X). The clusters of a block are the id range from its first
    position's to its last's, so the OR is a difference of prefix counts (an empty cluster's row must be False)."""
    x, n = table.shape[2], sorted_labels.shape[1]
    starts = torch.arange(0, n, block_size, device=table.device)
    ends = (starts + block_size).clamp(max=n) - 1
    prefix = torch.nn.functional.pad(table.cumsum(1, dtype=torch.int32), (0, 0, 1, 0))  # (H, C + 1, X)
    first = sorted_labels[:, starts][..., None].expand(-1, -1, x)
    last = sorted_labels[:, ends][..., None].expand(-1, -1, x)
    return (prefix.gather(1, last + 1) - prefix.gather(1, first)) > 0


if triton is not None:

    @triton.jit
    def _nearest_centroid_kernel(X, C, CSQ, OUT, N, K, D, s_xh, s_xn, s_ch, s_ck, s_qh, s_oh,
                                 BN: tl.constexpr, BC: tl.constexpr, BD: tl.constexpr):
        """BN tokens of one head against every centroid, BC at a time: |c|^2 - 2 x . c and a running argmin (a
        strictly smaller distance replaces, so ties keep the lower index), the (BN x C) distances never stored."""
        pid = tl.program_id(0)
        h = tl.program_id(1).to(tl.int64)
        rows = pid * BN + tl.arange(0, BN)
        dims = tl.arange(0, BD)
        x = tl.load(X + h * s_xh + rows[:, None].to(tl.int64) * s_xn + dims[None, :],
                    mask=(rows[:, None] < N) & (dims[None, :] < D), other=0.0)
        best = tl.full((BN,), float("inf"), tl.float32)
        best_idx = tl.zeros((BN,), tl.int64)
        for c0 in range(0, K, BC):
            cols = c0 + tl.arange(0, BC)
            c = tl.load(C + h * s_ch + cols[:, None] * s_ck + dims[None, :],
                        mask=(cols[:, None] < K) & (dims[None, :] < D), other=0.0)
            c_sq = tl.load(CSQ + h * s_qh + cols, mask=cols < K, other=float("inf"))
            dist = c_sq[None, :] - 2.0 * tl.dot(x, tl.trans(c), input_precision="ieee")
            chunk_best = tl.min(dist, 1)
            chunk_idx = tl.argmin(dist, 1).to(tl.int64) + c0
            better = chunk_best < best
            best = tl.where(better, chunk_best, best)
            best_idx = tl.where(better, chunk_idx, best_idx)
        tl.store(OUT + h * s_oh + rows, best_idx, mask=rows < N)


    @triton.jit
    def _cluster_sums_kernel(X, PERM, SORTED, SUMS, N, C, D, s_xh, s_xn, s_ph, s_lh,
                             BN: tl.constexpr, BD: tl.constexpr):
        """BN consecutive positions of one head's label order (PERM: the tokens, SORTED: their labels): the float64
        sum of each cluster's run among them, added to SUMS (H, C, D) with one atomic per run and dimension (upstream's
        sorted-id walk). Spans of equal length keep a huge cluster from stalling one program; float64 sums of bf16
        tokens are exact, so the atomics' order does not change them."""
        pid = tl.program_id(0)
        h = tl.program_id(1).to(tl.int64)
        pos = pid * BN + tl.arange(0, BN)
        inside = pos < N
        labels = tl.load(SORTED + h * s_lh + pos, mask=inside, other=-1)
        token = tl.load(PERM + h * s_ph + pos, mask=inside, other=0)
        dims = tl.arange(0, BD)
        x = tl.load(X + h * s_xh + token[:, None] * s_xn + dims[None, :], mask=inside[:, None] & (dims[None, :] < D),
                    other=0.0)
        first = tl.load(SORTED + h * s_lh + pid * BN)
        last = tl.load(SORTED + h * s_lh + tl.minimum(pid * BN + BN, N) - 1)
        for c in range(first, last + 1):
            run = labels == c
            if tl.sum(run.to(tl.int32), 0) > 0:
                part = tl.sum(tl.where(run[:, None], x, 0.0).to(tl.float64), 0)
                tl.atomic_add(SUMS + (h * C + c) * D + dims, part, mask=dims < D)


# the nearest-centroid kernel's tiling on a GPU (the interpreter takes small tiles)
ASSIGN_CONFIG = {"BN": 128, "BC": 64, "num_warps": 4, "num_stages": 2}


def _nearest_centroid_triton(x: torch.Tensor, centroids: torch.Tensor, c_sq: torch.Tensor,
                             config: dict[str, int] | None = None) -> torch.Tensor:
    h, n, d = x.shape
    x, centroids, c_sq = x.contiguous(), centroids.contiguous(), c_sq.contiguous()
    out = torch.empty(h, n, dtype=torch.long, device=x.device)
    cfg = {**ASSIGN_CONFIG, **(config or {})} if x.is_cuda else {"BN": 16, "BC": 16, "num_warps": 1, "num_stages": 1}
    _nearest_centroid_kernel[(triton.cdiv(n, cfg["BN"]), h)](
        x, centroids, c_sq, out, n, centroids.shape[1], d, x.stride(0), x.stride(1), centroids.stride(0),
        centroids.stride(1), c_sq.stride(0), out.stride(0), BN=cfg["BN"], BC=cfg["BC"],
        BD=max(16, triton.next_power_of_2(d)), num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return out


def _cluster_means_triton(x: torch.Tensor, labels: torch.Tensor, sizes: torch.Tensor, previous: torch.Tensor
                          ) -> torch.Tensor:
    h, n, d = x.shape
    x = x.contiguous()
    ordered, perm = torch.sort(labels.to(torch.int32), dim=-1)  # any order within a cluster: the sums are exact
    sums = torch.zeros(h, sizes.shape[1], d, dtype=torch.float64, device=x.device)
    bn = 64 if x.is_cuda else 16
    _cluster_sums_kernel[(triton.cdiv(n, bn), h)](
        x, perm, ordered, sums, n, sizes.shape[1], d, x.stride(0), x.stride(1), perm.stride(0), ordered.stride(0),
        BN=bn, BD=max(16, triton.next_power_of_2(d)), num_warps=4 if x.is_cuda else 1)
    means = (sums / sizes[..., None].clamp(min=1)).float()
    return torch.where(sizes[..., None] > 0, means, previous)


def token_order(q: torch.Tensor, k: torch.Tensor, *, block_size: int = 128, q_clusters: int, kv_clusters: int,
                top_p: float, min_kv_ratio: float, iters: int, seed: int) -> masks.TokenOrder:
    """The semantic-aware permutation of q, k (B, H, N, D): per head, the tokens sorted (stably) by their k-means
    cluster, queries by Q's clusters and keys/values by K's; the labels are each position's cluster."""
    check_qkv(q, k, k, block_size)
    b, h, n, d = q.shape
    perms, labels = [], []
    for x, clusters in ((q, q_clusters), (k, kv_clusters)):
        sorted_labels, perm = torch.sort(kmeans(x.reshape(b * h, n, d), clusters, iters, seed).labels, dim=-1,
                                         stable=True)
        perms.append(perm.view(b, h, n))
        labels.append(sorted_labels.view(b, h, n))
    return masks.TokenOrder(q_perm=perms[0], kv_perm=perms[1], q_labels=labels[0], kv_labels=labels[1])


def build(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, *, token_order: masks.TokenOrder,
          q_clusters: int, kv_clusters: int, top_p: float, min_kv_ratio: float, iters: int, seed: int
          ) -> torch.Tensor:
    """The mask (B, H, MB, NB) of q, k, v already in ``token_order`` (SVG2's clusters): the centroids are the
    clusters' means (what the k-means ended with), the cluster pairs kept by top-p, and a block kept iff it meets a
    kept pair (the module docstring's approximation)."""
    check_qkv(q, k, v, block_size)
    if token_order.q_labels is None or token_order.kv_labels is None:
        raise ValueError("token_order must carry q_labels and kv_labels (the clusters svg2's token_order names)")
    b, h, n, d = q.shape
    q_labels, kv_labels = (labels.to(q.device).reshape(b * h, n)
                           for labels in (token_order.q_labels, token_order.kv_labels))
    kernel = _kernels.enabled(q)
    q_centroids, _ = cluster_means(q.reshape(b * h, n, d), q_labels, q_clusters, use_kernel=kernel)
    kv_centroids, kv_sizes = cluster_means(k.reshape(b * h, n, d), kv_labels, kv_clusters, use_kernel=kernel)
    kept = keep_clusters(q_centroids, kv_centroids, kv_sizes, top_p, min_kv_ratio)
    mask = block_mask(kept, q_labels, kv_labels, block_size)
    return mask.view(b, h, *mask.shape[-2:])


masks.register("svg2", build, PARAMS, "k-means clusters of Q and K, cluster pairs kept by top-p (Sparse VideoGen 2)",
               checks={"q_clusters": partial(check_int, lo=1, hi=MAX_CLUSTERS),
                       "kv_clusters": partial(check_int, lo=1, hi=MAX_CLUSTERS),
                       "top_p": check_fraction, "min_kv_ratio": partial(check_number, lo=0.0, hi=1.0),
                       "iters": partial(check_int, lo=1, hi=MAX_ITERS), "seed": check_seed},
               token_order=token_order)

if __name__ == "__main__":
    from wavealign.masks._draw import main

    raise SystemExit(main("svg2"))
