"""What the simulator needs to know about how each attention backend executes a block-sparse mask.

The table holds the facts that are not in ``wavealign.hardware`` (CTAs per SM, hence the wave size,
live there). ``kv_walk`` is taken from the registered ``wavealign.kernels`` backend when one exists,
so the kernel module stays the single source of truth once it lands.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

KV_WALKS = ("forward", "reverse")
HEAD_ORDERS = ("sequential", "parallel")


@dataclass(frozen=True)
class ExecutionFacts:
    """How one backend runs a (H, MB, NB) block mask: tiles, walk and launch order, per-block cost."""

    name: str
    # one query tile per CTA; one K/V tile per inner-loop step (the mask's block size by default)
    block_m: int
    block_n: int
    # the order one query row walks its K/V list: FA4 walks it from the last block down
    kv_walk: str
    # "sequential": grid x = query block, y = head, so all of head 0 launches before head 1
    # (FA4's SingleTileScheduler, FlexAttention's and our Triton kernel's grids, FlashInfer's work list);
    # "parallel": launch slot p of every head before slot p + 1 of any
    head_order: str
    # fraction of the SM's dense bf16 peak the inner MMA loop reaches (provisional, to be calibrated
    # against measured kernel_ms by `wavealign validate-sim`)
    mma_efficiency: float
    # per K/V block cost outside the MMAs: index load, mask/softmax bookkeeping, pipeline bubble
    block_overhead_s: float
    element_bytes: int = 2  # bf16 Q/K/V

    def kv_block_bytes(self, head_dim: int) -> int:
        """Bytes one inner step reads: a K tile and a V tile of ``block_n`` tokens."""
        return 2 * self.block_n * head_dim * self.element_bytes

    def q_block_bytes(self, head_dim: int) -> int:
        """Bytes of one query tile, read once per row."""
        return self.block_m * head_dim * self.element_bytes


# Sources: WaveAlign paper Sec. V (FA4 128x128 on H100, reverse K/V walk; FlashInfer 64x64 on A40);
# FA4 flash_attn/cute tile scheduler (grid (m_block, head, batch)); torch FlexAttention and the Triton
# block-sparse kernel launch grid (q_block, batch*head). Efficiencies and overheads are provisional
# round figures (FA3/FA4 reach ~75% of the H100 bf16 peak dense; Triton-based kernels ~50-60%).
_TABLE = {
    "fa4": ExecutionFacts("fa4", 128, 128, "reverse", "sequential", mma_efficiency=0.75,
                          block_overhead_s=20e-9),
    "flashinfer": ExecutionFacts("flashinfer", 64, 64, "forward", "sequential", mma_efficiency=0.6,
                                 block_overhead_s=20e-9),
    "triton": ExecutionFacts("triton", 128, 128, "forward", "sequential", mma_efficiency=0.55,
                             block_overhead_s=40e-9),
    "flex": ExecutionFacts("flex", 128, 128, "forward", "sequential", mma_efficiency=0.55,
                           block_overhead_s=40e-9),
    "reference": ExecutionFacts("reference", 128, 128, "forward", "sequential", mma_efficiency=0.5,
                                block_overhead_s=40e-9),
}


def names() -> list[str]:
    """Backends whose execution the simulator can model."""
    return sorted(_TABLE)


def get(backend: str | ExecutionFacts, block_size: int | None = None) -> ExecutionFacts:
    """The facts for ``backend``; ``block_size`` overrides the tile sizes to match the mask's blocks."""
    if isinstance(backend, ExecutionFacts):
        facts = backend
    else:
        if backend not in _TABLE:
            raise ValueError(f"backend must be one of {names()} (or an ExecutionFacts), got {backend!r}")
        facts = _TABLE[backend]
        facts = replace(facts, kv_walk=_registered_kv_walk(backend) or facts.kv_walk)
    if block_size is not None:
        if int(block_size) < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        facts = replace(facts, block_m=int(block_size), block_n=int(block_size))
    if facts.kv_walk not in KV_WALKS:
        raise ValueError(f"kv_walk must be one of {KV_WALKS}, got {facts.kv_walk!r}")
    if facts.head_order not in HEAD_ORDERS:
        raise ValueError(f"head_order must be one of {HEAD_ORDERS}, got {facts.head_order!r}")
    return facts


def _registered_kv_walk(backend: str) -> str | None:
    """The walk declared by the registered kernel, if that backend's module is present."""
    from wavealign import kernels

    try:
        return kernels.get(backend).kv_walk
    except ValueError:
        return None
