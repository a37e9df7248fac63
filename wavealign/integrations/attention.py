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

With ``reorder="auto"`` the order chooser picks each layer's exact order once per shape (``launch_order.choose``),
and the pick is kept across the denoising steps. It runs on a host thread of its own (``background_choice``, on by
default), on a bit-packed host copy of the layer's mask (an eighth of its bool bytes), one layer after another: a
layer runs the original order until its pick lands, so the GPU never waits for the chooser (a layer of a long video
can take seconds to choose) and the output is bitwise the same whichever order ran. ``unchosen()`` counts the layers
still waiting for their pick; ``wait_for_choices()`` waits for those being made.

Every argument is checked when the object is made, before any GPU work (where it can run: ``wavealign.placement``).
A method tuned per head (SpargeAttn, MInference) is tuned on a head's first call and its config kept, keyed by
(``model``, ``layer``, head), in ``tuned_configs`` (in memory; also in the JSON file ``method_params["tuned_config"]``
names, when given): later calls pay the method's prediction only, as upstream's offline-tuned configs do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from wavealign import hardware as hardware_registry
from wavealign import kernels, launch_order, masks, placement, reorderers, skip, variants
from wavealign.attention import AttentionStep, LaunchDecision, Prepared, time_once
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
    latent) (off: every call builds and plans, as a live dynamic method would). ``background_choice`` (reorder="auto")
    makes each layer's choice on the chooser's own thread, the original order running until it lands; off, the
    layer's first call of a shape waits for it."""

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
    background_choice: bool = True
    calls: list[CallRecord] = field(default_factory=list, repr=False)
    tuned_configs: masks.TunedConfigs | None = field(init=False, default=None, repr=False)
    step: AttentionStep = field(init=False, repr=False)
    _static_plans: dict[tuple, _Plan] = field(init=False, default_factory=dict, repr=False)
    # reorder="auto", per (layer, launch shape), or per plan key for a static method: the candidate applied and kept
    # across the denoising steps, the chooser's answer (landed, applied at the next call), or its pending future
    _choices: dict[tuple, str | Any] = field(init=False, default_factory=dict, repr=False)
    _chooser: ThreadPoolExecutor | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.method_params, Mapping):
            raise ValueError(f"method_params must be a dict of method {self.method!r}'s parameters, got "
                             f"{self.method_params!r}")
        method = masks.get(self.method)
        method.resolve(self.method_params)  # unknown method, parameter or value: a ValueError naming it
        if not isinstance(self.model, str):
            raise ValueError(f"model must be a string naming the model (keys of tuned configs), got {self.model!r}")
        self.latent = masks.check_latent("latent", self.latent)
        for name in ("reuse_static_plans", "background_choice"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
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
        # reorder="auto": one choice per layer and shape; a static method's, like its mask, per plan key
        chosen = key if static else (layer, shape)
        if step.variant.skip == "choose":
            prepared = self._prepare_chosen(step, mask, chosen, q.shape[-1])
        else:
            prepared = step.prepare(mask, features=features, head_dim=q.shape[-1])
        plan = _Plan(float(mask.float().mean()), prepared, step.launch(mask, prepared.order, shape))
        if static and (step.variant.skip != "choose" or isinstance(self._choices.get(chosen), str)):
            self._static_plans[key] = plan  # never the original order run while the pick is being made
        out = plan.launch.run(built.q, built.k, built.v)
        tuned = 0 if self.tuned_configs is None else self.tuned_configs.tuned - tuned_before
        self._record(layer, q, plan, mask_ms=mask_ms, tuned=tuned, reused=False)
        # a method's own token order: the output back in the original one (bitwise copies)
        return built.restore(out)

    def unchosen(self) -> int:
        """How many (layer, shape) pairs seen with reorder="auto" still run the original order: their pick is being
        made on the chooser's thread, or has landed and is applied from the layer's next call."""
        return sum(not isinstance(kept, str) for kept in self._choices.values())

    def wait_for_choices(self) -> None:
        """Block until every choice handed to the chooser's thread has landed (a failed one raises its error)."""
        for key, kept in list(self._choices.items()):
            if isinstance(kept, Future):
                self._choices[key] = kept.result()

    def _prepare_chosen(self, step: AttentionStep, mask: torch.Tensor, key: tuple, head_dim: int) -> Prepared:
        """reorder="auto": the pick kept for this layer and shape (``key``); its choice made on this call (without
        ``background_choice``) or applied now that it has landed; else the original order, this layer's choice queued
        on the chooser's thread at its first call."""
        kept = self._choices.get(key)
        if isinstance(kept, Future) and kept.done():
            kept = kept.result()  # a failed choice raises its error here
        if isinstance(kept, str):
            return step.prepare(mask, head_dim=head_dim, keep=kept)
        if kept is None:
            if not self.background_choice:
                prepared = step.prepare(mask, head_dim=head_dim)
                self._choices[key] = prepared.candidate
                return prepared
            self._choices[key] = self._choose_later(step, mask, head_dim)
        elif not isinstance(kept, Future):  # the answer landed: applied from this call on
            self._choices[key] = kept.candidate
            return step.prepare(mask, head_dim=head_dim, choice=kept)
        original = launch_order.candidates.ORIGINAL
        return Prepared(mask, LaunchDecision("none", None, f"{original}: the order chooser is choosing this layer's "
                                                           "order on its thread"), None, 0.0, original)

    def _choose_later(self, step: AttentionStep, mask: torch.Tensor, head_dim: int) -> Future:
        """``step.choose`` of ``mask`` on the chooser's thread, queued behind the layers before it."""
        if self._chooser is None:
            self._chooser = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wavealign-chooser")
        take = host_copy(mask)
        return self._chooser.submit(lambda: step.choose(take(), head_dim))

    def _record(self, layer: int, q: torch.Tensor, plan: _Plan, *, mask_ms: float, tuned: int, reused: bool) -> None:
        decision = plan.prepared.decision
        self.calls.append(CallRecord(layer=layer, tokens=q.shape[2], heads=q.shape[1],
                                     density=plan.density, reordered=decision.reordered,
                                     reason=decision.reason, mask_ms=mask_ms,
                                     reorder_ms=0.0 if reused else plan.prepared.reorder_ms, tuned_heads=tuned,
                                     plan_reused=reused, candidate=plan.prepared.candidate,
                                     choose_ms=0.0 if reused else plan.prepared.choose_ms))


def host_copy(mask: torch.Tensor) -> Callable[[], torch.Tensor]:
    """A host copy of the bool ``mask`` (..., NB) for another thread, made without stopping this one: bit-packed along
    NB (``np.packbits``' order: an eighth of its bytes) and, on CUDA, copied into pinned memory on the current stream.
    Returns the function that other thread calls for the bool mask (waiting for the copy, then unpacking it)."""
    nb = mask.shape[-1]
    as_bytes = mask.view(torch.uint8)
    packed = torch.zeros(*mask.shape[:-1], -(-nb // 8), dtype=torch.uint8, device=mask.device)
    for bit in range(8):  # column j is bit 7 - j % 8 of byte j // 8; a slice at a time keeps the GPU's extra small
        column = as_bytes[..., bit::8]
        packed[..., :column.shape[-1]] |= column << (7 - bit)
    copied = None
    if mask.is_cuda:
        host = torch.empty(packed.shape, dtype=torch.uint8, pin_memory=True)
        host.copy_(packed, non_blocking=True)
        copied = torch.cuda.Event()
        copied.record()
    else:
        host = packed

    def take() -> torch.Tensor:
        if copied is not None:
            copied.synchronize()
        return torch.from_numpy(np.unpackbits(host.numpy(), axis=-1, count=nb).view(np.bool_))

    return take
