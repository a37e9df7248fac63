"""``lsh``: rows bucketed by random-hyperplane locality-sensitive hashing (SimHash), on the GPU or the CPU.

Each row, as a 0/1 vector over the K/V blocks, gets one bit per random Gaussian hyperplane: the side it lies on.
Two rows agree on a bit with probability 1 - angle / pi (Charikar, "Similarity estimation techniques from rounding
algorithms", STOC 2002), so rows with close K/V sets share most bits. Rows are sorted by their ``bits``-bit code:
rows in one bucket sit together, buckets in the code's numeric order.
"""

from __future__ import annotations

from functools import partial

import torch

from wavealign import reorderers
from wavealign.blockmask import check_int


def codes(mask: torch.Tensor, bits: int, seed: int) -> torch.Tensor:
    """(G, MB) int64 SimHash code of every row: bit j set when the row lies on the positive side of hyperplane j."""
    g, mb, nb = mask.shape
    dtype = torch.float16 if mask.is_cuda else torch.float32  # 0/1 rows and Gaussian planes: the sign is robust
    planes = torch.randn(nb, bits, generator=reorderers.cpu_generator(seed)).to(mask.device, dtype)
    weights = 2 ** torch.arange(bits, device=mask.device)
    out = torch.empty(g, mb, dtype=torch.long, device=mask.device)
    step = reorderers.heads_per_chunk(mask, torch.finfo(dtype).bits // 8)
    for h in range(0, g, step):
        out[h:h + step] = ((mask[h:h + step].to(dtype) @ planes > 0).long() * weights).sum(-1)
    return out


def group(mask: torch.Tensor, *, wave_size: int, seed: int, bits: int) -> torch.Tensor:
    """Each head's rows sorted by SimHash code (stably: a bucket keeps the original order)."""
    return torch.sort(codes(mask, bits, seed), dim=-1, stable=True).indices


reorderers.register(
    "lsh", group, {"bits": 16},  # hyperplanes, one code bit each
    "random-hyperplane LSH (SimHash): rows sorted by their bits-bit code",
    reference="Charikar, STOC 2002 (random-hyperplane LSH)", checks={"bits": partial(check_int, lo=1, hi=62)},
    label="LSH", color="tab:olive")
