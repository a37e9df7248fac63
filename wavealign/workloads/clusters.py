"""Seeded synthetic Q/K/V with the attention structure real video DiTs show, generated head by head.

Real weights cannot be used here, so each head's pre-RoPE q/k are built from parts whose dot products
give the structures seen in Wan/LTX attention maps, then RMS-normalised and rotated by the model's real
3D RoPE (``rope.apply_rope``):

- a *positional* part, the same vector for every token, on the higher-frequency RoPE pairs of some axes:
  after rotation q_i.k_j = sum_c A_c^2 cos(w_c (p_i - p_j)), so attention decays with distance along
  those axes. On t only: a *spatial* head (same and nearby frames, a block-diagonal band); on h and w
  only: a *temporal* head (same (h, w) in every frame, stripes one frame apart); on all: *3D-local*;
- a *semantic* part on the lowest-frequency pairs (almost unrotated): one of ``clusters`` centroids per
  token, chosen by a smooth random field over (t, h, w) so clusters are objects that persist across
  frames; same-cluster tokens attend to each other anywhere (*semantic* heads);
- a *sink* part: every query and only the keys of frame 0 share a direction (*sink* heads);
- a *smooth* part for the rest but ``noise``: a soft mix of random vectors (independent for q and k)
  weighted by the same fields stretched 4x, so neighbouring tokens are similar as in real DiTs without adding
  attention structure of its own;
- i.i.d. noise of the type's energy ``noise``.

Each head mixes these with type-specific energies and a per-head sharpness (the logit scale). Head types
are drawn per layer from a mix that moves from ``mix_first_layer`` to ``mix_last_layer`` with depth, and
the sharpness grows with the denoising step (attention sharpens as the video forms).

This is the *cluster* generator (``GeneratorConfig``, named ``clusters``); the head types, their mix and sharpness
(``HeadTypesConfig``), the positional and sink parts and the chunked generation below are shared with the scene
generator (``scene.py``), which replaces the per-head clusters by one moving scene per video. ``iter_heads`` and
``synthetic`` run either: the config's ``basis`` and ``span`` are its content.

``GeneratorConfig.calibrated()`` is the cluster generator ``python lab/calibrate_workload.py`` fitted to the paper's
Table I densities and L2 hit rates (``calibrated.yaml`` beside this file, with its provenance, unless the user
installed their own fit: ``HeadTypesConfig.calibrated_path``);
``GeneratorConfig()`` is the hand-set starting point the fit begins from. A caller that names no config gets
the default generator's (``default_config()``: the scene generator's). Everything is a
function of (seed, layer, head) and the token positions, generated in fixed chunks of tokens, so a head
at 364K tokens needs only its own q/k/v in memory and a seed gives the same tensors for the same device.
"""

from __future__ import annotations

import abc
import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Self

import torch

from wavealign import bounded, user_config
from wavealign.workloads.presets import Workload
from wavealign.workloads.rope import apply_rope, pair_angles, positions

HEAD_TYPES = ("spatial", "temporal", "local3d", "semantic", "sink")

# Noise is drawn per fixed chunk of tokens so results do not depend on how a caller chunks its work.
GEN_CHUNK_TOKENS = 16384
# Chunks computed together, by device type: on a GPU eight, so that each of a head's ~60 launches covers 131K
# tokens (~1 GB of float32 temporaries per span); elsewhere one, which keeps a span in the CPU's caches (eight
# ran 2.5x slower there)
SPAN_CHUNKS = {"cuda": 8}


@dataclass(frozen=True)
class HeadProfile:
    """Energy fractions (of the pre-norm q/k) of one head type, and its log-uniform sharpness range."""

    positional: tuple[float, float, float]  # (t, h, w)
    semantic: float
    sink: float
    sharpness: tuple[float, float]
    noise: float = 0.1  # i.i.d. noise energy, independent for q and k: blurs every structure of the head

    def __post_init__(self) -> None:
        if not 0.0 <= self.noise <= 1.0:
            raise ValueError(f"noise must be in [0, 1], got {self.noise}")
        if not 0.0 < self.sharpness[0] <= self.sharpness[1]:
            raise ValueError(f"sharpness must be a range 0 < lo <= hi, got {self.sharpness}")


DEFAULT_PROFILES: dict[str, HeadProfile] = {
    "spatial": HeadProfile(positional=(0.55, 0.0, 0.0), semantic=0.15, sink=0.0, sharpness=(1.0, 2.2)),
    "temporal": HeadProfile(positional=(0.0, 0.3, 0.3), semantic=0.1, sink=0.0, sharpness=(1.6, 3.6)),
    "local3d": HeadProfile(positional=(0.3, 0.2, 0.2), semantic=0.1, sink=0.0, sharpness=(1.4, 3.0)),
    "semantic": HeadProfile(positional=(0.05, 0.05, 0.05), semantic=0.6, sink=0.0, sharpness=(1.4, 3.0)),
    "sink": HeadProfile(positional=(0.15, 0.15, 0.15), semantic=0.1, sink=0.25, sharpness=(1.0, 2.2)),
}


# every generator's config class by its name (``GENERATOR``), filled as each is defined; the package imports them
# all (``generators.py``), so the registry is whole wherever this module is used
GENERATORS: dict[str, type[HeadTypesConfig]] = {}
# the generator a workload gets unless it names one: the scene generator (scene.yaml), which lands nearer Table I
# than the cluster one on the H200 (distance 16.1 against 28.9: benchmarks/results/scene-workload-h200/); the
# cluster generator stays selectable by name (`generator: clusters`, workload wan14b-720p-clusters)
DEFAULT_GENERATOR = "scene"


@dataclass(frozen=True)
class HeadTypesConfig(abc.ABC):
    """What every generator shares: the head types' profiles and their mix over depth, and the sharpness over
    denoising steps; a generator adds its own content (``basis`` and ``span``) and knobs in a subclass, named by
    ``GENERATOR`` (``wavealign.workloads.GENERATORS``), whose packaged fitted values live in ``CALIBRATED_PATH``."""

    GENERATOR: ClassVar[str]
    CALIBRATED_PATH: ClassVar[Path]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        GENERATORS[cls.GENERATOR] = cls

    profiles: dict[str, HeadProfile] = field(default_factory=lambda: dict(DEFAULT_PROFILES))
    # share of each head type in the first and the last layer; layers in between interpolate linearly
    mix_first_layer: dict[str, float] = field(default_factory=lambda: {
        "spatial": 0.25, "temporal": 0.15, "local3d": 0.2, "semantic": 0.25, "sink": 0.15})
    mix_last_layer: dict[str, float] = field(default_factory=lambda: {
        "spatial": 0.15, "temporal": 0.15, "local3d": 0.1, "semantic": 0.4, "sink": 0.2})
    sharpness_scale: float = 1.0
    # sharpness is multiplied by exp(step_sharpening * (step / (num_steps - 1) - 0.5))
    step_sharpening: float = 0.3
    num_steps: int = 50
    # the lowest-frequency RoPE pairs of each axis (this fraction of them) carry content (semantic, sink): almost
    # unrotated, so it matches at any distance; the positional part takes the other pairs
    content_pair_fraction: float = 0.33

    def __post_init__(self) -> None:
        for name, mix in (("mix_first_layer", self.mix_first_layer), ("mix_last_layer", self.mix_last_layer)):
            if set(mix) - set(HEAD_TYPES) or sum(mix.values()) <= 0 or min(mix.values()) < 0:
                raise ValueError(f"{name} must map head types {HEAD_TYPES} to non-negative shares, got {mix}")
        if set(self.profiles) != set(HEAD_TYPES):
            raise ValueError(f"profiles must cover exactly {HEAD_TYPES}, got {sorted(self.profiles)}")
        if not 0.0 < self.content_pair_fraction < 1.0:
            raise ValueError(f"content_pair_fraction must be in (0, 1), got {self.content_pair_fraction}")

    @abc.abstractmethod
    def basis(self, wl: Workload, spec: HeadSpec, layer: int, seed: int) -> HeadBasis:
        """The fixed vectors of one head (on the CPU, float32), drawn from (``seed``, ``layer``, head)."""

    @abc.abstractmethod
    def span(self, wl: Workload, spec: HeadSpec, basis: HeadBasis, start: int, stop: int,
             noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v of tokens ``start:stop`` of one head from its basis (on the noise's device) and their noise
        (3, stop - start, D). Every step must be per token, so a span's tokens come out as they would one by one."""

    def to_dict(self) -> dict[str, Any]:
        """Plain lists and floats, as a calibrated YAML stores them."""
        out = asdict(self)
        out["profiles"] = {t: {k: list(v) if isinstance(v, tuple) else v for k, v in p.items()}
                           for t, p in out["profiles"].items()}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """The inverse of ``to_dict``; unknown keys are an error naming them."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"generator config has unknown key(s) {unknown}; expected some of {sorted(known)}")
        values = {k: tuple(v) if isinstance(known[k].default, tuple) else v for k, v in data.items()}
        if "profiles" in values:
            values["profiles"] = {t: HeadProfile(positional=tuple(p["positional"]), semantic=p["semantic"],
                                                 sink=p["sink"], sharpness=tuple(p["sharpness"]),
                                                 noise=p.get("noise", 0.1))
                                  for t, p in values["profiles"].items()}
        return cls(**values)

    @classmethod
    def calibrated_path(cls) -> Path | None:
        """The fitted values this generator is read from: the user's (``lab/calibrate_workload.py --install`` writes
        ``user_config.workloads_dir() / <CALIBRATED_PATH's name>``) before the packaged ``CALIBRATED_PATH``; None
        where neither exists."""
        return next((path for path in (user_config.workloads_dir() / cls.CALIBRATED_PATH.name, cls.CALIBRATED_PATH)
                     if path.is_file()), None)

    @classmethod
    def calibrated(cls) -> Self:
        """The fitted generator (``calibrated_path()``'s ``generator``), or the hand-set one if there is none;
        cached until that file changes (a new install is picked up at once)."""
        path = cls.calibrated_path()
        return cls() if path is None else _calibrated(cls, str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _calibrated(cls: type[HeadTypesConfig], path: str, mtime_ns: int) -> HeadTypesConfig:
    document = bounded.load_yaml(path, "calibrated generator")
    if not isinstance(document, dict) or not isinstance(document.get("generator"), dict):
        raise ValueError(f"calibrated generator {path!r}: expected a mapping with a 'generator' mapping, as "
                         "`python lab/calibrate_workload.py` writes")
    return cls.from_dict(document["generator"])


@dataclass(frozen=True)
class GeneratorConfig(HeadTypesConfig):
    """The per-head cluster generator's knobs (``clusters``): each head its own objects, as smooth random fields;
    ``calibrated.yaml`` holds the values ``lab/calibrate_workload.py`` fitted to Table I."""

    GENERATOR: ClassVar[str] = "clusters"
    CALIBRATED_PATH: ClassVar[Path] = Path(__file__).with_name("calibrated.yaml")

    clusters: int = 32

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.clusters < 1:
            raise ValueError(f"clusters must be >= 1, got {self.clusters}")

    def basis(self, wl: Workload, spec: HeadSpec, layer: int, seed: int) -> HeadBasis:
        return _cluster_basis(wl, spec, layer, seed, self)

    def span(self, wl: Workload, spec: HeadSpec, basis: HeadBasis, start: int, stop: int,
             noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return _cluster_span(wl, spec, basis, start, stop, noise)


def default_config() -> HeadTypesConfig:
    """The default generator's calibrated config: the one every caller gets unless it names another."""
    return GENERATORS[DEFAULT_GENERATOR].calibrated()


@dataclass(frozen=True)
class HeadSpec:
    """The drawn parameters of one head of one layer."""

    head: int
    head_type: str
    sharpness: float
    profile: HeadProfile


def seed_of(*parts: int) -> int:
    """A generator seed from a tuple of ints: the same in every process (ints are not hash-randomised)."""
    return hash(tuple(int(p) for p in parts)) & 0x7FFF_FFFF_FFFF


def head_types(wl: Workload, layer: int = 0, seed: int = 0,
               config: HeadTypesConfig | None = None) -> list[str]:
    """The type of every head of ``layer``: counts from the layer's mix, assigned to heads by ``seed``."""
    config = config or default_config()
    if not 0 <= layer < wl.layers:
        raise ValueError(f"layer must be in [0, {wl.layers}), got {layer}")
    depth = layer / max(wl.layers - 1, 1)
    share = torch.tensor([(1 - depth) * config.mix_first_layer.get(t, 0.0) + depth * config.mix_last_layer.get(t, 0.0)
                          for t in HEAD_TYPES], dtype=torch.float64)
    share = share / share.sum() * wl.heads
    counts = share.floor().long()
    # largest remainders take the heads left over, so counts sum to wl.heads
    for i in torch.argsort(share - counts, descending=True)[: wl.heads - int(counts.sum())]:
        counts[i] += 1
    types = [t for t, c in zip(HEAD_TYPES, counts.tolist(), strict=True) for _ in range(c)]
    order = torch.randperm(wl.heads, generator=torch.Generator().manual_seed(seed_of(seed, layer, 7)))
    return [types[i] for i in order.tolist()]


def head_specs(wl: Workload, heads: Sequence[int] | None = None, layer: int = 0, step: int = 0, seed: int = 0,
               config: HeadTypesConfig | None = None) -> list[HeadSpec]:
    """The drawn type and sharpness of each of ``heads`` (default all) at ``layer`` and denoising ``step``."""
    config = config or default_config()
    heads = list(range(wl.heads)) if heads is None else list(heads)
    for h in heads:
        if not 0 <= h < wl.heads:
            raise ValueError(f"heads must lie in [0, {wl.heads}), got {h}")
    if not 0 <= step < config.num_steps:
        raise ValueError(f"step must be in [0, {config.num_steps}), got {step}")
    types = head_types(wl, layer, seed, config)
    step_gain = math.exp(config.step_sharpening * (step / max(config.num_steps - 1, 1) - 0.5))
    specs = []
    for h in heads:
        profile = config.profiles[types[h]]
        u = torch.rand((), generator=torch.Generator().manual_seed(seed_of(seed, layer, h, 11))).item()
        lo, hi = profile.sharpness
        sharp = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
        specs.append(HeadSpec(h, types[h], sharp * config.sharpness_scale * step_gain, profile))
    return specs


class HeadBasis:
    """A head's fixed vectors, dataclass fields that are all tensors: a generator's ``basis`` returns one."""

    def to(self, device: torch.device) -> Self:
        """The same vectors on ``device``: moved once per head, not once per chunk (each copy to a GPU stops the
        host until it is done)."""
        return type(self)(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})


@dataclass(frozen=True)
class _ClusterBasis(HeadBasis):
    """Per-head fixed vectors (on the CPU, float32), drawn from the head's seed."""

    positional: torch.Tensor  # (D,) shared by all tokens
    centroids_qk: torch.Tensor  # (clusters, D) in the content pairs
    centroids_v: torch.Tensor  # (clusters, D)
    smooth_q: torch.Tensor  # (clusters, D)
    smooth_k: torch.Tensor  # (clusters, D)
    mean_v: torch.Tensor  # (D,) the component all values share, as real V have
    sink: torch.Tensor  # (D,) in the content pairs
    field_freqs: torch.Tensor  # (clusters, 3, 3) smooth cluster fields: 3 waves x (t, h, w)
    field_phases: torch.Tensor  # (clusters, 3)


def unit(x: torch.Tensor) -> torch.Tensor:
    """``x`` scaled to unit norm along its last dimension."""
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def head_generator(seed: int, layer: int, head: int) -> torch.Generator:
    """The CPU generator a head's fixed vectors are drawn from."""
    return torch.Generator().manual_seed(seed_of(seed, layer, head, 13))


def content_pairs(wl: Workload, fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per channel pair, its RoPE axis (-1: unrotated) and whether it carries content: unrotated pairs and the
    lowest-frequency ``fraction`` of each axis's pairs (at least one). Both (head_dim / 2,)."""
    axis, step = pair_angles(wl.rope, wl.head_dim)
    content = axis < 0
    for a in range(3):
        idx = torch.nonzero(axis == a).flatten()
        n_content = max(1, round(fraction * len(idx)))
        content[idx[torch.argsort(step[idx])[:n_content]]] = True
    return axis, content


def positional_vector(wl: Workload, energies: Sequence[float], axis: torch.Tensor, content: torch.Tensor,
                      gen: torch.Generator) -> torch.Tensor:
    """The vector every token of a head shares on the non-content pairs of each axis, ``energies[a]`` on axis
    a: equal amplitude on each pair, random phase, so after RoPE q_i.k_j = sum_c A_c^2 cos(w_c (p_i - p_j)) depends
    on p_i - p_j only and decays with distance along the axes that have energy. (D,)"""
    positional = torch.zeros(wl.head_dim)
    for a in range(3):
        energy = energies[a]
        pairs = torch.nonzero((axis == a) & ~content).flatten()
        if energy > 0 and len(pairs):
            phase = 2 * math.pi * torch.rand(len(pairs), generator=gen)
            amp = math.sqrt(energy / len(pairs))
            positional[2 * pairs] = amp * torch.cos(phase)
            positional[2 * pairs + 1] = amp * torch.sin(phase)
    return positional


def _cluster_basis(wl: Workload, spec: HeadSpec, layer: int, seed: int, config: GeneratorConfig) -> _ClusterBasis:
    gen = head_generator(seed, layer, spec.head)
    d = wl.head_dim
    axis, content = content_pairs(wl, config.content_pair_fraction)
    channel_content = content.repeat_interleave(2)
    positional = positional_vector(wl, spec.profile.positional, axis, content, gen)
    centroids = torch.randn(config.clusters, d, generator=gen) * channel_content
    sink = torch.randn(d, generator=gen) * channel_content
    # cluster fields vary over about a quarter of the frame in h and w and drift over ~16 latent frames
    scale = torch.tensor([2 * math.pi / 16, 2 * math.pi / max(wl.grid_height / 4, 1),
                          2 * math.pi / max(wl.grid_width / 4, 1)])
    freqs = (torch.rand(config.clusters, 3, 3, generator=gen) - 0.5) * 2 * scale
    return _ClusterBasis(positional=positional, centroids_qk=unit(centroids),
                         centroids_v=unit(torch.randn(config.clusters, d, generator=gen)),
                         mean_v=unit(torch.randn(d, generator=gen)),
                         smooth_q=unit(torch.randn(config.clusters, d, generator=gen)),
                         smooth_k=unit(torch.randn(config.clusters, d, generator=gen)),
                         sink=unit(sink), field_freqs=freqs,
                         field_phases=2 * math.pi * torch.rand(config.clusters, 3, generator=gen))


def cluster_fields(basis: _ClusterBasis, pos: torch.Tensor) -> torch.Tensor:
    """The smooth random field of each cluster at each token at ``pos`` (n, 3): (n, clusters)."""
    p = pos.to(torch.float32)
    waves = torch.einsum("nk,cwk->ncw", p, basis.field_freqs.to(p.device)) + basis.field_phases.to(p.device)
    return torch.sin(waves).sum(-1)


def rms_norm(x: torch.Tensor) -> torch.Tensor:
    """The models' q/k RMSNorm (the learned gain folded into the head's sharpness)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def _cluster_span(wl: Workload, spec: HeadSpec, basis: _ClusterBasis, start: int, stop: int,
                  noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    pos = positions(wl, start, stop, noise.device)
    prof = spec.profile
    noise_energy = prof.noise
    f_smooth = max(1.0 - sum(prof.positional) - prof.semantic - prof.sink - noise_energy, 0.0)
    fields = cluster_fields(basis, pos)
    cid = fields.argmax(-1)
    # the smooth part follows the same fields at 4x the wavelength: neighbouring tokens nearly agree
    soft = torch.softmax(2.0 * cluster_fields(basis, pos * 0.25), dim=-1)
    centroid = basis.centroids_qk[cid]
    shared = basis.positional + math.sqrt(prof.semantic) * centroid
    sink = math.sqrt(prof.sink) * basis.sink
    smooth_q = math.sqrt(f_smooth) * unit(soft @ basis.smooth_q)
    smooth_k = math.sqrt(f_smooth) * unit(soft @ basis.smooth_k)
    x_q = shared + sink + smooth_q + math.sqrt(noise_energy) * noise[0]
    x_k = shared + first_frame_only(sink, pos) + smooth_k + math.sqrt(noise_energy) * noise[1]
    q = apply_rope(rms_norm(x_q), pos, wl.rope) * spec.sharpness
    k = apply_rope(rms_norm(x_k), pos, wl.rope)
    v = rms_norm(0.5 * basis.mean_v + basis.centroids_v[cid] + noise[2])
    return q, k, v


def first_frame_only(sink: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """The sink direction on the keys of frame 0 only, zero elsewhere: (n, D) for tokens at ``pos``."""
    return torch.where((pos[:, 0] == 0).unsqueeze(-1), sink, torch.zeros_like(sink))


def iter_heads(wl: Workload, heads: Sequence[int] | None = None, *, layer: int = 0, step: int = 0, seed: int = 0,
               device: str | torch.device = "cpu", dtype: torch.dtype | None = None,
               config: HeadTypesConfig | None = None) -> Iterator[tuple[HeadSpec, torch.Tensor, torch.Tensor,
                                                                          torch.Tensor]]:
    """Yield ``(spec, q, k, v)`` one head at a time, each tensor (1, 1, seq_len, head_dim), from the generator
    ``config`` (default: the calibrated cluster generator; ``GENERATORS[name].calibrated()`` picks another).

    ``dtype`` defaults to bfloat16 on CUDA (as the models run) and float32 elsewhere.
    """
    device = torch.device(device)
    config = config or default_config()
    for spec in head_specs(wl, heads, layer, step, seed, config):
        out = torch.empty(3, wl.seq_len, wl.head_dim, dtype=dtype or _default_dtype(device), device=device)
        _fill_head(wl, spec, layer, seed, config, out)
        q, k, v = (t.view(1, 1, wl.seq_len, wl.head_dim) for t in out)
        yield spec, q, k, v


def synthetic(wl: Workload, heads: Sequence[int] | None = None, *, layer: int = 0, step: int = 0, seed: int = 0,
              device: str | torch.device = "cpu", dtype: torch.dtype | None = None,
              config: HeadTypesConfig | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q, K, V of ``heads`` (default all) of ``layer`` at denoising ``step``, each (1, len(heads), N, D): the
    heads ``iter_heads`` yields, written in place into one allocation (no copy of the whole set at the end).

    For long sequences and many heads prefer ``iter_heads``, which holds one head at a time.
    """
    device = torch.device(device)
    config = config or default_config()
    specs = head_specs(wl, heads, layer, step, seed, config)
    out = torch.empty(3, 1, len(specs), wl.seq_len, wl.head_dim, dtype=dtype or _default_dtype(device),
                      device=device)
    for i, spec in enumerate(specs):
        _fill_head(wl, spec, layer, seed, config, out[:, 0, i])
    return out[0], out[1], out[2]


def _default_dtype(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def _fill_head(wl: Workload, spec: HeadSpec, layer: int, seed: int, config: HeadTypesConfig,
               out: torch.Tensor) -> None:
    """Write one head's q, k, v into ``out`` (3, seq_len, head_dim): noise drawn per fixed chunk of tokens, the
    rest computed by the generator over spans of ``SPAN_CHUNKS`` chunks (per 16K-token chunk, a GPU idled between
    ~60 small launches)."""
    basis = config.basis(wl, spec, layer, seed).to(out.device)
    d = wl.head_dim
    span_tokens = SPAN_CHUNKS.get(out.device.type, 1) * GEN_CHUNK_TOKENS
    for span in range(0, wl.seq_len, span_tokens):
        stop = min(span + span_tokens, wl.seq_len)
        noise = torch.empty(3, stop - span, d, device=out.device)
        for start in range(span, stop, GEN_CHUNK_TOKENS):
            end = min(start + GEN_CHUNK_TOKENS, stop)
            gen = torch.Generator(device=out.device).manual_seed(
                seed_of(seed, layer, spec.head, start // GEN_CHUNK_TOKENS, 17))
            noise[:, start - span:end - span] = torch.randn(3, end - start, d, generator=gen, device=out.device)
        noise /= math.sqrt(d)
        for i, t in enumerate(config.span(wl, spec, basis, span, stop, noise)):
            out[i, span:stop] = t.to(out.dtype)
