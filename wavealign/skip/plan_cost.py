"""What ``launch_order.plan`` (WaveAlign, both stages, or Stage 2 alone) costs on a GPU a cell only simulates.

A simulated cell's kernel time is the simulator's prediction for that GPU; the reorder the host planned on its CPU
took CPU time, which says nothing about the GPU. Its cost there is predicted instead: a fixed part (the graph's
small kernels, the grid barriers of the product kernel) plus a part proportional to the mask's entries (the byte
reads of the packing and the row counts, and Stage 1's products, which mask every bit of the packed mask into int8
MMA operands: per-SM integer work), scaled by SM count from the GPU it was measured on (clocks, per-SM rates and HBM
bandwidth are not modelled).

Measured on the H200 (``benchmarks/results/plan-h200/``, round 2: ``wavealign bench-reorder --device cuda``, medians
of two rounds of 50 plans of 2841 x 2841 blocks at 25 %): 0.85 ms for 8 heads and 1.835 ms for 40 heads, hence
0.60 ms fixed and 3.8 ps per mask entry. Stage 2 alone (the row counts and a sort per wave bucket, no Stage 1 products)
was 0.35 ms for 40 heads x 2841 x 2841 on the H200 (``plan-h200/``, round 1, "random, 40, Stage 2 only"): 1.08 ps per
mask entry, taken as all proportional to the entries (its fixed part is within that measurement's spread).
"""

from __future__ import annotations

from dataclasses import dataclass

from wavealign import hardware as hw_registry
from wavealign.launch_order.candidates import Candidate

MEASURED_ON = "h200"
FIXED_MS = 0.60
MS_PER_ENTRY = 3.81e-9  # on MEASURED_ON; scales with 1 / SM count
# WaveAlign's own stages: Stage 1 ("wavealign") and Stage 2 alone (the "identity" grouping); the model is of both
# stages, an upper bound for one
MODELLED_REORDERERS = ("wavealign", "identity")
STAGE2_MS_PER_ENTRY = 0.35 / (40 * 2841 * 2841)  # Stage 2 alone, on MEASURED_ON
# balanced Stage 2's host loop (launch_order.stage2.balanced): 18.4 ms for 40 x 2841 rows on the project's 2-core
# CPU VM (2026-12-05), an upper bound for a GPU host's CPU
BALANCE_MS_PER_ROW = 18.4 / (40 * 2841)


@dataclass(frozen=True)
class PlanCost:
    """A predicted plan time and how it was obtained."""

    ms: float
    source: str


def predicted_plan_ms(heads: int, q_blocks: int, kv_blocks: int, hardware: str, stages: str = "both") -> PlanCost:
    """WaveAlign's plan time for ``heads`` masks of ``q_blocks`` x ``kv_blocks`` on ``hardware``: of Stage 2 alone
    for ``stages="temporal"``, else of both stages (an upper bound for Stage 1 alone, which is most of it)."""
    target, measured = hw_registry.get(hardware), hw_registry.get(MEASURED_ON)
    scale = measured.sm_count / target.sm_count
    entries = heads * q_blocks * kv_blocks
    fixed, per_entry, what = ((0.0, STAGE2_MS_PER_ENTRY, "Stage 2 alone: ") if stages == "temporal"
                              else (FIXED_MS, MS_PER_ENTRY, ""))
    ms = fixed + per_entry * scale * entries
    source = (f"predicted for {target.name}: {what}{fixed} ms + {per_entry * 1e9:.2f} ps/entry measured on "
              f"{measured.name}" + (f", x {scale:.2f} for SM count" if scale != 1 else ""))
    return PlanCost(ms=ms, source=source)


def candidate_plan_ms(candidate: Candidate, heads: int, q_blocks: int, kv_blocks: int, hardware: str) -> PlanCost:
    """The plan time of a chooser's ``candidate`` on ``hardware``: none for the original; WaveAlign's model of both
    stages where it runs Stage 1 (itself or as the base of a scheduler-aware Stage 2), else of Stage 2 alone (a sort
    of each head's rows, as longest-first, the curve and the round buckets are); plus balanced Stage 2's host loop."""
    if candidate.stages == "none":
        return PlanCost(ms=0.0, source="the original order: no plan")
    stage1 = "wavealign" in (candidate.reorderer, candidate.params.get("base"))
    cost = predicted_plan_ms(heads, q_blocks, kv_blocks, hardware, stages="both" if stage1 else "temporal")
    if candidate.reorderer != "balanced":
        return cost
    return PlanCost(ms=cost.ms + BALANCE_MS_PER_ROW * heads * q_blocks,
                    source=f"{cost.source} + {BALANCE_MS_PER_ROW * 1e3:.3f} us/row of balanced Stage 2 on the host")
