"""One block-sparse attention call the way a sweep cell runs it, for model code: build the method's mask from the
live Q/K, then the attention step (``wavealign.attention.AttentionStep``): the skip policy decides (or a variant
forces) the reorder, the backend's launch is planned and run; the output comes back in the original row order,
bitwise equal to running without the reorder.

    attend = BlockSparseAttention(method="xattention", backend="fa4", reorder="adaptive", hardware="h200")
    out = attend(q, k, v, layer=3)   # (B, H, N, D), self-attention; N need not be a multiple of block_size
    attend.calls[-1]                 # what the last call did: density, reordered or not and why, plan times

A method that reads token positions (``radial``, ``vsa``) needs the latent video, ``latent=(T, H, W)`` in tokens
(frame-major), given here or per call. A method with a token order of its own (``vsa``: 3D cubes) runs as upstream
runs it: Q/K/V gathered into its order, the mask built and the step run there, the output scattered back; WaveAlign
orders the rows of that mask, so the two permutations compose and the output stays bitwise the method's own. A static
method (``radial``, any ``from_shape`` method) has one mask per shape: its mask, launch order and launch are planned
on the first call of a (shape, latent) and reused by every later call, every layer and every denoising step
(``reuse_static_plans``; ``CallRecord.plan_reused``).

Every argument is checked when the object is made, before any GPU work (where it can run: ``wavealign.placement``).
A method tuned per head (SpargeAttn, MInference) is tuned on a head's first call and its config kept, keyed by
(``model``, ``layer``, head), in ``tuned_configs`` (in memory; also in the JSON file ``method_params["tuned_config"]``
names, when given): later calls pay the method's prediction only, as upstream's offline-tuned configs do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from wavealign import hardware as hardware_registry
from wavealign import kernels, launch_order, masks, placement, reorderers, skip, variants
from wavealign.attention import AttentionStep, Prepared, time_once
from wavealign.blockmask import check_int
from wavealign.kernels import Launch, LaunchShape
from wavealign.records import DEFAULT_REORDERER

# More heads than any video DiT has: a dim 1 this long is the sequence of a (B, N, H, D) tensor
MAX_HEADS = 1024


@dataclass(frozen=True)
class CallRecord:
    """What one call did, per batch element: the mask's density, whether the rows were reordered and why, and
    what building the mask (``tuned_heads`` of its heads tuned first, on a first call) and planning the order
    cost (host wall time, synchronised on CUDA); ``plan_reused``: a static method's mask, order and launch were
    planned by an earlier call of this shape and latent (nothing built or planned: both costs 0). ``candidate`` names
    the order applied; ``choose_ms`` is what the order chooser cost where ``reorder="auto"`` asked it (0 where this
    layer's earlier choice for the shape was kept)."""

    layer: int
    tokens: int
    heads: int
    density: float
    reordered: bool
    reason: str
    mask_ms: float
    reorder_ms: float
    tuned_heads: int = 0
    plan_reused: bool = False
    candidate: str = "original"
    choose_ms: float = 0.0


@dataclass(frozen=True)
class _Plan:
    """A mask made ready to run: its density, the step prepared on it (decision, order) and the backend's launch."""

    density: float
    prepared: Prepared
    launch: Launch


@dataclass
class BlockSparseAttention:
    """Self-attention with a dynamic block-sparse ``method`` mask on ``backend``, rows reordered as the variant
    ``reorder`` says (``wavealign.variants``: "adaptive" lets the skip profile of ``hardware`` decide per call;
    "always" and "never" are ``wavealign`` and ``original``; any other variant name runs its stages).

    ``hardware`` (a ``wavealign.hardware`` id) defaults to the GPU this process sees; ``wave_size`` to the backend's
    wave on it. ``reorderer`` picks the spatial step (``wavealign.reorderers``), followed by Stage 2. ``model`` names
    the model in the keys of tuned per-head configs (``tuned_configs``). ``latent`` is the latent video (T, H, W) in
    tokens of every call that does not pass its own; ``reuse_static_plans`` keeps a static method's plan per (shape,
    latent) (off: every call builds and plans, as a live dynamic method would)."""

    method: str = "xattention"
    backend: str = "fa4"
    reorder: str = "adaptive"
    block_size: int = 128
    hardware: str | None = None
    wave_size: int | None = None
    reorderer: str = DEFAULT_REORDERER
    method_params: dict[str, Any] = field(default_factory=dict)
    model: str = ""
    latent: tuple[int, int, int] | None = None
    reuse_static_plans: bool = True
    calls: list[CallRecord] = field(default_factory=list, repr=False)
    tuned_configs: masks.TunedConfigs | None = field(init=False, default=None, repr=False)
    step: AttentionStep = field(init=False, repr=False)
    _static_plans: dict[tuple, _Plan] = field(init=False, default_factory=dict, repr=False)
    # reorder="auto": the candidate chosen per (layer, launch shape), kept across the denoising steps
    _choices: dict[tuple, str] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.method_params, Mapping):
            raise ValueError(f"method_params must be a dict of method {self.method!r}'s parameters, got "
                             f"{self.method_params!r}")
        method = masks.get(self.method)
        method.resolve(self.method_params)  # unknown method, parameter or value: a ValueError naming it
        if not isinstance(self.model, str):
            raise ValueError(f"model must be a string naming the model (keys of tuned configs), got {self.model!r}")
        self.latent = masks.check_latent("latent", self.latent)
        if not isinstance(self.reuse_static_plans, bool):
            raise ValueError(f"reuse_static_plans must be a bool, got {self.reuse_static_plans!r}")
        if method.tuned:
            self.tuned_configs = masks.TunedConfigs(self.method, self.method_params.get("tuned_config"))
        backend = kernels.get(self.backend)
        if (refused := placement.method_refused(self.backend, self.method)) is not None:
            raise ValueError(refused)
        try:
            variant = variants.get(self.reorder)
        except ValueError:
            raise ValueError(f"reorder must be one of {[*variants.VARIANTS, *variants.REORDER_WORDS]} (a variant of "
                             f"wavealign.variants), got {self.reorder!r}") from None
        self.block_size = check_int("block_size", self.block_size, lo=1)
        reorderers.get(self.reorderer)
        if self.hardware is None:
            detected = hardware_registry.detect()
            self.hardware = None if detected is None else detected.name
        if self.hardware is not None:
            self.hardware = hardware_registry.get(self.hardware).name
            # also with wave_size given, which skips the wave lookup below
            if (refused := placement.hardware_refused(self.hardware, self.backend, "timed")) is not None:
                raise ValueError(refused)
        if not backend.is_available():  # hardware= names the GPU to plan for, not one this process has
            raise ValueError(f"backend {self.backend!r} cannot run in this process (no GPU it runs on, or its "
                             f"package missing); expected one of the backends that can: {kernels.available()}")
        if self.wave_size is not None:
            self.wave_size = check_int("wave_size", self.wave_size, lo=1, hi=launch_order.MAX_WAVE_SIZE)
        geometry = backend.geometry(self.hardware, self.block_size, self.wave_size)
        self.wave_size = geometry.wave_size
        if variant.skip in ("policy", "choose") and self.hardware is None:
            raise ValueError(f"reorder={self.reorder!r} needs hardware= (a wavealign.hardware id: its skip profile or "
                             "the GPU the order is chosen for)")
        if variant.skip == "policy":
            skip.load_profile(self.hardware)  # a ValueError naming the hardware when there is none
        self.step = AttentionStep(backend=self.backend, variant=variant, geometry=geometry, reorderer=self.reorderer,
                                  latent=self.latent, token_ordered=method.token_order is not None)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, layer: int = 0,
                 latent: tuple[int, int, int] | None = None) -> torch.Tensor:
        """Attention of q over k, v, all (B, H, N, D), in the model's self-attention layer ``layer`` of a video of
        ``latent`` (T, H, W) tokens (default: this object's ``latent``); one mask and one order per batch element."""
        layer = check_int("layer", layer, lo=0)
        latent = self.latent if latent is None else masks.check_latent("latent", latent)
        kernels.check_qkv_tensors(q=q, k=k, v=v)
        if q.dim() != 4 or q.shape != k.shape or k.shape != v.shape:
            raise ValueError(f"q, k, v must be (B, H, N, D) of one shape (self-attention), got {tuple(q.shape)}, "
                             f"{tuple(k.shape)}, {tuple(v.shape)}")
        if q.shape[1] > MAX_HEADS:
            raise ValueError(f"q, k, v must be (B, H, N, D); dim 1 is {q.shape[1]}, more heads than any model has "
                             f"(at most {MAX_HEADS} taken): (B, N, H, D) tensors? pass q.transpose(1, 2) and so on")
        q, k, v = (t.contiguous() for t in (q, k, v))
        return torch.cat([self._one(q[b:b + 1], k[b:b + 1], v[b:b + 1], layer, latent) for b in range(q.shape[0])])

    def _one(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int,
             latent: tuple[int, int, int] | None) -> torch.Tensor:
        method = masks.get(self.method)
        identity = masks.identity_params(self.method, model=self.model, layer=layer, heads=list(range(q.shape[1])),
                                         latent=latent)
        shape = LaunchShape.of(q, k, self.block_size, v=v, hardware=self.hardware, wave_size=self.wave_size)
        static = not method.needs_qk and self.reuse_static_plans
        key = (shape, tuple((name, tuple(value) if isinstance(value, list) else value)
                            for name, value in sorted(identity.items())))
        if static and key in self._static_plans:
            plan = self._static_plans[key]
            self._record(layer, q, plan, mask_ms=0.0, tuned=0, reused=True)
            return plan.launch.run(q, k, v)
        tuned_before = 0 if self.tuned_configs is None else self.tuned_configs.tuned
        store = {} if self.tuned_configs is None else {"tuned_config": self.tuned_configs}
        built, mask_ms = time_once(lambda: method.build_ordered(
            q, k, v, self.block_size, **{**identity, **self.method_params, **store}), q.device)
        mask = built.mask.reshape(-1, *built.mask.shape[-2:])
        step = self.step if latent == self.step.latent else replace(self.step, latent=latent)
        # the policy's features only where it may veto: a forced variant pays nothing for them
        features = step.features(mask, q.shape[-1]) if step.variant.skip == "policy" else None
        chosen = (layer, shape)  # reorder="auto": one choice per layer and shape, kept across steps
        prepared = step.prepare(mask, features=features, head_dim=q.shape[-1], keep=self._choices.get(chosen))
        if step.variant.skip == "choose":
            self._choices[chosen] = prepared.candidate
        plan = _Plan(float(mask.float().mean()), prepared, step.launch(mask, prepared.order, shape))
        if static:
            self._static_plans[key] = plan
        out = plan.launch.run(built.q, built.k, built.v)
        tuned = 0 if self.tuned_configs is None else self.tuned_configs.tuned - tuned_before
        self._record(layer, q, plan, mask_ms=mask_ms, tuned=tuned, reused=False)
        # a method's own token order: the output back in the original one (bitwise copies)
        return built.restore(out)

    def _record(self, layer: int, q: torch.Tensor, plan: _Plan, *, mask_ms: float, tuned: int, reused: bool) -> None:
        decision = plan.prepared.decision
        self.calls.append(CallRecord(layer=layer, tokens=q.shape[2], heads=q.shape[1],
                                     density=plan.density, reordered=decision.reordered,
                                     reason=decision.reason, mask_ms=mask_ms,
                                     reorder_ms=0.0 if reused else plan.prepared.reorder_ms, tuned_heads=tuned,
                                     plan_reused=reused, candidate=plan.prepared.candidate,
                                     choose_ms=0.0 if reused else plan.prepared.choose_ms))
