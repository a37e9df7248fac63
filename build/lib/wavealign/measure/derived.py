"""Figures derived from times and byte counts: effective TFLOP/s, the 1/rho bound and its gap, intensity."""

from __future__ import annotations

from dataclasses import dataclass


def attention_flops(seq_q: int, seq_kv: int, head_dim: int, heads: int, density: float = 1.0,
                    batch: int = 1) -> float:
    """FLOPs of the attention forward that a block density ``density`` leaves: 4 * Nq * Nkv * D * H * rho
    (two matrix products of 2 * Nq * Nkv * D each)."""
    if not 0.0 <= density <= 1.0:
        raise ValueError(f"density must be in [0, 1], got {density}")
    return 4.0 * seq_q * seq_kv * head_dim * heads * batch * density


def effective_tflops(flops: float, time_ms: float) -> float:
    """Useful FLOPs per second, in TFLOP/s."""
    if time_ms <= 0:
        raise ValueError(f"time_ms must be > 0, got {time_ms}")
    return flops / (time_ms * 1e-3) / 1e12


@dataclass(frozen=True)
class BoundGap:
    """The compute-proportional bound 1/rho, the measured sparse-over-dense speedup, and their ratio."""

    bound_speedup: float
    actual_speedup: float

    @property
    def gap(self) -> float:
        """(1/rho) / S_actual: 1.0 means the kernel saves exactly the skipped compute."""
        return self.bound_speedup / self.actual_speedup


def gap_to_bound(dense_ms: float, sparse_ms: float, density: float) -> BoundGap:
    """Compare a sparse run with the same backend's dense run against the 1/rho bound."""
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density must be in (0, 1], got {density}")
    if dense_ms <= 0 or sparse_ms <= 0:
        raise ValueError(f"dense_ms and sparse_ms must be > 0, got {dense_ms} and {sparse_ms}")
    return BoundGap(bound_speedup=1.0 / density, actual_speedup=dense_ms / sparse_ms)


def operational_intensity(flops: float, dram_bytes: float) -> float:
    """FLOPs per byte of DRAM traffic (the roofline's x axis)."""
    if dram_bytes <= 0:
        raise ValueError(f"dram_bytes must be > 0, got {dram_bytes}")
    return flops / dram_bytes
