"""The order chooser: for a mask, a backend and a GPU, the exact launch order with the lowest predicted kernel time
net of its plan cost.

    order = launch_order.choose(mask, backend="fa4", hardware="h200")      # a RowOrder; order.candidate names it
    ranked = launch_order.rank(mask, backend="triton-static", hardware="h200")
    ranked.scored[0].candidate, ranked.predicted_rank("wavealign"), ranked.limit_ms

Its candidates are ``launch_order.candidates``: the original (choosing it is the adaptive skip's "skip"), Stage 2
alone, Stage 1 alone, WaveAlign, longest-first, the curve where the rows have a latent position, and, for a backend
whose tiles run on a static persistent scheduler (``kernels.ExecutionFacts.scheduler``, which the backend declares),
the round-aware and balanced Stage 2 (``launch_order.stage2``). Each is planned, and its kernel time predicted by
the L2/HBM simulator (``wavealign.sim.predict``: the whole launch's schedule, the L2 replayed on ``sample_heads``
heads) in the backend's execution facts on that GPU; its plan cost is predicted for that GPU
(``skip.plan_cost.candidate_plan_ms``), so the choice is deterministic for a mask and a seed. A GPU's skip profile
may correct the predictions (``ChooserFit``: a learned bias per candidate and a margin below which the original is
kept), fitted by ``wavealign refresh-profiles`` from a sweep's measured candidates.

Where the kernel's query tile spans ``q_stage`` mask blocks (FA4 on SM100), the blocks are first paired into units by
K/V overlap (``launch_order.pairing``) and every candidate orders the units: the choice's ``pairing`` and
``or_inflation`` say which and at what cost.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from wavealign import hardware as hardware_registry
from wavealign import kernels, reorderers
from wavealign.blockmask import MaskLike, as_dense, check_int
from wavealign.launch_order import candidates as registry
from wavealign.launch_order import pairing as pairing_mod
from wavealign.records import SPATIAL_STAGES

# heads whose L2 the prediction replays (the schedule is always the whole launch's): 4 of a 40-head layer keep a live
# choice to ~1 s of host CPU per layer (benchmarks/results/orders-h200/), taken once per (layer, shape)
DEFAULT_SAMPLE_HEADS = 4


@dataclass(frozen=True)
class ChooserFit:
    """What a GPU's skip profile learned of the chooser for one backend from measured candidates
    (``refresh-profiles``, ``analysis.chooserfit``): ``bias``,
    per candidate, the median log of measured over predicted kernel time relative to the original's (added to a
    prediction's log), and ``margin_pct``, the predicted net gain under which the original is kept."""

    bias: Mapping[str, float] = field(default_factory=dict)
    margin_pct: float = 0.0

    def __post_init__(self) -> None:
        for name, value in self.bias.items():
            registry.get(name)
            if not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"chooser bias of {name!r} must be a finite number, got {value!r}")
        if not isinstance(self.margin_pct, int | float) or not 0.0 <= self.margin_pct < 100.0:
            raise ValueError(f"chooser margin_pct must be a number in [0, 100), got {self.margin_pct!r}")


@dataclass(frozen=True)
class Scored:
    """One candidate's plan and predicted cost on the GPU, in ms."""

    candidate: str
    order: Any  # launch_order.RowOrder
    kernel_ms: float  # predicted (with the profile's bias)
    plan_ms: float  # predicted for the GPU
    prediction: Any = None  # the simulator's sim.Prediction behind kernel_ms (before the bias)

    @property
    def net_ms(self) -> float:
        return self.kernel_ms + self.plan_ms


@dataclass(frozen=True)
class Choice:
    """The chooser's answer: the chosen ``order`` (``order.candidate`` names it), every candidate ``scored`` (lowest
    net first, ties in ``candidates.CANDIDATES`` order), the order limit (``sim.order_limit``), why, what choosing
    cost on this host, and for a ``q_stage`` > 1 kernel the blocks' ``pairing`` (G, MB) and its ``or_inflation``."""

    order: Any
    scored: tuple[Scored, ...]
    limit: Any  # sim.Prediction of the order limit
    reason: str
    choose_ms: float
    pairing: torch.Tensor | None = None
    or_inflation: float = 1.0

    @property
    def limit_ms(self) -> float:
        return self.limit.kernel_time_s * 1e3

    @property
    def candidate(self) -> str:
        return self.order.candidate

    def predicted_rank(self, candidate: str) -> int | None:
        """1 for the candidate predicted fastest (net), and so on; None for one not weighed."""
        names = [s.candidate for s in self.scored]
        return names.index(candidate) + 1 if candidate in names else None

    def predicted_kernel_ms(self, candidate: str) -> float:
        return next((s.kernel_ms for s in self.scored if s.candidate == candidate), math.nan)


def eligible(backend: str, hardware: str, *, latent: tuple[int, int, int] | None = None,
             token_ordered: bool = False, names: Iterable[str] | None = None) -> list[registry.Candidate]:
    """The candidates weighed for ``backend`` on ``hardware``: those meant for its tile scheduler, the curve only
    where the rows have a latent position (``latent`` given, not a method's own token order); ``names`` narrows them
    (each must be a candidate)."""
    from wavealign import sim

    scheduler = sim.execution_facts(backend, hardware).scheduler
    wanted = None if names is None else {registry.get(n).name for n in names}
    out = []
    for c in registry.CANDIDATES:
        if wanted is not None and c.name not in wanted:
            continue
        positional = "latent" in reorderers.get(c.reorderer).params and c.stages in SPATIAL_STAGES
        if scheduler in c.schedulers and not (positional and (latent is None or token_ordered)):
            out.append(c)
    return out


def rank(mask: MaskLike, *, backend: str, hardware: str, head_dim: int = 128, block_size: int = 128,
         wave_size: int | None = None, latent: tuple[int, int, int] | None = None, token_ordered: bool = False,
         seed: int = 0, candidates: Iterable[str] | None = None, sample_heads: int | None = DEFAULT_SAMPLE_HEADS,
         fit: ChooserFit | None = None, l2_partitions: int | None = None) -> Choice:
    """Plan every eligible candidate for ``mask`` (bool (H, MB, NB) or (B, H, MB, NB)) and predict its net time on
    ``hardware`` with ``backend`` (``eligible``); the one with the lowest wins, unless ``fit``'s margin keeps the
    original. ``block_size`` is the mask's (tokens per block), ``wave_size`` the backend's wave there by default,
    ``latent`` the video's (T, H, W) in tokens for the curve, ``l2_partitions`` the simulator's (None: the GPU's)."""
    from wavealign import launch_order, sim
    from wavealign.skip import plan_cost

    start = time.perf_counter()
    hw = hardware_registry.get(hardware).name
    spec = kernels.get(backend)
    facts = sim.execution_facts(backend, hw)
    wave = spec.wave_size(hw) if wave_size is None else check_int("wave_size", wave_size, lo=1)
    block_size = check_int("block_size", block_size, lo=1)
    fit = fit or ChooserFit()
    dense = as_dense(mask)
    rows = dense.reshape(-1, *dense.shape[-2:])
    paired, pair_perm, inflation = rows, None, 1.0
    if facts.q_stage > 1:  # order units of paired blocks: the pairing is the planner's free, exact choice
        pair_perm = pairing_mod.pair_blocks(rows, facts.q_stage, seed)
        paired = pairing_mod.paired_rows(rows, pair_perm)
        inflation = pairing_mod.or_inflation(rows, pair_perm, facts.q_stage)
    units = sim.coarsen_rows(paired, facts.q_stage)
    heads, unit_rows, kv_blocks = units.shape
    launched = sim.launch_rows(paired, facts.q_stage)  # on the host once, for every candidate's prediction
    options = dict(backend=backend, hardware=hw, head_dim=head_dim, wave_size=wave, block_size=block_size)
    weighed = eligible(backend, hw, latent=latent, token_ordered=token_ordered, names=candidates)
    if not weighed:
        raise ValueError(f"no launch-order candidate applies to backend {backend!r} on {hw!r} among {candidates}")

    def score(c: registry.Candidate) -> Scored:
        order = plan_candidate(units, c, wave_size=wave, seed=seed, latent=latent,
                               block_size=block_size * facts.q_stage)
        predicted = sim.predict(launched, order, sample_heads=sample_heads, l2_partitions=l2_partitions, **options)
        plan = plan_cost.candidate_plan_ms(c, heads, unit_rows, kv_blocks, hw).ms
        return Scored(c.name, order, predicted.kernel_time_s * 1e3 * math.exp(fit.bias.get(c.name, 0.0)), plan,
                      predicted)

    with ThreadPoolExecutor(max_workers=min(len(weighed), 8)) as pool:  # the replay releases the GIL
        scored = list(pool.map(score, weighed))
    scored.sort(key=lambda s: s.net_ms)  # stable: ties keep the candidates' order
    best = scored[0]
    original = next((s for s in scored if s.candidate == registry.ORIGINAL), None)
    gain_pct = 100.0 * (1.0 - best.net_ms / original.net_ms) if original is not None else math.inf
    chosen, reason = best, f"{best.candidate}: predicted {best.net_ms:.3f} ms net, the lowest of {len(scored)}"
    if original is not None and best is not original and gain_pct < fit.margin_pct:
        chosen = original
        reason = (f"original: {best.candidate} predicted only {gain_pct:.2f} % faster net, under the profile's "
                  f"{fit.margin_pct:.2f} % margin")
    limit = sim.order_limit(launched if facts.q_stage == 1 else paired, **options)
    perm = chosen.order.perm.clone()  # a copy: the caller may write into it, never into a plan cache
    if dense.dim() == 4 and dense.shape[0] > 1:
        perm = perm.reshape(dense.shape[0], -1, unit_rows)
    order = launch_order.RowOrder._of(perm, wave, chosen.order.stages, chosen.order.reorderer, chosen.candidate)
    return Choice(order, tuple(scored), limit, reason, (time.perf_counter() - start) * 1e3, pair_perm, inflation)


def plan_candidate(units: torch.Tensor, candidate: registry.Candidate, *, wave_size: int, seed: int = 0,
                   latent: tuple[int, int, int] | None = None, block_size: int = 128) -> Any:
    """``candidate``'s launch order of ``units`` (the launch rows, (H, rows, NB) bool) as ``rank`` plans it: its
    stages and reorderer, the reorderer given the latent video and the tokens of a row (``block_size``) where it
    declares them."""
    from wavealign import launch_order

    params = dict(candidate.params)
    declared = reorderers.get(candidate.reorderer).params
    if "latent" in declared:
        params["latent"] = latent
    if "block_size" in declared:
        params["block_size"] = block_size
    return launch_order.plan(units, wave_size=wave_size, stages=candidate.stages, seed=seed,
                             reorderer=candidate.reorderer, **params)


def choose(mask: MaskLike, *, backend: str, hardware: str, **options: Any) -> Any:
    """The launch order ``rank`` chooses for ``mask``: a ``RowOrder`` whose ``candidate`` names it."""
    return rank(mask, backend=backend, hardware=hardware, **options).order


def fit_from(profile_chooser: Mapping[str, Any] | None, backend: str) -> ChooserFit:
    """``backend``'s entry of a skip profile's ``chooser`` section (``{backend: {bias: {...}, margin_pct: x}}``,
    written by ``wavealign refresh-profiles``) as a ``ChooserFit``; none: no correction."""
    section = (profile_chooser or {}).get(backend)
    if not section:
        return ChooserFit()
    return ChooserFit(bias=dict(section.get("bias") or {}), margin_pct=float(section.get("margin_pct", 0.0)))
