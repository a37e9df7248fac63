"""Stage 1 of WaveAlign (paper Alg. 1): each head's rows sorted by the polar angle of their coordinates in the top-2
left singular subspace of the column-centered mask, so rows with similar K/V sets run in the same wave. Matrix-free
subspace iteration on the CPU; a CUDA mask takes the packed int8 tensor-core path of ``stage1_cuda``.
"""

from __future__ import annotations

import torch

from wavealign import nvrtc
from wavealign.reorderers.wavealign import stage1_cuda, subspace

# Stage 1 falls back to the original order when sigma_2 <= RANK_TOL * sigma_1 (centered rank < 2)
RANK_TOL = 1e-4
# bytes of float32 mask copy per batched Stage-1 chunk; bounds memory, not the result
CHUNK_BYTES = 1 << 30


def spatial_order(mask: torch.Tensor, iters: int = 10, seed: int = 0,
                  rayleigh_ritz: bool = True) -> torch.Tensor:
    """Stage 1 for a (G, MB, NB) bool mask: (G, MB) row order by the polar angle of (u1, u2)."""
    g, mb, _ = mask.shape
    # the CUDA path holds the mask as bits (1/32 of the float copy), so all heads go in one batch
    per_chunk = g if nvrtc.usable(mask) else max(1, CHUNK_BYTES // max(1, 4 * mask[0].numel()))
    return torch.cat([_spatial_chunk(mask[i:i + per_chunk], iters, seed, rayleigh_ritz)
                      for i in range(0, g, per_chunk)]) if g else mask.new_zeros((0, mb), dtype=torch.long)


def centered_top2(mask: torch.Tensor, iters: int = 10, seed: int = 0,
                  rayleigh_ritz: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Alg. 1, matrix-free: top-2 left singular vectors (G, MB, 2) and values (G, 2) of the
    column-centered (G, MB, NB) mask, never forming the centered mask or a Gram matrix.

    The 2-column blocks are kept transposed, (G, 2, MB), so both products stream M row-major
    (X^T M and Y^T M^T), several times faster on CPU BLAS than M^T X. A CUDA mask takes the packed
    int8 tensor-core path of ``stage1_cuda`` (same start, same iterations, float32-level accuracy).
    """
    if nvrtc.usable(mask):
        return stage1_cuda.centered_top2(mask, iters, seed, rayleigh_ritz)
    g, mb, _ = mask.shape
    m = mask.float()
    c = m.sum(1, keepdim=True)  # Alg. 1 line 1: c = M^T 1, column sums (G, 1, NB)
    xt = subspace.start_block(g, mb, seed, mask.device)  # Alg. 1 line 2
    for _ in range(iters):
        yt = _centered_t_matvec(m, c, xt)  # Alg. 1 line 4: Y = M^T X - (1/MB) c (1^T X)
        zt = torch.bmm(yt, m.transpose(1, 2)) - (yt * c).sum(-1, keepdim=True) / mb  # line 5: Z = MY - (1/MB) 1 (c^T Y)
        xt = subspace.orth2(zt)  # line 6: X = orth(Z)
    yt = _centered_t_matvec(m, c, xt)
    # Rayleigh-Ritz: the 2x2 quotient of C C^T on span(X) gives sigma_1^2 >= sigma_2^2 and their vectors
    evals, evecs = torch.linalg.eigh(torch.bmm(yt, yt.transpose(1, 2)).double())  # ascending
    x = xt.transpose(1, 2)
    if rayleigh_ritz:
        x = torch.bmm(x.double(), evecs.flip(-1)).float()
    return x, evals.flip(-1).clamp_min(0).sqrt().float()


def _spatial_chunk(mask: torch.Tensor, iters: int, seed: int, rayleigh_ritz: bool) -> torch.Tensor:
    g, mb, _ = mask.shape
    u, sigma = centered_top2(mask, iters, seed, rayleigh_ritz)
    u = _canonical_signs(u)
    order = torch.sort(torch.atan2(u[..., 1], u[..., 0]), dim=-1, stable=True).indices
    # rank < 2 after centering: the angle carries no information, keep the original order
    low_rank = sigma[:, 1] <= RANK_TOL * sigma[:, 0].clamp_min(1e-30)
    if mb < 3:
        low_rank[:] = True
    identity = torch.arange(mb, device=mask.device).expand(g, mb)
    return torch.where(low_rank.unsqueeze(-1), identity, order)


def _centered_t_matvec(m: torch.Tensor, c: torch.Tensor, xt: torch.Tensor) -> torch.Tensor:
    """((M - (1/MB) 1 c^T)^T X)^T = X^T M - (1/MB) (X^T 1) c^T, for X^T of shape (G, 2, MB)."""
    return torch.bmm(xt, m) - xt.sum(-1, keepdim=True) * c / m.shape[1]


def _canonical_signs(u: torch.Tensor) -> torch.Tensor:
    """Flip each singular vector so its largest-magnitude entry is positive (an SVD's sign is arbitrary)."""
    pivot = u.abs().argmax(dim=1, keepdim=True)
    sign = torch.sign(torch.gather(u, 1, pivot))
    return u * torch.where(sign == 0, torch.ones_like(sign), sign)
