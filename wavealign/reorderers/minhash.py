"""``minhash``: rows grouped by MinHash locality-sensitive hashing with banding, on the GPU or the CPU.

A row is the set of K/V blocks it reads. Its signature holds ``num_perm`` min-wise hashes: under a random
permutation of the columns, the first column the row reads (Broder, "On the resemblance and containment of
documents", 1997); two rows agree on one with probability equal to their Jaccard similarity. The signature is cut
into ``bands`` bands of num_perm / bands hashes; rows that agree on a whole band are candidates (Leskovec, Rajaraman
and Ullman, "Mining of Massive Datasets", ch. 3.4), which for 64 hashes in 16 bands of 4 happens from a Jaccard
similarity of about (1/16)^(1/4) = 0.5. Rows linked by candidate pairs form a group (connected components); groups are
laid out by their first row, rows within a group in lexicographic signature order.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from wavealign import reorderers
from wavealign.blockmask import check_int

# a band key that does not fit 62 bits is hashed modulo this prime (collisions then merge a few groups)
_PRIME = 2**31 - 1


def signatures(mask: torch.Tensor, num_perm: int, seed: int) -> torch.Tensor:
    """(G, MB, num_perm) int64 min-wise hashes of each row: the rank, under each of ``num_perm`` seeded column
    permutations, of the first column the row reads; an empty row gets NB in every position."""
    g, mb, nb = mask.shape
    gen = reorderers.cpu_generator(seed)
    perms = torch.stack([torch.randperm(nb, generator=gen) for _ in range(num_perm)]).to(mask.device)
    sig = torch.empty(g, mb, num_perm, dtype=torch.long, device=mask.device)
    empty = ~mask.any(-1)
    step = reorderers.heads_per_chunk(mask, 1)
    for h in range(0, g, step):
        chunk = mask[h:h + step].to(torch.uint8)
        for p in range(num_perm):
            # argmax returns the first maximum: the first column, in permuted order, that the row reads
            sig[h:h + step, :, p] = chunk.index_select(-1, perms[p]).argmax(-1)
    return sig.masked_fill(empty.unsqueeze(-1), nb)


def band_keys(sig: torch.Tensor, bands: int, nb: int) -> torch.Tensor:
    """(G, MB, bands) int64: each band's hashes packed into one integer (exactly, when they fit 62 bits)."""
    g, mb, num_perm = sig.shape
    per_band = sig.view(g, mb, bands, num_perm // bands)
    bits = int(nb).bit_length()
    if bits * per_band.shape[-1] <= 62:
        shifts = torch.arange(per_band.shape[-1], device=sig.device) * bits
        return (per_band << shifts).sum(-1)
    key = torch.zeros(g, mb, bands, dtype=torch.long, device=sig.device)
    for j in range(per_band.shape[-1]):
        key = (key * 1_000_003 + per_band[..., j]) % _PRIME
    return key


def _band_representatives(key: torch.Tensor) -> torch.Tensor:
    """(G, MB): for each row, the smallest row index that has the same band key."""
    mb = key.shape[-1]
    sorted_key, idx = torch.sort(key, dim=-1, stable=True)
    starts = torch.ones_like(sorted_key, dtype=torch.bool)
    starts[:, 1:] = sorted_key[:, 1:] != sorted_key[:, :-1]
    segment = starts.long().cumsum(-1) - 1
    seg_min = torch.full_like(idx, mb).scatter_reduce(-1, segment, idx, reduce="amin", include_self=True)
    return torch.empty_like(idx).scatter_(-1, idx, torch.gather(seg_min, -1, segment))


def components(keys: torch.Tensor) -> torch.Tensor:
    """(G, MB) label of each row's connected component, rows linked when they share any band key; the label is the
    component's smallest row index (label propagation with pointer jumping)."""
    g, mb, bands = keys.shape
    reps = [_band_representatives(keys[..., b]) for b in range(bands)]
    label = torch.arange(mb, device=keys.device).expand(g, mb).contiguous()
    for _ in range(mb):
        new = label
        for rep in reps:
            new = torch.minimum(new, torch.gather(new, -1, rep))
            new = new.scatter_reduce(-1, rep, new, reduce="amin", include_self=True)
        new = torch.gather(new, -1, new)
        if torch.equal(new, label):
            break
        label = new
    return label


def lexicographic_order(sig: torch.Tensor) -> torch.Tensor:
    """(G, MB) row order sorting the signatures lexicographically (stable sorts from the last hash to the first)."""
    g, mb, num_perm = sig.shape
    order = torch.arange(mb, device=sig.device).expand(g, mb)
    for p in reversed(range(num_perm)):
        order = torch.gather(order, -1, torch.sort(torch.gather(sig[..., p], -1, order), dim=-1, stable=True).indices)
    return order


def group(mask: torch.Tensor, *, wave_size: int, seed: int, num_perm: int, bands: int) -> torch.Tensor:
    """Each head's rows, MinHash-LSH group by group."""
    if num_perm % bands:
        raise ValueError(f"num_perm={num_perm} must be a multiple of bands={bands}")
    sig = signatures(mask, num_perm, seed)
    return reorderers.order_by_group(components(band_keys(sig, bands, mask.shape[-1])), lexicographic_order(sig))


def _positive(name: str, value: Any) -> int:
    return check_int(name, value, lo=1, hi=4096)


reorderers.register(
    # num_perm: min-wise hashes per row; bands of num_perm / bands hashes each: candidates from a Jaccard
    # similarity of ~(1/bands)^(bands/num_perm)
    "minhash", group, {"num_perm": 64, "bands": 16},
    "MinHash signatures with LSH banding; rows linked by a shared band grouped together",
    reference="Broder 1997 (MinHash); Leskovec, Rajaraman, Ullman, Mining of Massive Datasets, ch. 3.4 (banding)",
    checks={"num_perm": _positive, "bands": partial(check_int, lo=1)}, label="MinHash", color="tab:brown")
