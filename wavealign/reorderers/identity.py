"""``identity``: the original row order. With Stage 2 (``stages="both"``) it is the paper's O+S2."""

from __future__ import annotations

import torch

from wavealign import reorderers


def group(mask: torch.Tensor, *, wave_size: int, seed: int) -> torch.Tensor:
    """Every head's rows in their original order."""
    g, mb, _ = mask.shape
    return torch.arange(mb, device=mask.device).expand(g, mb).contiguous()


reorderers.register("identity", group, {}, "the original order (the baseline every speedup refers to)",
                    reference="-", label="Original", staged_label="O+S2", color="tab:gray")
