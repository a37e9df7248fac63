"""Attention shapes of the paper's video DiTs, from (model, frames, resolution) and each model's public facts.

A ``Workload`` is what the rest of the pipeline needs to know about one self-attention call: the latent
grid (frames x height x width, flattened frame-major), heads, head dim, layers and the model's 3D RoPE.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class RopeAxes:
    """A 3D rotary embedding: channels per (t, h, w) axis and each pair's angle per latent step.

    ``step_angles[a][j]`` is the rotation (radians) of channel pair j of axis a when the latent index on
    that axis grows by one; channels beyond ``sum(channels)`` are left unrotated.
    """

    channels: tuple[int, int, int]
    step_angles: tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]


@dataclass(frozen=True)
class ModelSpec:
    """Facts of one video DiT that fix its attention shapes."""

    name: str
    heads: int
    head_dim: int
    layers: int
    vae_stride: tuple[int, int, int]  # (t, h, w) pixels per latent
    patch: tuple[int, int, int]  # (t, h, w) latents per token
    resolutions: dict[str, tuple[int, int]]  # name -> (height_px, width_px)
    rope: RopeAxes
    source: str


@dataclass(frozen=True)
class Workload:
    """One self-attention call of a model at (frames, resolution); tokens are flattened as (t, h, w)."""

    model: str
    frames: int
    resolution: str
    latent_frames: int
    grid_height: int
    grid_width: int
    heads: int
    head_dim: int
    layers: int
    rope: RopeAxes

    @property
    def tokens_per_frame(self) -> int:
        return self.grid_height * self.grid_width

    @property
    def seq_len(self) -> int:
        return self.latent_frames * self.tokens_per_frame

    @property
    def latent(self) -> tuple[int, int, int]:
        """The latent video's (T, H, W) in tokens, as the methods and orders that read token positions take it."""
        return (self.latent_frames, self.grid_height, self.grid_width)

    def num_blocks(self, block_size: int) -> int:
        return math.ceil(self.seq_len / block_size)


def _wan_rope(head_dim: int = 128, theta: float = 10000.0) -> RopeAxes:
    # Wan2.1 rope_params: t gets head_dim - 4*(head_dim//6) = 44 channels, h and w 2*(head_dim//6) = 42 each;
    # pair j of an axis with d channels turns by theta^(-2j/d) per latent index.
    d_hw = 2 * (head_dim // 6)
    dims = (head_dim - 2 * d_hw, d_hw, d_hw)
    angles = tuple(tuple(theta ** (-2.0 * j / d) for j in range(d // 2)) for d in dims)
    return RopeAxes(channels=dims, step_angles=angles)  # type: ignore[arg-type]


def _ltx2_rope(head_dim: int = 128, theta: float = 10000.0, fps: float = 24.0) -> RopeAxes:
    # LTX-2 "split" RoPE on fractional positions: each axis gets head_dim//6 = 21 frequency pairs
    # (pi/2) * theta^(j/(n-1)), applied to 2 * position / max_pos with max_pos = (20 s, 2048 px, 2048 px);
    # time is in seconds (8 frames per latent at `fps`), space in pixels (32 per latent). The two
    # leftover channels are padding, unrotated.
    n = head_dim // 6
    per_latent = (8.0 / fps, 32.0, 32.0)
    max_pos = (20.0, 2048.0, 2048.0)
    freqs = [(math.pi / 2) * theta ** (j / (n - 1)) for j in range(n)]
    angles = tuple(tuple(f * 2.0 * per_latent[a] / max_pos[a] for f in freqs) for a in range(3))
    return RopeAxes(channels=(2 * n, 2 * n, 2 * n), step_angles=angles)  # type: ignore[arg-type]


_WAN_RES = {"480p": (480, 832), "720p": (720, 1280)}
_WAN_SOURCE = ("Wan2.1 (github.com/Wan-Video/Wan2.1, wan/configs): VAE stride (4, 8, 8), patch (1, 2, 2); "
               "14B dim 5120 = 40 heads x 128, 40 layers; 1.3B dim 1536 = 12 heads x 128, 30 layers")

MODELS: dict[str, ModelSpec] = {
    "wan2.1-14b": ModelSpec("wan2.1-14b", heads=40, head_dim=128, layers=40, vae_stride=(4, 8, 8),
                            patch=(1, 2, 2), resolutions=_WAN_RES, rope=_wan_rope(), source=_WAN_SOURCE),
    "wan2.1-1.3b": ModelSpec("wan2.1-1.3b", heads=12, head_dim=128, layers=30, vae_stride=(4, 8, 8),
                             patch=(1, 2, 2), resolutions=_WAN_RES, rope=_wan_rope(), source=_WAN_SOURCE),
    # LTX-2.3 video stream: 32 heads x 128, 48 layers (huggingface.co/NVFP4/LTX2.3-NVFP4-Diffusers,
    # transformer/config.json: num_attention_heads 32, attention_head_dim 128, num_layers 48, rope_type split,
    # positional_embedding_max_pos [20, 2048, 2048]); VAE 32x spatial, 8x temporal compression with the
    # transformer patch 1 (AutoencoderKLLTX2Video config: spatial_compression_ratio 32,
    # temporal_compression_ratio 8; LTX-Video paper arXiv:2501.00103: "32 x 32 x 8 pixels per token").
    "ltx-2.3": ModelSpec("ltx-2.3", heads=32, head_dim=128, layers=48, vae_stride=(8, 32, 32), patch=(1, 1, 1),
                         resolutions={"1216x1920": (1216, 1920)}, rope=_ltx2_rope(),
                         source="Lightricks LTX-2.3 transformer and LTX-2 video VAE configs"),
}


def models() -> list[str]:
    """The model names presets know, as in the paper."""
    return sorted(MODELS)


def preset(model: str, frames: int, resolution: str) -> Workload:
    """The attention shape of ``model`` generating ``frames`` pixel frames at ``resolution``.

    Latent frames are (frames - 1) / t_stride + 1 (the causal VAE keeps the first frame on its own);
    the token grid is (height / (s_stride * patch), width / (s_stride * patch)) per latent frame.
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {models()}, got {model!r}")
    spec = MODELS[model]
    if resolution not in spec.resolutions:
        raise ValueError(f"resolution for {model} must be one of {sorted(spec.resolutions)}, got {resolution!r}")
    t_stride = spec.vae_stride[0] * spec.patch[0]
    if not isinstance(frames, int) or frames < 1 or (frames - 1) % t_stride:
        raise ValueError(f"frames for {model} must be 1 + a multiple of {t_stride} (e.g. {8 * t_stride + 1}), "
                         f"got {frames!r}")
    height, width = spec.resolutions[resolution]
    down_h, down_w = spec.vae_stride[1] * spec.patch[1], spec.vae_stride[2] * spec.patch[2]
    return Workload(model=model, frames=frames, resolution=resolution, latent_frames=(frames - 1) // t_stride + 1,
                    grid_height=height // down_h, grid_width=width // down_w, heads=spec.heads,
                    head_dim=spec.head_dim, layers=spec.layers, rope=spec.rope)
