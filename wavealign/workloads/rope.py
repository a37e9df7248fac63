"""The models' 3D rotary position embedding on frame-major token positions (t, h, w).

Channel pairs are adjacent (2j, 2j+1), as in Wan's complex view of q/k; the first ``channels[0]``
channels rotate with t, the next ``channels[1]`` with h, then ``channels[2]`` with w.
"""

from __future__ import annotations

import functools

import torch

from wavealign.workloads.presets import RopeAxes, Workload


def positions(wl: Workload, start: int = 0, stop: int | None = None,
              device: str | torch.device = "cpu") -> torch.Tensor:
    """Latent (t, h, w) indices, int64 (n, 3), of tokens ``start:stop`` in frame-major order."""
    stop = wl.seq_len if stop is None else stop
    if not 0 <= start <= stop <= wl.seq_len:
        raise ValueError(f"start:stop must lie in [0, {wl.seq_len}], got {start}:{stop}")
    token = torch.arange(start, stop, device=device)
    t = token // wl.tokens_per_frame
    hw = token % wl.tokens_per_frame
    return torch.stack((t, hw // wl.grid_width, hw % wl.grid_width), dim=-1)


def pair_angles(rope: RopeAxes, head_dim: int, device: str | torch.device = "cpu") -> tuple[torch.Tensor,
                                                                                           torch.Tensor]:
    """Per channel pair: its axis (0, 1, 2, or -1 if unrotated) and its angle per latent step, (head_dim/2,).
    Made once per (rope, head_dim, device): the generator rotates every chunk of every head with them, and a
    copy to the GPU per chunk would stop the host each time. The tensors are shared; do not write to them."""
    return _pair_angles(rope, head_dim, torch.device(device))


@functools.lru_cache(maxsize=64)
def _pair_angles(rope: RopeAxes, head_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    axis = torch.full((head_dim // 2,), -1, dtype=torch.long)
    step = torch.zeros(head_dim // 2, dtype=torch.float64)
    pair = 0
    for a, angles in enumerate(rope.step_angles):
        axis[pair:pair + len(angles)] = a
        step[pair:pair + len(angles)] = torch.tensor(angles, dtype=torch.float64)
        pair += len(angles)
    if pair > head_dim // 2:
        raise ValueError(f"rope uses {2 * pair} channels but head_dim is {head_dim}")
    return axis.to(device), step.to(device)


def apply_rope(x: torch.Tensor, pos: torch.Tensor, rope: RopeAxes) -> torch.Tensor:
    """Rotate ``x`` (..., n, D) at latent positions ``pos`` (n, 3); returns float32."""
    head_dim = x.shape[-1]
    axis, step = pair_angles(rope, head_dim, x.device)
    # angles in float64 so that 100+ frames x high frequencies keep their phase exactly
    coord = pos.to(torch.float64)[:, axis.clamp(min=0)] * (axis >= 0)
    angle = (coord * step).to(torch.float32)
    cos, sin = torch.cos(angle), torch.sin(angle)
    xr = x.float().reshape(*x.shape[:-1], head_dim // 2, 2)
    even, odd = xr[..., 0], xr[..., 1]
    out = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return out.reshape(x.shape)
