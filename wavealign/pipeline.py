"""One sweep cell, end to end: workload and mask -> skip decision -> reorder plan -> backend -> figures.

A worker calls ``run_cell`` (or ``run_group`` for cells sharing one mask, so the mask is built once and
every variant of a group is timed back to back on the same device). Cells and results are plain
dataclasses: this module knows nothing of Ray, Hydra or MLflow.
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from wavealign import blockmask, reorder

# Mask sources that need no Q/K: seeded block masks from ``wavealign.synthetic``, for cells (e.g. large
# simulated ones on CPU) where running a real method on real-sized Q/K would cost minutes.
# Their parameters and defaults (a cell's method_params override them); "synthetic-random" is iid Bernoulli.
SYNTHETIC_METHODS: dict[str, dict[str, Any]] = {
    "synthetic-planted": {"density": 0.25, "prototypes": 8, "noise": 0.02, "shuffle": True},
    "synthetic-random": {"density": 0.25},
    "synthetic-random-fixed-nnz": {"density": 0.25, "nnz_spread": 0.0},
}
CPU = "cpu"  # the placement of cells that run on a worker's CPU instead of a GPU of a given type
SIM_BACKEND = "sim"
ORIGINAL_VARIANT = "original"


@dataclass
class Cell:
    """One point of a sweep grid, fully resolved (no defaults left to a worker)."""

    cell_id: str
    group_id: str  # cells sharing workload, mask, hardware and backend: timed back to back
    hardware: str  # GPU type the cell runs on (or is simulated for); "cpu" = any worker's CPU
    profile_hardware: str  # GPU description for wave size and skip features (= hardware unless cpu)
    backend: str
    method: str
    variant: str
    stages: str  # reorder.STAGES
    skip_mode: str  # "force": apply ``stages``; "policy": the skip policy may fall back to "none"
    workload: str
    seq_len_tokens: int
    num_heads: int
    head_dim: int
    block_size: int
    wave_size: int
    seed: int = 0
    model: str | None = None  # a wavealign.workloads preset; None = a bare (seq_len, heads) shape
    resolution: str | None = None
    frames: int | None = None
    heads: list[int] = field(default_factory=list)  # preset head indices
    layer: int = 0
    step: int = 0  # the generator's denoising step (attention sharpens as the video forms)
    method_params: dict[str, Any] = field(default_factory=dict)
    backend_params: dict[str, Any] = field(default_factory=dict)
    reps: int = 5
    warmup: int = 1
    ncu: bool = False  # also profile one launch under Nsight Compute (GPU cells)

    @property
    def simulated(self) -> bool:
        return self.backend == SIM_BACKEND


@dataclass
class CellResult:
    """Every figure of one cell. Times in ms, sizes in bytes, ratios in percent where named ``_pct``."""

    cell_id: str
    group_id: str
    status: str  # "done" or "failed"
    error: str | None = None
    traceback: str | None = None
    simulated: bool = False
    device: str | None = None  # where the cell ran: "cpu" or a CUDA device name
    timer: str | None = None  # "cuda_events", "wall_clock" (CPU cells: perf_counter) or "simulated"
    reps: int = 0
    kernel_ms_median: float = math.nan
    kernel_ms_iqr: float = math.nan
    first_call_ms: float = math.nan  # GPU: the first call's wall time (compile/JIT + one run), kept apart
    reorder_ms: float = math.nan  # reorder.plan cost (0 when no reorder was applied)
    total_ms: float = math.nan  # reorder + kernel
    speedup_vs_original: float = math.nan  # the group's original-variant kernel time / this one's
    stages_applied: str | None = None
    reorder_applied: bool | None = None
    # mask statistics and skip features (wavealign.skip.SkipFeatures), original order
    num_q_blocks: int | None = None
    num_kv_blocks: int | None = None
    density: float = math.nan
    nnz_mean: float = math.nan
    nnz_cv: float = math.nan
    adjacent_jaccard: float = math.nan
    wave_working_set_bytes: float = math.nan
    working_set_over_l2: float = math.nan
    reordered_wave_working_set_bytes: float = math.nan  # the same figure in the applied launch order
    skip_reorder: bool | None = None
    skip_reason: str | None = None
    skip_predicted_gain_ms: float = math.nan
    # simulator figures (backend=sim)
    l2_hit_pct: float = math.nan
    hbm_read_bytes: float = math.nan
    # Nsight Compute, when the cell asks (ncu=True): time, hit rate and throughputs of the attention kernel (every
    # launch of the longest kernel's name, ratios duration-weighted); DRAM bytes summed over every kernel of the
    # call (gather/scatter too)
    ncu_l2_hit_pct: float = math.nan
    ncu_dram_read_bytes: float = math.nan
    ncu_dram_write_bytes: float = math.nan
    ncu_dram_throughput_pct: float = math.nan
    ncu_sm_throughput_pct: float = math.nan
    ncu_kernel_ms: float = math.nan
    ncu_kernels: int | None = None
    ncu_unavailable: str | None = None  # why there are no counters, when asked for and none were read
    mask_ms: float = math.nan  # building workload + mask, shared by the group
    cell_wall_s: float = math.nan  # the cell's own work on the worker
    environment: dict[str, str | None] = field(default_factory=dict)


def run_cell(cell: Cell) -> CellResult:
    """Run one cell; a failure becomes a ``failed`` result carrying the error and traceback."""
    return run_group([cell])[0]


def run_group(cells: list[Cell]) -> list[CellResult]:
    """Run cells sharing one workload and mask (``group_id``), back to back on this worker's device."""
    if not cells:
        return []
    if len({c.group_id for c in cells}) != 1:
        raise ValueError(f"cells must share one group_id, got {sorted({c.group_id for c in cells})}")
    env = environment()
    first = cells[0]
    start = time.perf_counter()
    try:
        device = _device_for(first)
        mask, qkv = build_mask(first, device)
    except Exception as exc:
        return [_failed(c, exc, env) for c in cells]
    mask_ms = (time.perf_counter() - start) * 1e3
    results = []
    for cell in cells:
        try:
            results.append(_run_on_mask(cell, mask, qkv, device, mask_ms, env))
        except Exception as exc:
            results.append(_failed(cell, exc, env))
    baseline = {r.cell_id: r for r in results}
    originals = [baseline[c.cell_id] for c in cells
                 if c.variant == ORIGINAL_VARIANT and baseline[c.cell_id].status == "done"]
    if originals:
        reference_ms = originals[0].kernel_ms_median
        for r in results:
            if r.status == "done" and r.kernel_ms_median > 0:
                r.speedup_vs_original = reference_ms / r.kernel_ms_median
    return results


def _failed(cell: Cell, exc: BaseException, env: dict[str, str | None]) -> CellResult:
    return CellResult(cell_id=cell.cell_id, group_id=cell.group_id, status="failed",
                      error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(),
                      simulated=cell.simulated, environment=env)


def _device_for(cell: Cell) -> torch.device:
    """Simulated and ``cpu`` cells run on the CPU; others on this worker's CUDA device when there is one."""
    if cell.simulated or cell.hardware == CPU or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda")


def build_mask(cell: Cell, device: torch.device) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
    """The cell's (H, MB, NB) bool mask, and Q/K/V (B, H, N, D) when the backend computes attention."""
    needs_qkv = not cell.simulated
    mb = math.ceil(cell.seq_len_tokens / cell.block_size)
    if cell.method in SYNTHETIC_METHODS:
        from wavealign import synthetic

        make = {"synthetic-planted": synthetic.planted_mask, "synthetic-random": synthetic.random_mask,
                "synthetic-random-fixed-nnz": synthetic.fixed_nnz_mask}[cell.method]
        params = {**SYNTHETIC_METHODS[cell.method], **cell.method_params}
        mask = make(cell.num_heads, mb, mb, seed=cell.seed, device=device, **params)
        qkv = _random_qkv(cell, device) if needs_qkv else None
        return mask, qkv
    q, k, v = _workload_qkv(cell, device)
    from wavealign import masks

    mask = masks.build_for_heads(cell.method, q, k, v, cell.block_size, model=cell.model, layer=cell.layer,
                                 heads=list(cell.heads) or list(range(cell.num_heads)), **cell.method_params)
    mask = mask.reshape(-1, *mask.shape[-2:]).to(device)
    return mask, ((q, k, v) if needs_qkv else None)


def _workload_qkv(cell: Cell, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if cell.model is None:
        return _random_qkv(cell, device)
    from wavealign import workloads

    wl = workloads.preset(cell.model, frames=int(cell.frames), resolution=cell.resolution)
    return workloads.synthetic(wl, heads=list(cell.heads), layer=cell.layer, step=cell.step, seed=cell.seed,
                               device=device)


def _random_qkv(cell: Cell, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gaussian Q/K/V of the cell's shape: what a kernel computes on does not change its block schedule."""
    gen = torch.Generator().manual_seed(cell.seed)
    shape = (1, cell.num_heads, cell.seq_len_tokens, cell.head_dim)
    return tuple(torch.randn(shape, generator=gen).to(device) for _ in range(3))  # type: ignore[return-value]


def _run_on_mask(cell: Cell, mask: torch.Tensor, qkv, device: torch.device, mask_ms: float,
                 env: dict[str, str | None]) -> CellResult:
    start = time.perf_counter()
    result = CellResult(cell_id=cell.cell_id, group_id=cell.group_id, status="done", simulated=cell.simulated,
                        mask_ms=mask_ms, environment=env, reps=cell.reps)
    feats = _skip_features(cell, mask)
    if feats is not None:
        for name in ("num_q_blocks", "num_kv_blocks", "density", "nnz_mean", "nnz_cv", "adjacent_jaccard",
                     "wave_working_set_bytes", "working_set_over_l2"):
            setattr(result, name, getattr(feats, name))
    decision = _skip_decision(cell, feats)
    result.skip_reorder, result.skip_reason, result.skip_predicted_gain_ms = decision
    stages = cell.stages if (cell.skip_mode == "force" or decision[0]) else "none"
    result.stages_applied, result.reorder_applied = stages, stages != "none"

    if stages != "none":
        order, result.reorder_ms = _timed_plan(cell, mask, stages, device)
    else:
        order = reorder.RowOrder.identity(*mask.shape[:-1], device=mask.device, wave_size=cell.wave_size)
        result.reorder_ms = 0.0
    if stages != "none":
        result.reordered_wave_working_set_bytes = _working_set(cell, reorder.permute_mask(mask, order))
    else:
        result.reordered_wave_working_set_bytes = result.wave_working_set_bytes

    if cell.simulated:
        _simulate_into(result, cell, mask, order)
    else:
        _measure_into(result, cell, mask, order, qkv, device)
    result.total_ms = result.reorder_ms + result.kernel_ms_median
    result.cell_wall_s = time.perf_counter() - start
    return result


def _skip_features(cell: Cell, mask: torch.Tensor):
    from wavealign import skip

    return skip.features(mask, cell.profile_hardware, block_size=cell.block_size, head_dim=cell.head_dim,
                         wave_size=cell.wave_size)


def _working_set(cell: Cell, mask: torch.Tensor) -> float:
    return _skip_features(cell, mask).wave_working_set_bytes


def _skip_decision(cell: Cell, feats) -> tuple[bool, str, float]:
    """The policy's verdict, recorded for every cell; only ``skip_mode="policy"`` cells obey it."""
    from wavealign import skip

    try:
        profile = skip.load_profile(cell.profile_hardware)
    except ValueError as exc:
        return True, f"reorder: no skip profile ({exc})", math.nan
    decision = skip.SkipPolicy(profile).decide(feats)
    return bool(decision.reorder), decision.reason, float(decision.predicted_gain_ms)


# plans timed after one warm-up plan (which holds any JIT compile), median of this many
PLAN_REPS = 3


def _timed_plan(cell: Cell, mask: torch.Tensor, stages: str, device: torch.device) -> tuple[reorder.RowOrder, float]:
    """The cell's reorder plan and its cost in ms: median of ``PLAN_REPS`` plans after a warm-up one."""
    def plan() -> reorder.RowOrder:
        return reorder.plan(mask, wave_size=cell.wave_size, stages=stages, seed=cell.seed)

    order = plan()
    times = []
    for _ in range(PLAN_REPS):
        start = _sync_time(device)
        plan()
        times.append((_sync_time(device) - start) * 1e3)
    return order, statistics.median(times)


def _sync_time(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _simulate_into(result: CellResult, cell: Cell, mask: torch.Tensor, order: reorder.RowOrder) -> None:
    from wavealign import sim

    params = dict(cell.backend_params)
    kernel = params.pop("kernel", "flex")
    r = sim.simulate(mask, order, hardware=cell.profile_hardware, backend=kernel, head_dim=cell.head_dim,
                     block_size=cell.block_size, **params)
    result.device, result.timer, result.reps = CPU, "simulated", 1
    result.kernel_ms_median, result.kernel_ms_iqr = r.kernel_time_s * 1e3, 0.0
    result.l2_hit_pct, result.hbm_read_bytes = 100.0 * r.l2_hit_ratio, float(r.hbm_read_bytes)


def _measure_into(result: CellResult, cell: Cell, mask: torch.Tensor, order: reorder.RowOrder, qkv,
                  device: torch.device) -> None:
    from wavealign import kernels

    backend = kernels.get(cell.backend)
    # GPU kernels run in bf16, the paper's dtype; the CPU reference keeps the generator's float32
    q, k, v = (t.to(torch.bfloat16) for t in qkv) if device.type == "cuda" else qkv
    ordered = None if order.stages == "none" else order
    # the kernels' own mask form, built once: converting inside call() would time a sort of the mask
    kv_mask = blockmask.to_kv_indices(mask)

    def call() -> torch.Tensor:
        return backend(q, k, v, kv_mask, order=ordered, block_size=cell.block_size, **cell.backend_params)

    if device.type == "cuda":
        _cuda_time_into(result, cell, call)
        if cell.ncu:
            _ncu_into(result, cell)
        return
    if cell.ncu:
        result.ncu_unavailable = "Nsight Compute profiles GPU cells; this cell ran on the CPU"
    # CPU: a wall-clock median; there is no cache to flush that the result could be compared on
    result.device, result.timer = CPU, "wall_clock"
    times_ms = _wall_clock_ms(call, cell.reps, cell.warmup)
    result.kernel_ms_median, result.kernel_ms_iqr = _median_iqr(times_ms)


def _wall_clock_ms(call: Callable[[], Any], reps: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        call()
    times = []
    for _ in range(max(1, reps)):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def _median_iqr(times_ms: list[float]) -> tuple[float, float]:
    if len(times_ms) < 2:
        return times_ms[0], 0.0
    q1, _, q3 = statistics.quantiles(times_ms, n=4, method="inclusive")
    return statistics.median(times_ms), q3 - q1


def _cuda_time_into(result: CellResult, cell: Cell, call: Callable[[], Any]) -> None:
    """Time on the GPU with ``wavealign.measure.timing``: the first call (compile/JIT) apart, then CUDA
    events after warm-up with L2 flushed between repetitions, median and IQR."""
    from wavealign.measure import timing

    result.first_call_ms = timing.time_first_call_ms(call)
    measured = timing.time_cuda(call, reps=cell.reps, warmup=cell.warmup)
    result.device, result.timer = torch.cuda.get_device_name(), "cuda_events"
    result.kernel_ms_median, result.kernel_ms_iqr = float(measured.median_ms), float(measured.iqr_ms)


def _ncu_into(result: CellResult, cell: Cell) -> None:
    """Profile one launch of the cell in a child process under ``ncu`` (``wavealign.measure.ncu``)."""
    from wavealign.measure import ncu

    child = replace(cell, stages=result.stages_applied, skip_mode="force", ncu=False)
    with tempfile.TemporaryDirectory(prefix="wavealign-ncu-") as tmp:
        spec = Path(tmp) / "cell.json"
        spec.write_text(json.dumps(asdict(child)))
        records, _ = ncu.collect([sys.executable, "-m", "wavealign.pipeline", "--ncu-child", str(spec)],
                                 Path(tmp) / "cell")
    if isinstance(records, ncu.NcuUnavailable):
        result.ncu_unavailable = records.reason
        return
    summary = ncu.summarize(records)
    result.ncu_kernel_ms, result.ncu_l2_hit_pct = summary.kernel_ms, summary.l2_hit_pct
    result.ncu_dram_throughput_pct, result.ncu_sm_throughput_pct = (summary.dram_throughput_pct,
                                                                    summary.sm_throughput_pct)
    result.ncu_dram_read_bytes, result.ncu_dram_write_bytes = summary.dram_read_bytes, summary.dram_write_bytes
    result.ncu_kernels = summary.kernels


def _ncu_child(spec_path: str) -> int:
    """Under ncu: build the cell's mask and order, warm up, then run one launch between profiler start/stop."""
    cell = Cell(**json.loads(Path(spec_path).read_text()))
    device = _device_for(cell)
    mask, qkv = build_mask(cell, device)
    order = (reorder.plan(mask, wave_size=cell.wave_size, stages=cell.stages, seed=cell.seed)
             if cell.stages != "none" else None)
    from wavealign import kernels
    from wavealign.measure import ncu

    backend = kernels.get(cell.backend)
    q, k, v = (t.to(torch.bfloat16) for t in qkv)
    kv_mask = blockmask.to_kv_indices(mask)
    ncu.profile_one_launch(functools.partial(backend, q, k, v, kv_mask, order=order, block_size=cell.block_size,
                                             **cell.backend_params))
    return 0


@functools.lru_cache(maxsize=1)
def environment() -> dict[str, str | None]:
    """What ran the cell: GPU, driver, CUDA, torch, triton, host, Python and the code's git sha."""
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    cuda = torch.cuda.is_available()
    import wavealign

    return {
        "gpu_name": torch.cuda.get_device_name() if cuda else None,
        "driver_version": _nvidia_driver() if cuda else None,
        "cuda_version": torch.version.cuda,
        "torch_version": torch.__version__,
        "triton_version": triton_version,
        "python_version": platform.python_version(),
        "host": socket.gethostname(),
        "git_sha": _git_sha(),
        "wavealign_version": wavealign.__version__,
    }


def _run_quiet(args: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def _nvidia_driver() -> str | None:
    return _run_quiet(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])


def _git_sha() -> str | None:
    """The checkout's HEAD (``WAVEALIGN_GIT_SHA`` wins, for copies without ``.git``)."""
    return os.environ.get("WAVEALIGN_GIT_SHA") or _run_quiet(["git", "rev-parse", "HEAD"],
                                                             cwd=Path(__file__).resolve().parent)


if __name__ == "__main__" and sys.argv[1:2] == ["--ncu-child"]:
    sys.exit(_ncu_child(sys.argv[2]))
