"""A mask method's own token order: the permutation a method such as VSA (3D cubes) or Sparse VideoGen 2 (k-means
clusters) applies to Q and K/V before it builds its block mask, and its inverse for the output.

    order = TokenOrder(q_perm=perm, kv_perm=perm)        # int64 (B, H, N): position p holds original token perm[p]
    q_o, k_o, v_o = order.gather(q), order.gather(k, "kv"), order.gather(v, "kv")
    out = order.scatter(attention(q_o, k_o, v_o))        # back in the original token order, bitwise

Gathers and the scatter are pure copies (advanced indexing, one index per (batch, head, token), broadcast over D),
so attention in the permuted order returns exactly the values it would in the original one, row for row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch


def _check_perm(name: str, perm: torch.Tensor) -> None:
    if not isinstance(perm, torch.Tensor) or perm.dtype != torch.int64 or perm.dim() != 3 or perm.numel() == 0:
        shape = f"{perm.dtype} {tuple(perm.shape)}" if isinstance(perm, torch.Tensor) else type(perm).__name__
        raise ValueError(f"{name} must be a non-empty int64 tensor (B, H, N), got {shape}")


@dataclass(frozen=True)
class TokenOrder:
    """The token order a method builds its mask in: ``q_perm`` and ``kv_perm`` (int64 (B, H, N)): position p of
    the method's order holds original token ``perm[..., p]``; ``q_labels`` / ``kv_labels`` (int64 (B, H, N), or
    None) name the segment (VSA cube, SVG2 cluster) of each position in that order. Every (b, h) row of a perm is
    a permutation of range(N); a perm may be an expanded view (one order shared by all heads)."""

    q_perm: torch.Tensor
    kv_perm: torch.Tensor
    q_labels: torch.Tensor | None = None
    kv_labels: torch.Tensor | None = None

    def __post_init__(self) -> None:
        _check_perm("q_perm", self.q_perm)
        _check_perm("kv_perm", self.kv_perm)
        if self.q_perm.shape != self.kv_perm.shape:
            raise ValueError(f"q_perm and kv_perm must have one shape (B, H, N), got {tuple(self.q_perm.shape)} and "
                             f"{tuple(self.kv_perm.shape)}")
        for name in ("q_labels", "kv_labels"):
            labels = getattr(self, name)
            if labels is not None and (labels.dtype != torch.int64 or labels.shape != self.q_perm.shape):
                raise ValueError(f"{name} must be None or int64 of the perms' shape {tuple(self.q_perm.shape)}, got "
                                 f"{labels.dtype} {tuple(labels.shape)}")

    @property
    def tokens(self) -> int:
        return self.q_perm.shape[-1]

    def _perm(self, which: Literal["q", "kv"]) -> torch.Tensor:
        if which not in ("q", "kv"):
            raise ValueError(f"which must be 'q' or 'kv', got {which!r}")
        return self.q_perm if which == "q" else self.kv_perm

    def _check_tensor(self, name: str, x: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor) or x.dim() != 4 or tuple(x.shape[:3]) != tuple(self.q_perm.shape):
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name} must be (B, H, N, D) with (B, H, N) = {tuple(self.q_perm.shape)}, got {shape}")

    def _index(self, perm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, h, _ = perm.shape
        rows = torch.arange(b, device=perm.device).view(b, 1, 1)
        heads = torch.arange(h, device=perm.device).view(1, h, 1)
        return rows, heads, perm

    def gather(self, x: torch.Tensor, which: Literal["q", "kv"] = "q") -> torch.Tensor:
        """``x`` (B, H, N, D) in this order: row p of the result is row ``perm[p]`` of ``x`` (q's perm or kv's)."""
        perm = self._perm(which)
        self._check_tensor("x", x)
        return x[self._index(perm.to(x.device))]

    def scatter(self, out: torch.Tensor) -> torch.Tensor:
        """The inverse of the q gather: ``out`` (B, H, N, D), rows in this order, back in the original order."""
        self._check_tensor("out", out)
        restored = torch.empty_like(out)
        restored[self._index(self.q_perm.to(out.device))] = out
        return restored
