"""The scene generator: Q/K/V of every layer and head of a video drawn from one moving scene per seed.

The cluster generator (``synthetic``) gives each head objects of its own and rows that are too alike; in real video
DiTs the content that queries look for moves and is shared by every head of a layer (SVG2's semantic clusters,
scattered in position), attention energy decays with spatial and temporal distance (Radial Attention), and the
estimate FlexPrefill and MInference make from the last query tokens (the bottom rows of the last latent frame)
sees other content than the rows XAttention and SpargeAttn score. So per seed a *scene* (``scene_at``):

- a few low-frequency *background regions* (argmax of smooth random fields) drifting slowly, seen through a
  *camera pan* of ``camera_pan`` tokens per latent frame in a seeded direction;
- ``objects`` ellipses with heavy-tailed (Pareto) radii moving at their own velocities, reflecting at the edges;
- a *ground* band along the bottom ``ground_fraction`` of the rows, in front of the objects;
- for every token a *label* (background region, ground or object) and a *part coordinate*: the position inside
  its object in radii (the same part of a moving object matches across frames), or the panned scene position on
  the background and ground (so a point of the background moves with the camera).

Per head (``basis``), on top of the head type's positional part and sink (``synthetic``, as the cluster generator
has them) and i.i.d. noise:

- *labels*: q takes its label's random vector, k a mix of it and related labels' (a relation of rank
  ``label_rank``: cross-object attention of low rank); ``label_low_band`` of the label energy is on the lowest RoPE
  frequencies (matching at any distance), the rest spread over the rotated pairs, where same-label attention decays
  with distance;
- *parts*: random Fourier features of the part coordinate, with per-label phases, the same for q and k: tokens of
  one label attend to the same part of it, wherever it has moved;
- *ground queries*: their own logit scale (``ground_sharpness``, times the head's) and a 3D-local positional peak of
  energy ``ground_local`` (every key carries its other half);
- *V*: its label's vector plus within-label variation of energy ``value_variation`` (SpargeAttn tunes its
  thresholds on the output's L1 error, which depends on it).

A head type's profile sets the energies: ``positional`` and ``sink`` as in the cluster generator, ``semantic`` the
labels', ``noise`` the noise's, and what is left goes to the parts. Everything is a function of the seed, the
layer, the head and the token positions, so it is generated in the cluster generator's fixed chunks (``synthetic``
``iter_heads`` and ``synthetic`` run either generator).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from wavealign.workloads.clusters import (
    HeadBasis,
    HeadSpec,
    HeadTypesConfig,
    content_pairs,
    first_frame_only,
    head_generator,
    positional_vector,
    rms_norm,
    seed_of,
    unit,
)
from wavealign.workloads.presets import Workload
from wavealign.workloads.rope import apply_rope, positions


@dataclass(frozen=True)
class SceneConfig(HeadTypesConfig):
    """The scene generator's knobs, beside the head types' (``HeadTypesConfig``); ``scene.yaml`` holds the values
    ``lab/calibrate_workload.py --generator scene`` fitted to Table I. Lengths are in latent tokens."""

    GENERATOR: ClassVar[str] = "scene"
    CALIBRATED_PATH: ClassVar[Path] = Path(__file__).with_name("scene.yaml")

    # the scene, one per seed: every layer and head of the video sees it
    background_regions: int = 6
    background_scale: float = 0.5  # a background wave's wavelength, as a fraction of the frame width
    background_drift: float = 0.01  # each background wave's phase drift, in cycles per latent frame
    camera_pan: float = 0.3  # tokens per latent frame, in a direction drawn per seed
    objects: int = 8
    object_radius: float = 0.08  # the smallest radius (the Pareto scale), as a fraction of the frame height
    object_size_tail: float = 1.5  # the Pareto tail index of the radii: smaller is heavier
    object_radius_max: float = 0.4  # radii are clipped here (fraction of the frame height)
    object_speed: float = 0.5  # rms velocity per axis, tokens per latent frame
    ground_fraction: float = 0.15  # the bottom rows' share that is ground
    # each head's view of it
    label_low_band: float = 0.5
    label_mix: float = 0.3
    label_rank: int = 2
    part_scale: float = 4.0  # tokens per unit of background and ground part coordinates
    part_waves: int = 16
    # a third of the head's logit scale: where the reduced-scale fit settled (benchmarks/results/scene-workload-h200)
    ground_sharpness: float = 0.3
    ground_local: float = 0.2
    value_variation: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("background_regions", "objects", "label_rank", "part_waves"):
            if getattr(self, name) < (0 if name == "objects" else 1):
                raise ValueError(f"{name} must be >= {0 if name == 'objects' else 1}, got {getattr(self, name)}")
        for name in ("background_scale", "object_radius", "object_size_tail", "part_scale", "ground_sharpness"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("background_drift", "camera_pan", "object_speed", "ground_local", "value_variation"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("label_low_band", "label_mix", "ground_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if not self.object_radius <= self.object_radius_max:
            raise ValueError(f"object_radius_max must be >= object_radius {self.object_radius}, got "
                             f"{self.object_radius_max}")

    def basis(self, wl: Workload, spec: HeadSpec, layer: int, seed: int) -> _SceneBasis:
        return _scene_basis(wl, spec, layer, seed, self)

    def span(self, wl: Workload, spec: HeadSpec, basis: _SceneBasis, start: int, stop: int,
             noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return _scene_span(wl, spec, basis, start, stop, noise, self)


@dataclass(frozen=True)
class Scene(HeadBasis):
    """One video's scene (CPU, float32), drawn from the seed alone. Labels: background regions
    0..R-1, ground R, objects R+1.. (a later object in front of an earlier one)."""

    pan: torch.Tensor  # (2,) (h, w) tokens per latent frame
    wave_k: torch.Tensor  # (R, 3, 2) background waves' spatial frequencies, radians per token
    wave_phase: torch.Tensor  # (R, 3)
    wave_drift: torch.Tensor  # (R, 3) radians per latent frame
    centre: torch.Tensor  # (O, 2) object centres at frame 0, tokens
    velocity: torch.Tensor  # (O, 2) tokens per latent frame
    radius: torch.Tensor  # (O, 2) (h, w) semi-axes, tokens
    bounds: torch.Tensor  # (2,) the centres' range in h (above the ground) and w

    @property
    def labels(self) -> int:
        return self.wave_k.shape[0] + 1 + self.centre.shape[0]


def draw_scene(wl: Workload, seed: int, config: SceneConfig) -> Scene:
    """The scene of ``seed``: the same for every layer and head."""
    gen = torch.Generator().manual_seed(seed_of(seed, 23))
    height, width = wl.grid_height, wl.grid_width
    angle = 2 * math.pi * torch.rand((), generator=gen)
    pan = config.camera_pan * torch.stack((torch.sin(angle), torch.cos(angle)))
    regions = config.background_regions
    scale = 2 * math.pi / (config.background_scale * width)
    wave_k = (2 * torch.rand(regions, 3, 2, generator=gen) - 1) * scale
    wave_phase = 2 * math.pi * torch.rand(regions, 3, generator=gen)
    wave_drift = (2 * torch.rand(regions, 3, generator=gen) - 1) * 2 * math.pi * config.background_drift
    ground_top = height * (1 - config.ground_fraction)
    bounds = torch.tensor([ground_top, float(width)])
    n = config.objects
    centre = torch.rand(n, 2, generator=gen) * bounds
    velocity = torch.randn(n, 2, generator=gen) * config.object_speed
    # Pareto(x_min = object_radius, tail) radii, clipped; an aspect ratio within 1:2.7 either way
    u = torch.rand(n, generator=gen).clamp_min(1e-6)
    r = (config.object_radius * u.pow(-1.0 / config.object_size_tail)).clamp(max=config.object_radius_max) * height
    aspect = torch.exp(torch.rand(n, generator=gen) - 0.5)
    radius = torch.stack((r * aspect.sqrt(), r / aspect.sqrt()), dim=-1).clamp_min(0.5)
    return Scene(pan=pan, wave_k=wave_k, wave_phase=wave_phase, wave_drift=wave_drift, centre=centre,
                 velocity=velocity, radius=radius, bounds=bounds)


def object_centres(scene: Scene, t: torch.Tensor) -> torch.Tensor:
    """The objects' centres at latent frames ``t`` (..., 1, 1): each moves at its own velocity and reflects at the
    edges of its range, (..., O, 2)."""
    travelled = scene.centre + t * scene.velocity
    folded = torch.remainder(travelled, 2 * scene.bounds)  # a point bouncing between 0 and the bound
    return torch.where(folded <= scene.bounds, folded, 2 * scene.bounds - folded)


def scene_at(scene: Scene, pos: torch.Tensor, config: SceneConfig, grid_height: int) -> tuple[torch.Tensor,
                                                                                             torch.Tensor]:
    """The label (n,) int64 and part coordinate (n, 2) of tokens at latent ``pos`` (n, 3): per token, so any span
    of tokens gives what the whole sequence does."""
    p = pos.to(torch.float32)
    t, yx = p[:, 0:1], p[:, 1:]
    regions = scene.wave_k.shape[0]
    world = yx + t * scene.pan  # the panned scene position
    waves = torch.einsum("nc,rwc->nrw", world, scene.wave_k) + scene.wave_phase + t.unsqueeze(-1) * scene.wave_drift
    label = torch.sin(waves).sum(-1).argmax(-1)
    part = world / config.part_scale
    ground = p[:, 1] >= grid_height * (1 - config.ground_fraction)
    label = torch.where(ground, torch.full_like(label, regions), label)
    if scene.centre.shape[0]:
        centre = object_centres(scene, t.unsqueeze(-1))  # (n, O, 2)
        rel = (yx.unsqueeze(1) - centre) / scene.radius
        inside = (rel.pow(2).sum(-1) <= 1.0) & ~ground.unsqueeze(-1)  # the ground is in front
        index = torch.arange(1, inside.shape[1] + 1, device=pos.device)
        front = (inside * index).argmax(-1)  # the last object covering the token (0: none)
        covered = inside.any(-1)
        label = torch.where(covered, regions + 1 + front, label)
        own = rel[torch.arange(len(p), device=pos.device), front] * 2.0  # an object spans +-2 part units
        part = torch.where(covered.unsqueeze(-1), own, part)
    return label, part


@dataclass(frozen=True)
class _SceneBasis(HeadBasis):
    """One head's view of the scene (CPU, float32): the scene itself and the head's vectors."""

    scene: Scene
    positional: torch.Tensor  # (D,) the head type's, shared by all tokens
    local: torch.Tensor  # (D,) the ground queries' 3D-local peak (unit energy)
    label_q: torch.Tensor  # (labels, D)
    label_k: torch.Tensor  # (labels, D)
    part_freqs: torch.Tensor  # (waves, 2)
    part_phases: torch.Tensor  # (labels, waves)
    part_cos: torch.Tensor  # (waves, D)
    part_sin: torch.Tensor  # (waves, D)
    sink: torch.Tensor  # (D,) in the content pairs
    mean_v: torch.Tensor  # (D,)
    label_v: torch.Tensor  # (labels, D)


def _scene_basis(wl: Workload, spec: HeadSpec, layer: int, seed: int, config: SceneConfig) -> _SceneBasis:
    scene = draw_scene(wl, seed, config)
    gen = head_generator(seed, layer, spec.head)
    d, labels, waves = wl.head_dim, scene.labels, config.part_waves
    axis, content = content_pairs(wl, config.content_pair_fraction)
    low = content.repeat_interleave(2)
    positional = positional_vector(wl, spec.profile.positional, axis, content, gen)
    local = positional_vector(wl, (1 / 3, 1 / 3, 1 / 3), axis, content, gen)
    band = config.label_low_band
    label_q = unit(math.sqrt(band) * unit(torch.randn(labels, d, generator=gen) * low)
                   + math.sqrt(1 - band) * unit(torch.randn(labels, d, generator=gen) * ~low))
    # k's label vector leans toward related labels: a rank-``label_rank`` relation between labels, none to itself
    factors = torch.randn(labels, config.label_rank, generator=gen)
    relation = factors @ factors.T
    relation.fill_diagonal_(0.0)
    related = unit(relation @ label_q) if labels > 1 else label_q
    label_k = unit(math.sqrt(1 - config.label_mix) * label_q + math.sqrt(config.label_mix) * related)
    return _SceneBasis(
        scene=scene, positional=positional, local=local, label_q=label_q, label_k=label_k,
        part_freqs=torch.randn(waves, 2, generator=gen),
        part_phases=2 * math.pi * torch.rand(labels, waves, generator=gen),
        part_cos=unit(torch.randn(waves, d, generator=gen) * low) / math.sqrt(waves),
        part_sin=unit(torch.randn(waves, d, generator=gen) * low) / math.sqrt(waves),
        sink=unit(torch.randn(d, generator=gen) * low), mean_v=unit(torch.randn(d, generator=gen)),
        label_v=unit(torch.randn(labels, d, generator=gen)))


def _scene_span(wl: Workload, spec: HeadSpec, basis: _SceneBasis, start: int, stop: int, noise: torch.Tensor,
                config: SceneConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    pos = positions(wl, start, stop, noise.device)
    label, part = scene_at(basis.scene, pos, config, wl.grid_height)
    prof = spec.profile
    f_part = max(1.0 - sum(prof.positional) - prof.semantic - prof.sink - prof.noise, 0.0)
    angle = part @ basis.part_freqs.T + basis.part_phases[label]  # (n, waves)
    parts = torch.cos(angle) @ basis.part_cos + torch.sin(angle) @ basis.part_sin
    shared = basis.positional + math.sqrt(f_part) * parts
    sink = math.sqrt(prof.sink) * basis.sink
    ground = (label == basis.scene.wave_k.shape[0]).unsqueeze(-1)
    local = math.sqrt(config.ground_local) * basis.local
    x_q = shared + math.sqrt(prof.semantic) * basis.label_q[label] + sink + \
        torch.where(ground, local, torch.zeros_like(local)) + math.sqrt(prof.noise) * noise[0]
    x_k = shared + math.sqrt(prof.semantic) * basis.label_k[label] + first_frame_only(sink, pos) + local + \
        math.sqrt(prof.noise) * noise[1]
    scale = torch.where(ground, spec.sharpness * config.ground_sharpness, spec.sharpness)
    q = apply_rope(rms_norm(x_q), pos, wl.rope) * scale
    k = apply_rope(rms_norm(x_k), pos, wl.rope)
    v = rms_norm(0.5 * basis.mean_v + basis.label_v[label] + math.sqrt(config.value_variation) * noise[2])
    return q, k, v
