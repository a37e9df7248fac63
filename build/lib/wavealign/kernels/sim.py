"""Backend ``sim``: the L2/HBM simulator (``wavealign.sim``) standing in for a GPU.

Planning a launch simulates it: ``kernel`` names the registered backend whose execution facts are
modelled (tiles, K/V walk, launch order, MMA efficiency), on the planned shape's ``hardware`` with its
``wave_size``. The launch computes no attention; the sweep reads its predicted figures (``result``) where
it would time a real kernel, and records them ``simulated``. It runs on any CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from wavealign import blockmask, kernels, reorder, sim
from wavealign.kernels import ALL_HARDWARE, Backend, LaunchShape, register


@dataclass(frozen=True)
class SimLaunch:
    """A simulated launch: its predicted L2 hit ratio, HBM bytes and kernel time."""

    result: sim.SimResult

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("backend 'sim' predicts a launch's figures (SimLaunch.result); it computes no "
                                  "attention")


def plan(mask: blockmask.MaskLike, order: reorder.RowOrder | None, shape: LaunchShape, kernel: str = "flex",
         l2_partitions: int | None = None, row_jitter: float = 0.0, seed: int = 0) -> SimLaunch:
    """Simulate ``kernel``'s launch of ``mask`` in ``order`` on ``shape.hardware`` with ``shape.wave_size``."""
    modelled = kernels.get(kernel)
    if modelled.execution is None:
        raise ValueError(f"sim kernel={kernel!r} has no execution facts to model; expected a backend that runs on "
                         "a GPU")
    if shape.hardware is None:
        raise ValueError("backend sim needs the planned shape's hardware (the GPU it stands in for), got None")
    if not modelled.supports(shape.hardware):
        raise ValueError(f"sim kernel={kernel!r} does not run on {shape.hardware!r} (it runs on "
                         f"{list(modelled.supported_hardware)}); simulating it there would be meaningless")
    return SimLaunch(sim.simulate(mask, order, hardware=shape.hardware, backend=kernel, head_dim=shape.head_dim,
                                  wave_size=shape.wave_size, block_size=shape.block_size,
                                  l2_partitions=l2_partitions, row_jitter=row_jitter, seed=seed))


register(Backend(
    name="sim",
    plan=plan,
    description="the L2/HBM simulator standing in for a GPU (kernel= whose execution it models); CPU only",
    ctas_per_sm=ALL_HARDWARE,  # its wave and GPUs are the modelled kernel's (``models_option``)
    simulated=True,
    models_option="kernel",
    needs_gpu=False,
))
