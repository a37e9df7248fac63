"""Dense control: every (query block, kv block) pair is computed."""

from __future__ import annotations

import torch

from wavealign import masks
from wavealign.masks._common import check_qkv, num_blocks


def build(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128) -> torch.Tensor:
    """An all-True (B, H, MB, NB) mask."""
    check_qkv(q, k, v, block_size)
    b, h, n, _ = q.shape
    nb = num_blocks(n, block_size)
    return torch.ones(b, h, nb, nb, dtype=torch.bool, device=q.device)


masks.register("dense", build, {}, "every block (control)")

if __name__ == "__main__":
    from wavealign.masks._draw import main

    raise SystemExit(main("dense"))
