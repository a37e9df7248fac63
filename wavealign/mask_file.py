"""A block mask saved as packed bits (``.npz``): how a measured cell's exact mask reaches the simulator, and a mask
captured elsewhere a sweep (mask method ``file``).

Format: ``bits`` = ``np.packbits(mask, axis=-1)`` (uint8) and ``shape`` = the mask's shape (int64), so a
(40, 2840, 2840) mask takes 40 MB instead of 322 MB.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from wavealign.blockmask import check_mask


def save(path: str | Path, mask: torch.Tensor) -> None:
    """Write ``mask`` (bool (H, MB, NB) or (B, H, MB, NB)) to ``path`` as packed bits."""
    dense = check_mask(mask).detach().to("cpu").numpy()
    np.savez_compressed(path, bits=np.packbits(dense, axis=-1), shape=np.asarray(dense.shape, dtype=np.int64))


def load(path: str | Path) -> torch.Tensor:
    """Read a mask written by ``save``."""
    with np.load(path) as f:
        if "bits" not in f or "shape" not in f:
            raise ValueError(f"mask file {path} must hold arrays 'bits' and 'shape', got {sorted(f.files)}")
        shape = tuple(int(d) for d in f["shape"])
        bits = np.unpackbits(f["bits"], axis=-1, count=shape[-1])
    return torch.from_numpy(bits.astype(bool).reshape(shape))
