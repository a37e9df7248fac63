"""Random control: uniformly random blocks at a given density, ignoring Q/K.

Reuses ``wavealign.synthetic.random_mask``: each row keeps ``density * NB`` blocks, scaled per row by
U(1 - nnz_spread, 1 + nnz_spread) to give a chosen spread of row NNZ.
"""

from __future__ import annotations

import torch

from wavealign import masks, synthetic
from wavealign.masks._common import check_qkv, num_blocks

PARAMS = {"density": 0.25, "nnz_spread": 0.0, "seed": 0}


def build(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, *, density: float,
          nnz_spread: float, seed: int) -> torch.Tensor:
    """A random (B, H, MB, NB) mask of mean ``density``, the same for a given ``seed``."""
    check_qkv(q, k, v, block_size)
    b, h, n, _ = q.shape
    nb = num_blocks(n, block_size)
    mask = synthetic.random_mask(b * h, nb, nb, density, nnz_spread=nnz_spread, seed=seed, device=q.device)
    return mask.view(b, h, nb, nb)


masks.register("random", build, PARAMS, "uniformly random blocks at a given density (control)")

if __name__ == "__main__":
    from wavealign.masks._draw import main

    raise SystemExit(main("random"))
