"""What ``reorder.plan`` (WaveAlign, both stages) costs on a GPU a cell only simulates.

A simulated cell's kernel time is the simulator's prediction for that GPU; the reorder the host planned on its CPU
took CPU time, which says nothing about the GPU. Its cost there is predicted instead: a fixed part (the launch
sequence, the sorts and small kernels) plus a part proportional to the mask's entries (Stage 1's products unpack
every bit of the L2-resident packed mask into tensor-core operands: per-SM integer work, not bytes), scaled by SM
count from the GPU it was measured on (clocks and per-SM rates are not modelled).

Measured on the H200 (``benchmarks/results/plan-h200/``, ``wavealign bench-reorder --device cuda``, medians of two
rounds of 50 plans of 2841 x 2841 blocks at 25 %): 2.45 ms for 8 heads and 5.11 ms for 40 heads, hence 1.79 ms fixed
and 10.3 ps per mask entry at 4.8 TB/s.
"""

from __future__ import annotations

from dataclasses import dataclass

from wavealign import hardware as hw_registry

MEASURED_ON = "h200"
FIXED_MS = 1.79
MS_PER_ENTRY = 1.029e-8  # on MEASURED_ON; scales with 1 / SM count
# WaveAlign's own stages: Stage 1 ("wavealign") and Stage 2 alone (the "identity" grouping); the model is of both
# stages, an upper bound for one (Stage 2 alone took 0.35 ms of the 40-head 5.1 ms)
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
