"""An L2/HBM simulator: predicts L2 hit ratio, HBM bytes and kernel time of a block-sparse attention
launch for any mask, row order and described GPU, so one can explore GPUs one does not own.

Model (issue 6; every approximation is listed in ``simulate``'s docstring):

- a **CTA scheduler** (``ExecutionFacts.scheduler``, ``wavealign.sim.engine``): the backend's wave
  (``kernels.get(backend).wave_size(hardware)``) of SM slots; *streaming*, each slot takes the next query row of the
  launch queue when it frees, or *static-persistent* (FA4 on SM100), slot s runs queue entries s, s + wave, ...;
  a row holds its slot for NNZ steps (one step = one K/V block), so the temporal skew of the paper's Fig. 4(b)/7
  emerges from the NNZ alone;
- **launch rows** of the backend's query tile on that GPU (``Backend.execution_on(hardware)``): a kernel that runs
  ``q_stage`` tiles per CTA (FA4 on B200: two, 256 rows) launches the mask's rows coarsened to units
  (``wavealign.sim.tiling``), and an order is a permutation of those units;
- the slots' K/V reads **interleave step by step** (slot order within a step) into an **LRU L2** of
  the hardware's capacity, counted in K/V blocks (one K tile + one V tile), split in two partitions on
  the GPUs that have them (``Hardware.l2_partitions``);
- **kernel time**: max(compute makespan, HBM bytes / bandwidth) plus the share of the shorter one the backend's
  pipeline leaves exposed (``ExecutionFacts.exposed_memory_fraction``; 0 is the roofline), with a per-block
  overhead inside the compute step.

>>> from wavealign import sim
>>> r = sim.simulate(mask, order=None, hardware="h100", backend="flex", head_dim=128)
>>> r.l2_hit_ratio, r.hbm_read_bytes, r.kernel_time_s

``python -m wavealign.sim`` simulates and times a synthetic 364K-token cell. ``python lab/validate_sim.py``
compares predictions with Nsight Compute; ``python lab/sim_paper.py`` with the paper's Table I and Fig. 11.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from wavealign import hardware as hardware_mod
from wavealign import kernels, metrics
from wavealign.blockmask import MaskLike, as_dense, check_int, check_seed
from wavealign.kernels import ExecutionFacts
from wavealign.sim.tiling import coarsen_rows

__all__ = ["ExecutionFacts", "HeadResult", "LaunchRows", "Prediction", "SimResult", "coarsen_rows", "execution_facts",
           "fit_row_jitter", "launch_rows", "order_limit", "predict", "simulate"]

# a kernel launch and its tail, outside the per-block roofline (typical CUDA launch latency)
LAUNCH_OVERHEAD_S = 5e-6
# the replay walks every slot each step: a GPU has a few hundred (an H200's wave is 132 CTAs); 2^20 is past any
MAX_WAVE_SLOTS = 2**20
# a stall of up to the row's own reads at one sigma: calibrated jitters are below 0.04 (fit_row_jitter's range),
# and every unit of it adds the rows' reads again to the steps the replay walks
MAX_ROW_JITTER = 1.0


@dataclass(frozen=True)
class LaunchRows:
    """A mask as a kernel whose query tile spans ``q_stage`` mask blocks launches it, on the host: ``mask`` bool
    (H, rows, NB), batches flattened into heads, and each launch row's K/V block count ``nnz`` int64 (H, rows).
    ``launch_rows`` makes it; passed in place of the mask, it spares several predictions of one mask (the order
    chooser's candidates) the device-to-host copy and the row sums each would repeat."""

    mask: np.ndarray
    nnz: np.ndarray
    q_stage: int


@dataclass(frozen=True)
class HeadResult:
    """One head's share of the reads (heads overlap in time at their boundaries; reads are attributed
    to the head whose row made them)."""

    head: int
    l2_lookups: int
    l2_hits: int
    hbm_read_bytes: int
    l2_hit_ratio: float


@dataclass(frozen=True)
class SimResult:
    """A simulated launch. Ratios in [0, 1]; bytes and seconds as named."""

    hardware: str
    backend: str
    wave_size: int
    scheduler: str  # kernels.SCHEDULERS
    q_rows: int  # query tokens of one launch row (FA4 on B200: 256, two 128-row mask blocks)
    l2_partitions: int
    l2_capacity_blocks: int
    kv_block_bytes: int
    l2_hit_ratio: float  # hit bytes / looked-up bytes over K/V and Q reads
    kv_hit_ratio: float  # K/V lookups only
    hbm_read_bytes: float
    hbm_write_bytes: float
    compute_time_s: float
    memory_time_s: float
    kernel_time_s: float
    makespan_steps: int
    per_head: tuple[HeadResult, ...]
    # (H, rows) by original launch row (the mask's query block, or its unit where q_rows spans several)
    row_start_step: np.ndarray  # the step its slot took it
    row_finish_step: np.ndarray
    row_slot: np.ndarray

    @property
    def l2_hit_pct(self) -> float:
        return 100.0 * self.l2_hit_ratio


def simulate(mask: MaskLike | LaunchRows, order=None, hardware: str | hardware_mod.Hardware = "h100",
             backend: str | ExecutionFacts = "flex", head_dim: int = 128, *, wave_size: int | None = None,
             block_size: int | None = None, l2_partitions: int | None = None, row_jitter: float = 0.0,
             seed: int = 0) -> SimResult:
    """Simulate one launch of ``backend`` on ``hardware`` over ``mask`` (H, MB, NB) bool (or
    (B, H, MB, NB), batches run one after another; or the kv-index form), rows in ``order.perm`` launch
    order (a ``launch_order.RowOrder``, an (H, rows) permutation tensor/array, or None for the identity).

    ``backend`` is a registered ``wavealign.kernels`` backend, whose execution facts on ``hardware``
    (``execution_facts``) are modelled on a GPU it runs on (a registered GPU it does not list is refused, as the
    sweep refuses the pair), or such facts themselves (a custom study, on any GPU). Where its query tile spans
    ``q_stage`` mask blocks (FA4 on b200: 2), the mask's rows are coarsened to those units (``coarsen_rows``) and
    ``order`` must be a permutation of the units (H, ceil(MB / q_stage)): plan it on the coarsened mask.
    ``wave_size`` (SM slots) defaults to the backend's wave on ``hardware`` (required for bare facts). ``block_size``
    (tokens per mask block) defaults to the backend's tile size. ``row_jitter`` stretches each row by
    ``round(NNZ * row_jitter * |z|)`` stall steps after its reads, z ~ N(0, 1) seeded by ``seed``: the timing noise
    (memory stalls, clocks) that lets equal-NNZ rows drift apart over many waves on a real GPU. 0 is perfect
    lock-step; its value is a calibration knob for NCU data.

    Assumptions and approximations:

    - every slot processes one K/V block per step; a row's Q load and epilogue take no steps (they are
      one tile against NNZ tiles); within a step slots read in slot order; when several slots free at
      once the lowest slot takes the next row (the hardware's CTA dispatch order is unspecified);
    - the L2 is fully associative LRU over whole K/V blocks (K and V tiles together, sectors ignored),
      holding only K/V: Q reads (once per row) are counted as misses and HBM bytes but not cached, O
      writes are counted as HBM write bytes only;
    - ``l2_partitions=2`` models Hopper/Ampere's split L2 (whitepapers: "each L2 partition localizes and
      caches data for memory accesses from SMs in the GPCs directly connected to the partition"): each
      partition is an LRU of half the capacity serving alternate slots; a near miss looks up the block's
      home partition (address-interleaved) before HBM, both lookups count, and the near copy is kept.
      ``l2_partitions=None`` takes the GPU's count (``Hardware.l2_partitions``); 1 is a unified LRU;
    - compute step = 4·q_rows·block_n·head_dim flops at ``mma_efficiency`` of the per-CTA share of the
      bf16 peak, plus ``block_overhead_s``; memory time = (HBM reads + O writes) / bandwidth; kernel
      time = max(compute makespan, memory time) + ``exposed_memory_fraction`` x the smaller of the two + a launch
      overhead. A memory-bound launch would in reality stretch the steps; the access order, hence the hit counts,
      is assumed unchanged.
    """
    hw, backend_name, ex, wave, l2_partitions = _resolve(hardware, backend, wave_size, block_size, l2_partitions)
    head_dim = _check_head_dim(head_dim, hw, ex)
    seed = check_seed("seed", seed)
    if not 0.0 <= row_jitter <= MAX_ROW_JITTER:
        raise ValueError(f"row_jitter must be >= 0 and <= {MAX_ROW_JITTER}, got {row_jitter}")
    launched = _launch_rows(mask, ex.q_stage)
    heads, rows, _ = launched.mask.shape
    perm = _launch_order(order, heads, rows, ex.q_stage)

    kv_bytes = ex.kv_block_bytes(head_dim)
    q_bytes = ex.q_block_bytes(head_dim)
    capacity = hw.l2_bytes // kv_bytes
    extra = None
    if row_jitter > 0.0:
        z = np.abs(np.random.default_rng(seed).standard_normal((heads, rows)))
        extra = np.rint(launched.nnz * row_jitter * z).astype(np.int64)
    trace = _engine().replay(launched.mask, perm, slots=wave, capacity_blocks=capacity,
                             reverse=ex.kv_walk == "reverse", parallel_heads=ex.head_order == "parallel",
                             partitions=l2_partitions, row_extra_steps=extra,
                             static=ex.scheduler == "static-persistent", row_nnz=launched.nnz)

    q_reads = heads * rows
    lookup_bytes = float(trace.lookups.sum()) * kv_bytes + q_reads * q_bytes
    hit_bytes = float(trace.hits.sum()) * kv_bytes
    hbm_read = float(trace.hbm_blocks.sum()) * kv_bytes + q_reads * q_bytes
    hbm_write = float(q_reads * q_bytes)  # O has Q's shape
    compute_s, memory_s, kernel_s = _kernel_time(hw, ex, wave, head_dim, trace.makespan_steps, hbm_read + hbm_write)
    per_head = tuple(
        HeadResult(head=h, l2_lookups=int(trace.lookups[h]), l2_hits=int(trace.hits[h]),
                   hbm_read_bytes=int(trace.hbm_blocks[h]) * kv_bytes + rows * q_bytes,
                   l2_hit_ratio=_ratio(trace.hits[h] * kv_bytes, trace.lookups[h] * kv_bytes + rows * q_bytes))
        for h in range(heads))
    return SimResult(
        hardware=hw.name, backend=backend_name, wave_size=wave, scheduler=ex.scheduler, q_rows=ex.q_rows,
        l2_partitions=l2_partitions, l2_capacity_blocks=capacity, kv_block_bytes=kv_bytes,
        l2_hit_ratio=_ratio(hit_bytes, lookup_bytes),
        kv_hit_ratio=_ratio(float(trace.hits.sum()), float(trace.lookups.sum())),
        hbm_read_bytes=hbm_read, hbm_write_bytes=hbm_write, compute_time_s=compute_s,
        memory_time_s=memory_s, kernel_time_s=kernel_s,
        makespan_steps=trace.makespan_steps, per_head=per_head, row_start_step=trace.row_start_step,
        row_finish_step=trace.row_finish_step, row_slot=trace.row_slot)


@dataclass(frozen=True)
class Prediction:
    """A launch's kernel time as the simulator's time model gives it from a makespan and HBM bytes: ``predict``'s
    (one order of a mask) or ``order_limit``'s (the bound no exact order passes)."""

    kernel_time_s: float
    compute_time_s: float
    memory_time_s: float
    makespan_steps: int
    hbm_read_bytes: float
    l2_hit_ratio: float  # of the heads replayed (``heads_replayed``); the bound's: what reading each block once gives
    heads_replayed: int


def predict(mask: MaskLike | LaunchRows, order=None, hardware: str | hardware_mod.Hardware = "h100",
            backend: str | ExecutionFacts = "flex", head_dim: int = 128, *, sample_heads: int | None = None,
            wave_size: int | None = None, block_size: int | None = None,
            l2_partitions: int | None = None) -> Prediction:
    """``simulate``'s kernel time of ``mask`` in ``order``, cheaper: the makespan from the whole launch's schedule
    (``engine.makespan``: every head, no L2, exact since a step costs the same hit or miss), the HBM bytes from the
    L2 replay of ``sample_heads`` heads spread evenly over the launch (None: all of them, which is ``simulate``
    without jitter) scaled to every head. A sampled head is replayed with the whole L2 and wave, as its neighbours in
    the launch would have it; what is lost is the traffic where two heads' rows overlap in time."""
    hw, _, ex, wave, l2_partitions = _resolve(hardware, backend, wave_size, block_size, l2_partitions)
    head_dim = _check_head_dim(head_dim, hw, ex)
    launched = _launch_rows(mask, ex.q_stage)
    heads, rows, _ = launched.mask.shape
    perm = _launch_order(order, heads, rows, ex.q_stage)
    engine = _engine()
    launch_head, launch_row = engine.launch_queue(perm, parallel_heads=ex.head_order == "parallel")
    steps = engine.makespan(launched.nnz[launch_head, launch_row], slots=wave,
                            static=ex.scheduler == "static-persistent")
    sample = (np.arange(heads) if sample_heads is None or sample_heads >= heads
              else np.unique(np.linspace(0, heads - 1, check_int("sample_heads", sample_heads, lo=1)).round()
                             .astype(np.int64)))
    kv_bytes, q_bytes = ex.kv_block_bytes(head_dim), ex.q_block_bytes(head_dim)
    trace = engine.replay(np.ascontiguousarray(launched.mask[sample]), np.ascontiguousarray(perm[sample]),
                          slots=wave, capacity_blocks=hw.l2_bytes // kv_bytes, reverse=ex.kv_walk == "reverse",
                          parallel_heads=ex.head_order == "parallel", partitions=l2_partitions,
                          static=ex.scheduler == "static-persistent", row_nnz=launched.nnz[sample])
    q_bytes_all = heads * rows * q_bytes  # Q read once per launch row, O written the same
    hbm_read = float(trace.hbm_blocks.sum()) * kv_bytes * heads / len(sample) + q_bytes_all
    compute_s, memory_s, kernel_s = _kernel_time(hw, ex, wave, head_dim, steps, hbm_read + q_bytes_all)
    sampled_lookups = float(trace.lookups.sum()) * kv_bytes + len(sample) * rows * q_bytes
    hit = _ratio(float(trace.hits.sum()) * kv_bytes, sampled_lookups)
    return Prediction(kernel_s, compute_s, memory_s, steps, hbm_read, hit, len(sample))


def order_limit(mask: MaskLike | LaunchRows, hardware: str | hardware_mod.Hardware = "h100",
                backend: str | ExecutionFacts = "flex", head_dim: int = 128, *, wave_size: int | None = None,
                block_size: int | None = None) -> Prediction:
    """A lower bound on the kernel time any exact launch order of ``mask`` reaches on ``hardware`` with ``backend``,
    in the simulator's fitted time model: perfect CTA balance (the makespan is the total work over the wave, or the
    longest launch row where that is longer) and every K/V block a head reads fetched from HBM once for that head.
    Where the kernel's query tile spans ``q_stage`` mask blocks, the work is counted as if each unit paired two
    identical blocks (the pairing of units is free, and no OR adds a block). An order's share of the headroom is
    ``metrics.headroom_captured``."""
    hw, _, ex, wave, _ = _resolve(hardware, backend, wave_size, block_size, None)
    head_dim = _check_head_dim(head_dim, hw, ex)
    launched = _launch_rows(mask, 1)
    dense, nnz = launched.mask, launched.nnz
    heads, mb, _ = dense.shape
    work = -(-int(nnz.sum()) // ex.q_stage)  # unit-steps: one unit's step serves q_stage blocks at once
    steps = max(-(-work // wave), int(nnz.max(initial=0)))  # no row is split: the longest holds its slot throughout
    kv_bytes = ex.kv_block_bytes(head_dim)
    q_bytes = heads * -(-mb // ex.q_stage) * ex.q_block_bytes(head_dim)  # read once per launch row; O the same
    fetched = float(dense.any(axis=1).sum()) * kv_bytes  # each K/V block a head reads, once
    compute_s, memory_s, kernel_s = _kernel_time(hw, ex, wave, head_dim, steps, fetched + 2 * q_bytes)
    lookups = work * kv_bytes + q_bytes
    return Prediction(kernel_s, compute_s, memory_s, steps, fetched + q_bytes,
                      _ratio(work * kv_bytes - fetched, lookups), heads)


def _resolve(hardware: str | hardware_mod.Hardware, backend: str | ExecutionFacts, wave_size: int | None,
             block_size: int | None, l2_partitions: int | None
             ) -> tuple[hardware_mod.Hardware, str, ExecutionFacts, int, int]:
    """The GPU, the backend's name, its execution facts there (at ``block_size``), its wave and the L2 partitions a
    simulation of ``backend`` on ``hardware`` models, each checked."""
    hw = hardware_mod.get(hardware)
    if l2_partitions is None:
        l2_partitions = hw.l2_partitions
    if isinstance(backend, ExecutionFacts):
        if wave_size is None:
            raise ValueError("a simulation needs wave_size when backend is given as ExecutionFacts")
        backend_name, ex = "custom", backend.with_block_size(block_size)
    else:
        spec = kernels.get(backend)
        backend_name, ex = spec.name, execution_facts(backend, hw).with_block_size(block_size)
        wave_size = spec.wave_size(hw) if wave_size is None else wave_size
    wave = check_int("wave_size", wave_size, lo=1, hi=MAX_WAVE_SLOTS)
    if l2_partitions not in (1, 2):
        raise ValueError(f"l2_partitions must be 1 or 2, got {l2_partitions}")
    return hw, backend_name, ex, wave, l2_partitions


def _check_head_dim(head_dim: int, hw: hardware_mod.Hardware, ex: ExecutionFacts) -> int:
    head_dim = check_int("head_dim", head_dim, lo=1)
    if ex.kv_block_bytes(head_dim) > hw.l2_bytes:
        raise ValueError(f"head_dim {head_dim}: one K/V block ({ex.kv_block_bytes(head_dim):,} bytes) is larger than "
                         f"the {hw.l2_bytes:,}-byte L2 of {hw.name}; expected a head dimension a GPU's L2 can cache")
    return head_dim


def launch_rows(mask: MaskLike, q_stage: int = 1) -> LaunchRows:
    """``mask`` as a kernel launches it whose query tile spans ``q_stage`` mask blocks (``LaunchRows``): on the host,
    batches flattened into heads, query blocks grouped ``q_stage`` at a time (``coarsen_rows``)."""
    dense = as_dense(mask)
    if dense.dim() == 4:
        dense = dense.reshape(-1, *dense.shape[-2:])
    host = coarsen_rows(dense, check_int("q_stage", q_stage, lo=1)).detach().to("cpu").contiguous().numpy()
    return LaunchRows(host, host.sum(axis=-1, dtype=np.int64), q_stage)


def _launch_rows(mask: MaskLike | LaunchRows, q_stage: int) -> LaunchRows:
    """``mask``'s launch rows for a kernel of ``q_stage``, made (``launch_rows``) or given: an order-limit bound is
    counted on the mask's own blocks (``q_stage`` 1), so given rows must be of the stage asked for."""
    if not isinstance(mask, LaunchRows):
        return launch_rows(mask, q_stage)
    if mask.q_stage != q_stage:
        raise ValueError(f"mask is sim.LaunchRows of q_stage {mask.q_stage}; this needs q_stage {q_stage}: pass "
                         f"sim.launch_rows(mask, {q_stage}) or the mask itself")
    return mask


def _kernel_time(hw: hardware_mod.Hardware, ex: ExecutionFacts, wave: int, head_dim: int, makespan_steps: int,
                 hbm_bytes: float) -> tuple[float, float, float]:
    """The time model (``simulate``'s docstring): compute = makespan x a step's MMAs at ``mma_efficiency`` of a
    CTA's share of the peak plus its overhead; memory = HBM bytes / bandwidth; kernel = the longer + the backend's
    exposed share of the shorter + a launch. Returns (compute, memory, kernel) seconds."""
    per_cta_flops = hw.peak_bf16_flops / wave * ex.mma_efficiency
    step_s = metrics.attention_flops(ex.q_rows, ex.block_n, head_dim, heads=1) / per_cta_flops + ex.block_overhead_s
    compute_s = makespan_steps * step_s
    memory_s = hbm_bytes / hw.hbm_bytes_per_s
    return compute_s, memory_s, (max(compute_s, memory_s) + ex.exposed_memory_fraction * min(compute_s, memory_s)
                                 + LAUNCH_OVERHEAD_S)


def _engine():
    """The numba replay (``wavealign.sim.engine``), imported when a simulation runs, not with the library."""
    try:
        from wavealign.sim import engine
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(f"wavealign.sim needs numba ({exc}): pip install 'wavealign[sim]'") from exc
    return engine


def execution_facts(backend: str, hardware: str | hardware_mod.Hardware) -> ExecutionFacts:
    """How the registered ``backend`` runs a block mask on ``hardware``, as the simulator models it: its facts on that
    GPU (``Backend.execution_on``). A registered GPU the backend does not run on is refused, as the sweep refuses
    the pair; a described GPU of one's own (not a registered id) is a custom study and takes the default facts."""
    spec = kernels.get(backend)
    hw = hardware_mod.get(hardware)
    if hw.name in hardware_mod.names() and not spec.supports(hw.name):
        raise ValueError(f"backend {spec.name!r} does not run on hardware {hw.name!r} (it runs on "
                         f"{list(spec.supported_hardware)}); pass its ExecutionFacts and a wave_size to "
                         "simulate it there anyway")
    facts = spec.execution_on(hw) if hw.name in hardware_mod.names() else spec.execution
    if facts is None:
        raise ValueError(f"backend {backend!r} declares no execution facts to simulate")
    return facts


def fit_row_jitter(mask: MaskLike, target_pct: float, *, hardware: str | hardware_mod.Hardware = "h100",
                   backend: str = "fa4", l2_partitions: int | None = None, steps: int = 5,
                   upper: float = 0.04) -> float:
    """The ``row_jitter`` in [0, ``upper``] at which the simulated L2 hit of ``mask`` (in the original order) meets a
    measured ``target_pct``, by ``steps`` bisections: the hit falls as the jitter grows. Fitted on a dense mask,
    whose equal rows stay in lock-step without it (sim_paper: 98% against the H100's measured 46.5%). A target the
    range cannot reach gives a jitter near its nearer end: simulate the result to see how close it came."""
    lo, hi = 0.0, upper
    for _ in range(check_int("steps", steps, lo=1)):
        mid = (lo + hi) / 2
        hit = simulate(mask, hardware=hardware, backend=backend, l2_partitions=l2_partitions,
                       row_jitter=mid).l2_hit_pct
        lo, hi = (mid, hi) if hit > target_pct else (lo, mid)
    return round((lo + hi) / 2, 5)


def _ratio(num: float, den: float) -> float:
    return float(num) / float(den) if den else 0.0


def _launch_order(order, heads: int, mb: int, q_stage: int = 1) -> np.ndarray:
    """``order.perm`` (or the identity) as int64 (H, MB) over the ``mb`` launch rows, checked to be a permutation per
    head; ``q_stage`` > 1 says the rows are units of that many mask blocks (named in the error)."""
    if order is None:
        return np.tile(np.arange(mb, dtype=np.int64), (heads, 1))
    perm = getattr(order, "perm", order)
    if isinstance(perm, torch.Tensor):
        perm = perm.detach().to("cpu").numpy()
    perm = np.asarray(perm)
    if perm.ndim == 3:
        perm = perm.reshape(-1, perm.shape[-1])
    if perm.shape != (heads, mb) or not np.issubdtype(perm.dtype, np.integer):
        units = (f" of the kernel's launch units ({q_stage} mask blocks each: plan the order on "
                 f"sim.coarsen_rows(mask, {q_stage}))") if q_stage > 1 else ""
        raise ValueError(f"order.perm must be an integer (H, MB) = ({heads}, {mb}) permutation{units}, got "
                         f"{perm.dtype} {perm.shape}")
    if not (np.sort(perm, axis=-1) == np.arange(mb)).all():
        raise ValueError("order.perm must hold a permutation of range(MB) in every head")
    return perm.astype(np.int64)
