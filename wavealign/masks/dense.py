"""Dense control: every (query block, kv block) pair is computed."""

from __future__ import annotations

import torch

from wavealign import masks
from wavealign.blockmask import check_fits, check_int


def full(heads: int, q_blocks: int, kv_blocks: int, *, device: torch.device | str = "cpu") -> torch.Tensor:
    """An all-True (heads, q_blocks, kv_blocks) mask, refused before allocating where ``device`` cannot hold it."""
    for name, size in (("heads", heads), ("q_blocks", q_blocks), ("kv_blocks", kv_blocks)):
        check_int(name, size, lo=1)
    check_fits(f"a ({heads}, {q_blocks}, {kv_blocks}) dense mask", heads * q_blocks * kv_blocks, device)
    return torch.ones(heads, q_blocks, kv_blocks, dtype=torch.bool, device=device)


masks.register("dense", None, {}, "every block (control)", from_shape=full)

if __name__ == "__main__":
    from wavealign.masks._draw import main

    raise SystemExit(main("dense"))
