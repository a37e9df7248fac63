"""What ``reorder.plan`` (WaveAlign, both stages) costs on a GPU a cell only simulates.

A simulated cell's kernel time is the simulator's prediction for that GPU; the reorder the host planned on its CPU
took CPU time, which says nothing about the GPU. Its cost there is predicted instead: a fixed part (the graph's
small kernels, the grid barriers of the product kernel) plus a part proportional to the mask's entries (the byte
reads of the packing and the row counts, and Stage 1's products, which mask every bit of the packed mask into int8
MMA operands: per-SM integer work), scaled by SM count from the GPU it was measured on (clocks, per-SM rates and HBM
bandwidth are not modelled).

Measured on the H200 (``benchmarks/results/plan-h200/``, round 2: ``wavealign bench-reorder --device cuda``, medians
of two rounds of 50 plans of 2841 x 2841 blocks at 25 %): 0.85 ms for 8 heads and 1.835 ms for 40 heads, hence
0.60 ms fixed and 3.8 ps per mask entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from wavealign import hardware as hw_registry

MEASURED_ON = "h200"
FIXED_MS = 0.60
MS_PER_ENTRY = 3.81e-9  # on MEASURED_ON; scales with 1 / SM count
# WaveAlign's own stages: Stage 1 ("wavealign") and Stage 2 alone (the "identity" grouping); the model is of both
# stages, an upper bound for one
MODELLED_REORDERERS = ("wavealign", "identity")


@dataclass(frozen=True)
class PlanCost:
    """A predicted plan time and how it was obtained."""

    ms: float
    source: str


def predicted_plan_ms(heads: int, q_blocks: int, kv_blocks: int, hardware: str) -> PlanCost:
    """WaveAlign's plan time (both stages) for ``heads`` masks of ``q_blocks`` x ``kv_blocks`` on ``hardware``."""
    target, measured = hw_registry.get(hardware), hw_registry.get(MEASURED_ON)
    scale = measured.sm_count / target.sm_count
    ms = FIXED_MS + MS_PER_ENTRY * scale * heads * q_blocks * kv_blocks
    source = (f"predicted for {target.name}: {FIXED_MS} ms + {MS_PER_ENTRY * 1e9:.1f} ps/entry measured on "
              f"{measured.name}" + (f", x {scale:.2f} for SM count" if scale != 1 else ""))
    return PlanCost(ms=ms, source=source)
