"""The attention step, one for every caller: a block mask -> the skip decision -> the launch order -> the backend's
launch -> its run, the output in the original row order (bitwise what running without the reorder gives).

    step = AttentionStep(backend="fa4", variant=variants.get("adaptive"),
                         geometry=kernels.get("fa4").geometry("h200", block_size=128))
    prepared = step.prepare(mask, features=step.features(mask, head_dim=128))   # decision and order
    out = step.launch(mask, prepared.order, LaunchShape.of(q, k, 128)).run(q, k, v)

A sweep cell (``wavealign.pipeline``) prepares the step on its group's mask and hands it to its measurer (timed,
simulated, profiled); model code calls ``wavealign.integrations.attention.BlockSparseAttention``, which builds the
method's mask from the live Q/K and runs this step on it (``integrations.diffusers``, ``integrations.vllm_omni``,
``lab/bench_e2e.py``). The variant (``wavealign.variants``) is the one vocabulary both speak.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from wavealign import inputs, kernels, launch_order, masks, reorderers, skip, variants
from wavealign.instruments.timing import synced_clock
from wavealign.kernels import Launch, LaunchShape
from wavealign.records import DEFAULT_REORDERER, SPATIAL_STAGES, AttentionSpec, InputSpec, LaunchGeometry

T = TypeVar("T")
# times a plan: timer(plan, device, warmup) -> (plan's value, ms); ``warmup`` says a first call may hold a compile
PlanTimer = Callable[[Callable[[], T], torch.device, bool], tuple[T, float]]


def time_once(plan: Callable[[], T], device: torch.device, warmup: bool = False) -> tuple[T, float]:
    """``plan()`` and its host wall time in ms, synchronised on CUDA: a live call's own cost, no warm-up."""
    start = synced_clock(device)
    value = plan()
    return value, (synced_clock(device) - start) * 1e3


@dataclass(frozen=True)
class LaunchDecision:
    """The stages a step runs (its variant's, or ``none`` where the skip policy vetoed them) and the policy's
    verdict behind it: ``skip_reorder`` whether reordering pays (None where the policy was not asked), ``reason``
    and ``predicted_gain_ms``."""

    stages: str
    skip_reorder: bool | None
    reason: str
    predicted_gain_ms: float = math.nan

    @property
    def reordered(self) -> bool:
        return self.stages != "none"


@dataclass(frozen=True)
class Prepared:
    """A step made ready on one mask: the decision, the launch order (None: the original) and what planning it
    cost; for a variant that chooses its order, the chooser's answer (None where an earlier choice was kept) and the
    name of the order applied."""

    mask: torch.Tensor
    decision: LaunchDecision
    order: launch_order.RowOrder | None
    reorder_ms: float
    candidate: str = launch_order.candidates.ORIGINAL
    choice: Any = None  # launch_order.chooser.Choice

    @property
    def choose_ms(self) -> float:
        """What choosing the order cost on this host (planning and predicting every candidate); 0 where none ran."""
        return 0.0 if self.choice is None else self.choice.choose_ms


@dataclass(frozen=True)
class AttentionStep:
    """One attention step: ``backend``'s launch of a mask, rows in the order ``variant`` asks, in waves and blocks of
    ``geometry``, decided by the skip profile of its GPU (the one it runs on or is simulated for) where the variant
    lets the policy veto."""

    backend: str
    variant: variants.Variant
    geometry: LaunchGeometry
    reorderer: str = DEFAULT_REORDERER
    reorderer_params: Mapping[str, Any] = field(default_factory=dict)
    backend_params: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    # the latent video (T, H, W) in tokens, flattened frame-major; None where unknown (a bare shape)
    latent: tuple[int, int, int] | None = None
    # the mask's rows are blocks of its method's own token order (masks.TokenOrder: VSA cubes, SVG2 clusters), not
    # of the frame-major sequence, so a block has no latent position a reorderer could order it by
    token_ordered: bool = False

    @classmethod
    def of(cls, spec: AttentionSpec, on: InputSpec) -> AttentionStep:
        """The step ``spec`` describes, on the inputs ``on`` (their seed, latent video and token order)."""
        return cls(backend=spec.backend, variant=variants.recorded(spec.variant, spec.stages, spec.skip),
                   geometry=spec.geometry, reorderer=spec.reorderer, reorderer_params=spec.reorderer_params,
                   backend_params=spec.backend_params, seed=on.seed, latent=inputs.latent(on),
                   token_ordered=masks.get(on.method).token_order is not None)

    def features(self, mask: torch.Tensor, head_dim: int) -> skip.SkipFeatures:
        """The mask's statistics the skip policy reads, for this step's GPU and wave."""
        g = self.geometry
        return skip.features(mask, g.profile_hardware, block_size=g.block_size, head_dim=head_dim,
                             wave_size=g.wave_size)

    def decide(self, features: skip.SkipFeatures | None) -> LaunchDecision:
        """The skip policy's verdict on ``features`` and the stages that follow from it. ``features`` may be None
        for a variant the policy cannot veto (the verdict is then not asked). Without a skip profile for the GPU the
        verdict is to reorder, saying so."""
        if self.variant.skip == "choose":
            raise ValueError(f"variant {self.variant.name!r} chooses its order: prepare() asks the chooser")
        if features is None:
            if self.variant.skip == "policy":
                raise ValueError(f"variant {self.variant.name!r} lets the skip policy decide: it needs the mask's "
                                 "features")
            return LaunchDecision(self.variant.stages, None, f"variant {self.variant.name!r} forces its stages")
        try:
            profile = skip.load_profile(self.geometry.profile_hardware)
        except skip.NoProfile as exc:
            skip_reorder, reason, gain = True, f"reorder: no skip profile ({exc})", math.nan
        else:
            verdict = skip.SkipPolicy(profile).decide(features)
            skip_reorder, reason, gain = bool(verdict.reorder), verdict.reason, float(verdict.predicted_gain_ms)
        stages = self.variant.stages if self.variant.skip == "force" or skip_reorder else "none"
        return LaunchDecision(stages, skip_reorder, reason, gain)

    def plan_order(self, mask: torch.Tensor, stages: str, candidate: str | None = None) -> launch_order.RowOrder:
        """The launch order of ``mask`` for ``stages``: this step's reorderer, then Stage 2 where ``stages`` says; or
        the chooser's ``candidate`` (``launch_order.candidates``: its own stages and reorderer). A reorderer that
        declares one of ``reorderers.STEP_PARAMS`` gets this step's value of it; one that reads the latent position
        of a block (declares ``latent``) refuses a token-ordered mask."""
        reorderer, params = self.reorderer, dict(self.reorderer_params)
        if candidate is not None:
            c = launch_order.candidates.get(candidate)
            stages, reorderer, params = c.stages, c.reorderer, dict(c.params)
        declared = reorderers.get(reorderer).params
        if stages in SPATIAL_STAGES and (refused := order_refused(reorderer, self.token_ordered)):
            raise ValueError(refused)
        facts = {"latent": self.latent, "block_size": self.geometry.block_size}
        params.update({k: facts[k] for k in reorderers.STEP_PARAMS if k in declared})
        return launch_order.plan(mask, wave_size=self.geometry.wave_size, stages=stages, seed=self.seed,
                                 reorderer=reorderer, **params)

    def choose(self, mask: torch.Tensor, head_dim: int) -> Any:
        """The order chooser's answer for ``mask`` on this step's backend and GPU (``launch_order.rank``), with the
        corrections that GPU's skip profile learned (none without a profile)."""
        hardware = self.geometry.profile_hardware
        if hardware is None:
            raise ValueError(f"variant {self.variant.name!r} chooses the order for a GPU: it needs hardware= (a "
                             "wavealign.hardware id)")
        from wavealign.launch_order import chooser

        try:
            fit = chooser.fit_from(skip.load_profile(hardware).chooser, self.backend)
        except skip.NoProfile:
            fit = chooser.ChooserFit()
        return chooser.rank(mask, backend=self.backend, hardware=hardware, head_dim=head_dim,
                            block_size=self.geometry.block_size, wave_size=self.geometry.wave_size, latent=self.latent,
                            token_ordered=self.token_ordered, seed=self.seed, fit=fit)

    def prepare(self, mask: torch.Tensor, *, features: skip.SkipFeatures | None = None,
                timer: PlanTimer = time_once, head_dim: int = 128, keep: str | None = None,
                choice: Any = None) -> Prepared:
        """Decide and plan the order of ``mask`` (H, MB, NB); ``timer`` times the plan (a live call's one plan, or
        a sweep's median of several). A variant that chooses its order asks the chooser (``head_dim``: the
        attention's), or plans ``keep``, a candidate it chose for this layer and shape before, or the pick of
        ``choice``, the chooser's answer (``choose``) made for this layer and shape on another thread."""
        if self.variant.skip == "choose":
            return self._prepare_chosen(mask, timer, head_dim, keep, choice)
        decision = self.decide(features)
        if not decision.reordered:
            return Prepared(mask, decision, None, 0.0)
        # a first plan of Stage 2 alone, or of a torch reorderer, holds JIT compiles; compiled libraries time it
        warmup = decision.stages == "temporal" or reorderers.get(self.reorderer).needs_warmup
        order, ms = timer(lambda: self.plan_order(mask, decision.stages), mask.device, warmup)
        return Prepared(mask, decision, order, ms, order.candidate)

    def _prepare_chosen(self, mask: torch.Tensor, timer: PlanTimer, head_dim: int, keep: str | None,
                        choice: Any) -> Prepared:
        """``prepare`` for a choosing variant: the chooser's candidate (or ``keep``), planned and timed alone, as a
        later call that keeps the choice pays it."""
        if keep is None:
            choice = self.choose(mask, head_dim) if choice is None else choice
            keep = choice.candidate
            original = next(s for s in choice.scored if s.candidate == launch_order.candidates.ORIGINAL)
            chosen = next(s for s in choice.scored if s.candidate == keep)
            reason, gain = choice.reason, original.net_ms - chosen.net_ms
        else:
            reason, gain = f"{keep}: kept from this layer's earlier choice", math.nan
        c = launch_order.candidates.get(keep)
        decision = LaunchDecision(c.stages, c.stages == "none", reason, gain)
        if not decision.reordered:
            return Prepared(mask, decision, None, 0.0, keep, choice)
        warmup = c.stages == "temporal" or reorderers.get(c.reorderer).needs_warmup
        order, ms = timer(lambda: self.plan_order(mask, c.stages, keep), mask.device, warmup)
        return Prepared(mask, decision, order, ms, keep, choice)

    def wave_working_set_bytes(self, prepared: Prepared, features: skip.SkipFeatures, head_dim: int) -> float:
        """The K/V bytes a wave touches (``skip.wave_working_set_bytes``) in the launch order ``prepared`` applies:
        the original order's (``features``) when it applies none."""
        if prepared.order is None:
            return features.wave_working_set_bytes
        return skip.wave_working_set_bytes(launch_order.permute_mask(prepared.mask, prepared.order),
                                           self.geometry.wave_size, self.geometry.block_size, head_dim)

    def launch(self, mask: torch.Tensor, order: launch_order.RowOrder | None, shape: LaunchShape) -> Launch:
        """``backend.plan``: the launch of ``mask`` in ``order`` for ``shape``."""
        return kernels.get(self.backend).plan(mask, order, shape, **self.backend_params)


def order_refused(reorderer: str, token_ordered: bool) -> str | None:
    """Why ``reorderer`` cannot order a mask whose rows are blocks of its method's own token order
    (``token_ordered``: VSA cubes, SVG2 clusters), or None: one that reads a block's frame-major latent position
    (declares ``latent``: ``curve``) finds none there. A sweep filters such cells as it expands its grid."""
    if token_ordered and "latent" in reorderers.get(reorderer).params:
        return (f"reorderer {reorderer!r} orders query blocks by their frame-major latent position, but this mask's "
                "rows are blocks of its method's own token order (cubes or clusters), which have none; expected a "
                "method without a token order")
    return None
