"""``wavealign``: WaveAlign's Stage 1 (paper Alg. 1), rows sorted by the polar angle of their coordinates in the top-2
left singular subspace of the column-centered mask (``stage1``; its CUDA path ``stage1_cuda`` and ``stage1.cu``)."""

from __future__ import annotations

from functools import partial

import torch

from wavealign import reorderers
from wavealign.blockmask import check_int
from wavealign.masks._common import check_flag
from wavealign.reorderers.wavealign.stage1 import spatial_order

# Stage 1's subspace iterations: the paper uses T = 10; a hundred times that is past any use, and a typo (1e9) would
# hold a worker for days
MAX_ITERS = 1_000


def group(mask: torch.Tensor, *, wave_size: int, seed: int, iters: int, rayleigh_ritz: bool) -> torch.Tensor:
    """Stage 1 of every head (``wave_size`` is Stage 2's business)."""
    return spatial_order(mask, iters=iters, seed=seed, rayleigh_ritz=rayleigh_ritz)


reorderers.register(
    # iters: subspace iterations (T); rayleigh_ritz: rotate the converged 2-D subspace onto the singular vectors
    "wavealign", group, {"iters": 10, "rayleigh_ritz": True},
    "Stage 1: polar angle in the rank-2 subspace of the column-centered mask (matrix-free subspace iteration)",
    reference="WaveAlign, Alg. 1",
    checks={"iters": partial(check_int, lo=1, hi=MAX_ITERS), "rayleigh_ritz": check_flag},
    cuda_graph=True, label="WaveAlign S1", staged_label="WaveAlign", color="tab:red")
