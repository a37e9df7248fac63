"""Random controls, ignoring Q/K: ``random`` keeps every block independently with probability ``density``
(iid Bernoulli, binomial row NNZ, the paper's random control); ``random-fixed-nnz`` gives each row a set NNZ
(``density * NB`` scaled per row by U(1 - nnz_spread, 1 + nnz_spread)), a lock-step control whose rows all
finish together, so Stage 2 has nothing to align.

Both reuse ``wavealign.synthetic``, so a seed gives the same mask there and here.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from wavealign import masks, synthetic
from wavealign.masks._common import check_qkv, num_blocks


def _on_qkv_shape(generate: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A mask ``build`` that draws ``generate``'s (B*H, NB, NB) mask for q's shape."""

    def build(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, **params) -> torch.Tensor:
        check_qkv(q, k, v, block_size)
        b, h, n, _ = q.shape
        nb = num_blocks(n, block_size)
        return generate(b * h, nb, nb, device=q.device, **params).view(b, h, nb, nb)

    return build


masks.register("random", _on_qkv_shape(synthetic.random_mask), {"density": 0.25, "seed": 0},
               "iid Bernoulli blocks at a given density, binomial row NNZ (control)")
masks.register("random-fixed-nnz", _on_qkv_shape(synthetic.fixed_nnz_mask),
               {"density": 0.25, "nnz_spread": 0.0, "seed": 0},
               "random columns with a set row NNZ (lock-step control)")

if __name__ == "__main__":
    from wavealign.masks._draw import main

    raise SystemExit(main("random"))
