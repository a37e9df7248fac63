"""The two small pieces of Stage 1 that its CPU and CUDA paths share: the start block and orth(Z)."""

from __future__ import annotations

import torch


def start_block(heads: int, mb: int, seed: int, device: str | torch.device) -> torch.Tensor:
    """The random orthonormal (G, 2, MB) start of Alg. 1 (line 2), drawn on the CPU so every device starts alike."""
    start = torch.randn(2, mb, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return orth2(start.float().to(device).expand(heads, 2, mb).contiguous())


def orth2(zt: torch.Tensor) -> torch.Tensor:
    """Closed-form orthonormalisation of the two rows of each (G, 2, MB) block (Gram-Schmidt, twice)."""
    eps = torch.finfo(zt.dtype).tiny
    q1 = zt[:, 0] / zt[:, 0].norm(dim=-1, keepdim=True).clamp_min(eps)
    q2 = zt[:, 1]
    for _ in range(2):  # a second pass restores orthogonality lost to cancellation
        q2 = q2 - (q1 * q2).sum(-1, keepdim=True) * q1
    q2 = q2 / q2.norm(dim=-1, keepdim=True).clamp_min(eps)
    return torch.stack((q1, q2), dim=1)
