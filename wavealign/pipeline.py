"""One sweep cell, end to end, in one straight line:

    workload -> mask -> skip features (once) -> skip decision -> reorder.plan -> backend.plan
             -> time launch.run (or read the simulated launch) -> Nsight Compute (optional) -> one CellResult

A worker calls ``run_group`` for cells sharing one mask (``group_id``): the mask is built once and every
variant is timed back to back on the same device, so speedups are ratios from one run. A worker's next group on
the same inputs (another backend's; the dispatcher sends them one after another) reuses its mask and Q/K/V, and
``prefetch`` builds the inputs of the group it will run next in the background while this one is timed.
Every job that measures a cell (the sweep, ``bench-kernels``, ``validate-sim``) goes through here. This module
knows nothing of Ray, Hydra or MLflow; the records it returns are ``wavealign.records`` dataclasses.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch

from wavealign import environment, kernels, masks, reorder, reorderers, skip
from wavealign.kernels import Launch, LaunchShape
from wavealign.measure import timing
from wavealign.records import CPU, ORIGINAL_VARIANT, Cell, CellResult, Environment
from wavealign.skip import plan_cost

# reorder and launch plans are timed after one warm-up plan (which holds any JIT compile): the median of up to
# PLAN_REPS calls, fewer once PLAN_BUDGET_S is spent (a plan of seconds, e.g. a hypergraph partition, is timed once)
PLAN_REPS = 3
PLAN_BUDGET_S = 2.0
# what decides a group's mask and Q/K/V (with its placement and whether its backend computes attention)
INPUT_FIELDS = ("workload", "method", "method_params", "seed", "block_size", "seq_len_tokens", "num_heads",
                "head_dim", "model", "captured", "resolution", "frames", "heads", "layer", "step")
# the inputs of this process's latest group: {inputs_key: (mask, qkv, build ms, prefetched)}, one entry at most
_last_inputs: dict[str, tuple[torch.Tensor, Any, float, bool]] = {}


@dataclass
class _Prefetch:
    """One group's inputs being built (or built) in the background by ``prefetch``: its ``inputs`` (mask, qkv,
    build ms) or the ``error`` that stopped it, once ``done`` is set."""

    key: str
    done: threading.Event = field(default_factory=threading.Event)
    inputs: tuple[torch.Tensor, Any, float] | None = None
    error: BaseException | None = None


# what ``group_inputs`` and ``prefetch`` share between a worker's two threads (the timed group and the prefetch):
# the prefetched set not yet taken (one at most), the key a group is building now, and the prefetch CUDA streams
_inputs_lock = threading.Lock()
_prefetched: _Prefetch | None = None
_building: str | None = None
_streams: dict[torch.device, torch.cuda.Stream] = {}


def placement(cell: Cell) -> str:
    """Where a cell runs: ``cpu`` for CPU and simulated cells, else its GPU type."""
    return CPU if (cell.hardware == CPU or kernels.get(cell.backend).simulated) else cell.hardware


def device_for(cell: Cell) -> torch.device:
    """The torch device of the cell's placement: the worker's GPU, or its CPU for ``cpu`` cells and for a backend
    that needs no GPU on a worker without CUDA. A simulated cell builds its mask on a GPU when this process sees one
    (a sweep's CPU workers see none: Ray hides the GPUs from them), else on the CPU; it simulates on the CPU. A GPU
    backend on a worker without CUDA is an error."""
    if placement(cell) == CPU:
        simulated = kernels.get(cell.backend).simulated
        return torch.device("cuda" if simulated and torch.cuda.is_available() else "cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    if not kernels.get(cell.backend).needs_gpu:
        return torch.device("cpu")
    raise RuntimeError(f"cell {cell.cell_id} runs backend {cell.backend!r} on hardware {cell.hardware!r}, but this "
                       "worker has no CUDA GPU")


def run_cell(cell: Cell) -> CellResult:
    """Run one cell; a failure becomes a ``failed`` result carrying the error and traceback."""
    return run_group([cell])[0]


def run_group(cells: list[Cell], then: list[Cell] | None = None) -> list[CellResult]:
    """Run cells sharing one workload and mask (``group_id``), back to back on this worker's device.

    ``then``, the group this worker runs next, has its inputs built in the background (``prefetch``) while these
    cells are timed. Its prefetch starts only once this group holds its own inputs, so a prefetch can never
    replace the set this group was about to take."""
    if not cells:
        return []
    if len({c.group_id for c in cells}) != 1:
        raise ValueError(f"cells must share one group_id, got {sorted({c.group_id for c in cells})}")
    env = environment.capture()
    failed = None
    try:
        device = device_for(cells[0])
        mask, qkv, build_ms, prefetched = group_inputs(cells[0], device)
    except Exception as exc:  # recorded here, so that the exception (and the frames it holds) dies with the block
        failed = [_failed(c, exc, env) for c in cells]
    if then:
        prefetch(then)
    if failed:
        return failed
    try:
        start = time.perf_counter()
        feats = _features(cells[0], mask)
    except Exception as exc:
        return [_failed(c, exc, env) for c in cells]
    mask_ms = build_ms + (time.perf_counter() - start) * 1e3
    results = []
    for cell in cells:
        try:
            results.append(_run_on_mask(cell, mask, feats, qkv, mask_ms, env))
        except Exception as exc:
            results.append(_failed(cell, exc, env))
        results[-1].inputs_prefetched = prefetched
    _speedups(cells, results)
    profiled = [(c, r) for c, r in zip(cells, results, strict=True) if c.ncu and r.status == "done"]
    for _, r in profiled:
        if r.simulated:
            r.ncu_unavailable = "a simulated cell launches no kernel to profile"
    profiled = [(c, r) for c, r in profiled if not r.simulated]
    if profiled:
        _ncu_into(profiled, device)
    return results


def _failed(cell: Cell, exc: BaseException, env: Environment) -> CellResult:
    return CellResult(cell_id=cell.cell_id, group_id=cell.group_id, status="failed",
                      error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(),
                      simulated=kernels.get(cell.backend).simulated, environment=env)


# ---- workload and mask

def inputs_key(cell: Cell) -> str:
    """The identity of the inputs ``build_inputs`` makes for ``cell``: cells with equal keys get the same mask and
    Q/K/V (their backends, wave sizes, variants and repetitions may differ)."""
    return json.dumps({**{name: getattr(cell, name) for name in INPUT_FIELDS}, "placement": placement(cell),
                       "qkv": not kernels.get(cell.backend).simulated}, sort_keys=True, default=str)


def group_inputs(cell: Cell, device: torch.device) -> tuple[torch.Tensor, Any, float, bool]:
    """The group's mask, Q/K/V, the ms it took to build them (recorded as the mask's cost even when reused), and
    whether a prefetch built them: kept from this worker's previous group on the same inputs (with that group's
    flag), taken from ``prefetch`` (waiting for it if it is still building; its error, if it failed, is raised
    here, so the group fails as it would have building them itself), or built now.

    One set is kept at a time besides one prefetched set, and the kept one is dropped before the next is built or
    taken (a 364K x 40-head set is ~11 GB of GPU memory)."""
    global _prefetched, _building
    key = inputs_key(cell)
    with _inputs_lock:
        kept = _last_inputs.get(key)
        job = None
        if kept is None:
            _last_inputs.clear()
            job, _building = (_prefetched, key) if _prefetched is not None and _prefetched.key == key else (None, key)
            if job is not None:
                _prefetched = None
    if kept is not None:
        return kept
    try:
        if job is not None:
            job.done.wait()
            if job.error is not None:
                raise job.error
            mask, qkv, build_ms = job.inputs
            if device.type == "cuda":  # made on the prefetch stream, used and freed on this one
                for t in (mask, *(qkv or ())):
                    t.record_stream(torch.cuda.current_stream(device))
        else:
            start = time.perf_counter()
            mask, qkv = build_inputs(cell, device)
            build_ms = (time.perf_counter() - start) * 1e3
        with _inputs_lock:
            _last_inputs[key] = (mask, qkv, build_ms, job is not None)
    finally:
        with _inputs_lock:
            _building = None
    return mask, qkv, build_ms, job is not None


def prefetch(cells: list[Cell]) -> bool:
    """Start building the inputs of the group ``cells`` (``build_inputs``) in a background thread, on a CUDA stream
    of its own (the lowest priority) for a GPU cell, so that the group timed meanwhile keeps the default stream;
    ``group_inputs`` then takes them. Returns whether a build was started: not when this worker keeps or is
    building those inputs already. A prefetched set not taken yet is replaced (its build finishes first, so at most
    one prefetched set lives besides the kept one). Never raises: an error is raised by ``group_inputs``, where the
    group's cells are recorded failed with it."""
    global _prefetched
    try:
        key = inputs_key(cells[0])
    except Exception:  # group_inputs meets the same error when the group runs
        return False
    with _inputs_lock:
        if key in _last_inputs or key == _building or (_prefetched is not None and _prefetched.key == key):
            return False
        previous, _prefetched = _prefetched, _Prefetch(key)
        job = _prefetched
    threading.Thread(target=_build_ahead, args=(job, cells[0], previous), name=f"prefetch-{cells[0].group_id}",
                     daemon=True).start()
    return True


def _build_ahead(job: _Prefetch, cell: Cell, previous: _Prefetch | None) -> None:
    """``prefetch``'s thread: wait for the set it replaces to finish building (then drop it), build, and say done."""
    try:
        if previous is not None:
            previous.done.wait()
            previous.inputs = None
        device = device_for(cell)
        start = time.perf_counter()
        if device.type == "cuda":
            stream = _prefetch_stream(device)
            with torch.cuda.stream(stream):
                mask, qkv = build_inputs(cell, device)
            stream.synchronize()
        else:
            mask, qkv = build_inputs(cell, device)
        job.inputs = (mask, qkv, (time.perf_counter() - start) * 1e3)
    except BaseException as exc:  # kept for group_inputs to raise
        traceback.clear_frames(exc.__traceback__)  # its frames' locals (GPU tensors) go; their lines stay
        job.error = exc
    finally:
        job.done.set()


def _prefetch_stream(device: torch.device) -> torch.cuda.Stream:
    """This process's prefetch stream on ``device``, at CUDA's lowest priority (0; lower numbers run first)."""
    with _inputs_lock:
        if device not in _streams:
            _streams[device] = torch.cuda.Stream(device=device, priority=0)
        return _streams[device]


def forget_inputs() -> None:
    """Drop the kept and the prefetched inputs (waiting for a prefetch still building)."""
    global _prefetched
    with _inputs_lock:
        job, _prefetched = _prefetched, None
        _last_inputs.clear()
    if job is not None:
        job.done.wait()


def build_inputs(cell: Cell, device: torch.device) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
    """The cell's (H, MB, NB) bool mask, and Q/K/V (B, H, N, D) when the backend computes attention
    (bf16 on a GPU, the paper's dtype; float32 on the CPU)."""
    method = masks.get(cell.method)
    needs_qkv = not kernels.get(cell.backend).simulated
    if method.needs_qk:
        if cell.model is None:
            raise ValueError(f"method {cell.method!r} builds its mask from a model's Q/K; workload {cell.workload!r} "
                             "is a bare shape")
        q, k, v = _workload_qkv(cell, device)
        mask = masks.build_for_heads(cell.method, q, k, v, cell.block_size, model=cell.model, layer=cell.layer,
                                     heads=list(cell.heads) or list(range(cell.num_heads)), **cell.method_params)
        qkv = (q, k, v) if needs_qkv else None
    else:
        blocks = math.ceil(cell.seq_len_tokens / cell.block_size)
        mask = method.for_shape(cell.num_heads, blocks, blocks, device=device, **cell.method_params)
        qkv = _random_qkv(cell, device) if needs_qkv else None
    mask = mask.reshape(-1, *mask.shape[-2:]).to(device)
    if qkv is not None and device.type == "cuda":
        qkv = tuple(t.to(torch.bfloat16) for t in qkv)
    return mask, qkv


def _workload_qkv(cell: Cell, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The model's Q/K/V: read from the cell's captured file, or drawn by the synthetic generator."""
    from wavealign import workloads

    if cell.captured is not None:
        captured = workloads.load_captured(cell.captured, heads=list(cell.heads), device=device)
        return captured.q[:1], captured.k[:1], captured.v[:1]  # the first batch element (the conditional one)
    wl = workloads.preset(cell.model, frames=int(cell.frames), resolution=cell.resolution)
    return workloads.synthetic(wl, heads=list(cell.heads), layer=cell.layer, step=cell.step, seed=cell.seed,
                               device=device)


def _random_qkv(cell: Cell, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gaussian Q/K/V of the cell's shape: what a kernel computes on does not change its block schedule. Drawn on
    the cell's device, in the dtype it runs (bf16 on a GPU): at 364K tokens the three are 560M numbers, seconds of
    host time to draw and copy. A seed gives the same tensors on the same kind of device."""
    gen = torch.Generator(device=device).manual_seed(cell.seed)
    shape = (1, cell.num_heads, cell.seq_len_tokens, cell.head_dim)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return tuple(torch.randn(shape, generator=gen, device=device, dtype=dtype)  # type: ignore[return-value]
                 for _ in range(3))


def _features(cell: Cell, mask: torch.Tensor) -> skip.SkipFeatures:
    return skip.features(mask, cell.profile_hardware, block_size=cell.block_size, head_dim=cell.head_dim,
                         wave_size=cell.wave_size)


# ---- one cell on the group's mask

def _run_on_mask(cell: Cell, mask: torch.Tensor, feats: skip.SkipFeatures, qkv, mask_ms: float,
                 env: Environment) -> CellResult:
    start = time.perf_counter()
    backend = kernels.get(cell.backend)
    result = CellResult(cell_id=cell.cell_id, group_id=cell.group_id, status="done", simulated=backend.simulated,
                        mask_ms=mask_ms, environment=env)
    for name in ("num_q_blocks", "num_kv_blocks", "density", "nnz_mean", "nnz_cv", "adjacent_jaccard",
                 "wave_working_set_bytes", "working_set_over_l2"):
        setattr(result, name, getattr(feats, name))
    result.skip_reorder, result.skip_reason, result.skip_predicted_gain_ms = _skip_decision(cell, feats)
    stages = cell.stages if (cell.skip_mode == "force" or result.skip_reorder) else "none"
    result.stages_applied, result.reorder_applied = stages, stages != "none"

    device = mask.device
    order, result.reorder_ms = _plan_order(cell, mask, stages, device)
    result.reorder_cost = "measured"
    if backend.simulated and order is not None:
        _simulated_plan_cost(result, cell)
    result.reordered_wave_working_set_bytes = (
        result.wave_working_set_bytes if order is None
        else skip.wave_working_set_bytes(reorder.permute_mask(mask, order), cell.wave_size, cell.block_size,
                                         cell.head_dim))
    launch, result.launch_plan_ms = _plan_launch(cell, backend, mask, order, qkv, device)
    if backend.simulated:
        _simulated_into(result, launch)
    else:
        _timed_into(result, cell, launch, qkv, device)
    result.total_ms = result.reorder_ms + result.kernel_ms_median
    result.cell_wall_s = time.perf_counter() - start
    return result


def _skip_decision(cell: Cell, feats: skip.SkipFeatures) -> tuple[bool, str, float]:
    """The policy's verdict, recorded for every cell; only ``skip_mode="policy"`` cells obey it."""
    try:
        profile = skip.load_profile(cell.profile_hardware)
    except ValueError as exc:
        return True, f"reorder: no skip profile ({exc})", math.nan
    decision = skip.SkipPolicy(profile).decide(feats)
    return bool(decision.reorder), decision.reason, float(decision.predicted_gain_ms)


def _timed_plans(plan: Callable[[], Any], device: torch.device, warmup: bool = True) -> tuple[Any, float]:
    """``plan()``'s value and its cost in ms: the median of ``PLAN_REPS`` calls after a warm-up call (none when
    ``warmup`` is False), or of as many as ``PLAN_BUDGET_S`` allows (at least one)."""
    if warmup:
        plan()
    times: list[float] = []
    while len(times) < PLAN_REPS and sum(times) < PLAN_BUDGET_S * 1e3:
        start = timing.synced_clock(device)
        value = plan()
        times.append((timing.synced_clock(device) - start) * 1e3)
    return value, statistics.median(times)


def plan_order(cell: Cell, mask: torch.Tensor, stages: str) -> reorder.RowOrder:
    """The cell's launch order of ``mask`` for ``stages``: its reorderer, then Stage 2 where ``stages`` says."""
    return reorder.plan(mask, wave_size=cell.wave_size, stages=stages, seed=cell.seed, reorderer=cell.reorderer,
                        **cell.reorderer_params)


def _plan_order(cell: Cell, mask: torch.Tensor, stages: str,
                device: torch.device) -> tuple[reorder.RowOrder | None, float]:
    """The applied launch order (None: the original) and what planning it costs."""
    if stages == "none":
        return None, 0.0
    warmup = stages == "temporal" or reorderers.get(cell.reorderer).needs_warmup
    return _timed_plans(lambda: plan_order(cell, mask, stages), device, warmup=warmup)


def launch_shape(cell: Cell, qkv, device: torch.device) -> LaunchShape:
    """The shape a cell's launch is planned for, on the GPU it runs on or is simulated for."""
    dtype = qkv[0].dtype if qkv is not None else torch.bfloat16
    return LaunchShape(batch=1, heads=cell.num_heads, q_len=cell.seq_len_tokens, kv_len=cell.seq_len_tokens,
                       head_dim=cell.head_dim, block_size=cell.block_size, dtype=dtype, device=device,
                       hardware=cell.profile_hardware, wave_size=cell.wave_size)


def _plan_launch(cell: Cell, backend: kernels.Backend, mask: torch.Tensor, order: reorder.RowOrder | None, qkv,
                 device: torch.device) -> tuple[Launch, float]:
    """``backend.plan`` once per cell, timed; a simulated launch is planned (simulated) once, untimed."""
    shape = launch_shape(cell, qkv, device)

    def plan() -> Launch:
        return backend.plan(mask, order, shape, **cell.backend_params)

    if backend.simulated:
        return plan(), math.nan
    return _timed_plans(plan, device)


def _simulated_plan_cost(result: CellResult, cell: Cell) -> None:
    """A simulated cell's reorder cost is predicted for its GPU (``skip.plan_cost``); the host CPU's time is kept
    apart. Only WaveAlign's stages have a GPU model: another reorderer's cost there is unknown (NaN)."""
    result.host_reorder_ms = result.reorder_ms
    if cell.reorderer not in plan_cost.MODELLED_REORDERERS:
        result.reorder_ms, result.reorder_cost = math.nan, f"unknown: no GPU cost model for reorderer {cell.reorderer}"
        return
    blocks = math.ceil(cell.seq_len_tokens / cell.block_size)
    predicted = plan_cost.predicted_plan_ms(cell.num_heads, blocks, blocks, cell.profile_hardware)
    result.reorder_ms, result.reorder_cost = predicted.ms, predicted.source


def _simulated_into(result: CellResult, launch: Any) -> None:
    predicted = launch.result
    result.device, result.timer, result.reps_done = CPU, "simulated", 1
    result.kernel_ms_median, result.kernel_ms_iqr = predicted.kernel_time_s * 1e3, 0.0
    result.l2_hit_pct, result.hbm_read_bytes = predicted.l2_hit_pct, float(predicted.hbm_read_bytes)


def timed_calls(warmup: int, reps: int) -> int:
    """How many times a timed cell calls its launch: the first call (timed apart: compile/JIT plus one full run)
    is its first warm-up, then ``warmup - 1`` more warm-ups and ``reps`` timed repetitions; with ``warmup=0`` the
    first call still runs."""
    return max(warmup, 1) + reps


def _timed_into(result: CellResult, cell: Cell, launch: Launch, qkv, device: torch.device) -> None:
    """Time ``launch.run`` with ``wavealign.measure.timing``: the first call (compile/JIT plus one run) timed apart
    as ``first_call_ms`` and counted as the first warm-up, then the remaining warm-ups and the repetitions (in all
    ``timed_calls(cell.warmup, cell.reps)`` calls): on a GPU with CUDA events, L2 flushed between repetitions; on a
    CPU with the wall clock. Median and IQR."""
    q, k, v = qkv

    def call() -> torch.Tensor:
        return launch.run(q, k, v)

    result.first_call_ms = timing.time_first_call_ms(call, device)
    warmup = max(cell.warmup - 1, 0)
    if device.type == "cuda":
        measured = timing.time_cuda(call, reps=cell.reps, warmup=warmup)
        result.device, result.timer = torch.cuda.get_device_name(), "cuda_events"
    else:
        measured = timing.time_wall_clock(call, reps=cell.reps, warmup=warmup)
        result.device, result.timer = CPU, "wall_clock"
    result.kernel_ms_median, result.kernel_ms_iqr = float(measured.median_ms), float(measured.iqr_ms)
    result.reps_done = measured.reps


def _speedups(cells: list[Cell], results: list[CellResult]) -> None:
    """Kernel and net (reorder counted) speedups against the group's original variant, timed beside them."""
    originals = [r for c, r in zip(cells, results, strict=True)
                 if c.variant == ORIGINAL_VARIANT and r.status == "done"]
    if not originals:
        return
    reference_ms = originals[0].kernel_ms_median
    for r in results:
        if r.status == "done" and r.kernel_ms_median > 0:
            r.speedup_vs_original = reference_ms / r.kernel_ms_median
            r.net_speedup_vs_original = reference_ms / r.total_ms


# ---- Nsight Compute: one child process profiles the group's cells, one marked launch each

def _ncu_into(profiled: list[tuple[Cell, CellResult]], device: torch.device) -> None:
    """Profile one launch of each cell in a child process under ``ncu`` (``wavealign.measure.ncu``): the same
    mask, order and launch the timed run used, the range of each opened by a marker kernel."""
    from wavealign.measure import ncu

    if device.type != "cuda":
        for _, result in profiled:
            result.ncu_unavailable = "Nsight Compute profiles GPU cells; this cell ran on the CPU"
        return
    cells = [replace(c, stages=r.stages_applied, skip_mode="force", ncu=False) for c, r in profiled]
    with tempfile.TemporaryDirectory(prefix="wavealign-ncu-") as tmp:
        spec = Path(tmp) / "cells.json"
        spec.write_text(json.dumps({"cells": [asdict(c) for c in cells]}))
        records, _ = ncu.collect([sys.executable, "-m", "wavealign.pipeline", "--ncu-child", str(spec)],
                                 Path(tmp) / "cells", occupancy=True)
    if isinstance(records, ncu.NcuUnavailable):
        for _, result in profiled:
            result.ncu_unavailable = records.reason
        return
    per_cell = ncu.split_at_markers(records)
    if len(per_cell) != len(cells):
        for _, result in profiled:
            result.ncu_unavailable = f"ncu returned {len(per_cell)} marked launches for {len(cells)} cells"
        return
    for (cell, result), launches in zip(profiled, per_cell, strict=True):
        if not launches:
            result.ncu_unavailable = "ncu profiled no kernel of this cell's launch"
            continue
        summary = ncu.summarize(launches, kernel_pattern=kernels.get(cell.backend).ncu_kernels)
        result.ncu_kernel_ms, result.ncu_l2_hit_pct = summary.kernel_ms, summary.l2_hit_pct
        result.ncu_dram_throughput_pct, result.ncu_sm_throughput_pct = (summary.dram_throughput_pct,
                                                                        summary.sm_throughput_pct)
        result.ncu_dram_read_bytes, result.ncu_dram_write_bytes = summary.dram_read_bytes, summary.dram_write_bytes
        result.ncu_kernels, result.ncu_ctas_per_sm = summary.kernels, summary.ctas_per_sm
        result.ncu_registers_per_thread = summary.registers_per_thread


def _ncu_child(spec_path: str) -> int:
    """Under ncu: build the group's mask once; per cell plan its order and launch, warm up, then run one launch
    between profiler start/stop, opened by the marker kernel."""
    from wavealign.measure import ncu

    names = {f.name for f in fields(Cell)}
    listed = json.loads(Path(spec_path).read_text())["cells"]
    cells = [Cell(**{k: v for k, v in c.items() if k in names}) for c in listed]
    device = device_for(cells[0])
    mask, qkv = build_inputs(cells[0], device)
    for cell in cells:
        order = None if cell.stages == "none" else plan_order(cell, mask, cell.stages)
        launch = kernels.get(cell.backend).plan(mask, order, launch_shape(cell, qkv, device), **cell.backend_params)
        ncu.profile_one_launch(lambda launch=launch: launch.run(*qkv), marker=True)
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--ncu-child"]:
    sys.exit(_ncu_child(sys.argv[2]))
