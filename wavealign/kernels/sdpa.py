"""Backend ``sdpa``: dense attention through torch's ``scaled_dot_product_attention`` (cuDNN on the GPU by
default): the dense baseline a sparse kernel's speedup and its 1/rho bound are read against.

It computes every block, so it accepts only a mask that selects every block (method ``dense``); a sparse
mask is an error rather than a silently wrong result. An order is accepted and ignored: all rows are equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from wavealign import blockmask, launch_order
from wavealign.kernels import ALL_HARDWARE, Backend, ExecutionFacts, LaunchShape, register

KERNELS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
           "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}


@dataclass(frozen=True)
class DenseLaunch:
    shape: LaunchShape
    kernel: SDPBackend

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.shape.check_qkv(q, k, v)
        with sdpa_kernel(self.kernel):
            return F.scaled_dot_product_attention(q, k, v)


def check_options(options: Mapping[str, Any], block_size: int) -> None:
    """The sweep's check of ``kernel`` (None: cuDNN on a GPU, math elsewhere)."""
    kernel = options.get("kernel")
    if kernel is not None and kernel not in KERNELS:
        raise ValueError(f"sdpa kernel={kernel!r}; expected one of {sorted(KERNELS)}")


def plan(mask: blockmask.MaskLike, order: launch_order.RowOrder | None, shape: LaunchShape,
         kernel: str | None = None) -> DenseLaunch:
    """A dense launch; ``kernel`` picks SDPA's implementation (``cudnn`` on CUDA, ``math`` elsewhere)."""
    kernel = kernel or ("cudnn" if shape.device.type == "cuda" else "math")
    check_options({"kernel": kernel}, shape.block_size)
    dense = blockmask.as_dense(mask)
    if not bool(dense.all()):
        raise ValueError(f"backend sdpa computes dense attention; the mask must select every block (method "
                         f"'dense'), got density {blockmask.density(dense):.3f}")
    return DenseLaunch(shape, KERNELS[kernel])


register(Backend(
    name="sdpa",
    plan=plan,
    description="dense torch scaled_dot_product_attention (cuDNN on the GPU): the dense baseline, mask must be full",
    ctas_per_sm=ALL_HARDWARE,
    execution=ExecutionFacts(128, 128, mma_efficiency=0.75, block_overhead_s=20e-9),
    ncu_kernels=r"cudnn|sdpa|fmha",
    needs_gpu=False,
    dense_only=True,
    check_options=check_options,
    types={"kernel": str | None},
))
