"""One group of sweep cells, end to end, in one straight line:

    inputs (mask, Q/K/V: wavealign.inputs) -> per cell the attention step prepared on them (skip decision, launch
    order: wavealign.attention) -> its measurer (timed, simulated, ncu: wavealign.measurers) -> one CellResult

A worker calls ``run_group`` for cells sharing one mask (``group_id``): the inputs are built once and every variant is
measured back to back on the same device, so speedups are ratios from one run. Its ``InputCache`` keeps the inputs
for its next group on the same inputs and builds the next group's in the background (``then``). Every sweep cell
goes through here (``sweep``, and the sweeps ``bench-kernels`` and ``lab/bench_orchestration.py`` run), and so does
``lab/validate_sim.py``'s; the other studies and ``bench-reorder`` call their part directly (``lab/mask_fidelity.py``,
``lab/calibrate_workload.py`` and ``lab/bench_masks.py`` build a method's masks through ``masks.build_for_heads``, as
``wavealign.inputs`` builds a cell's). This module knows nothing of Ray, Hydra or MLflow; the records it returns are
``wavealign.records`` dataclasses.
"""

from __future__ import annotations

import math
import time
import traceback

import torch

from wavealign import environment, measurers, metrics, placement, skip, variants
from wavealign.attention import AttentionStep
from wavealign.inputs import QKV, InputCache, InputRequest, launch_shape
from wavealign.inputs import key as input_key
from wavealign.instruments import timing
from wavealign.measurers import Measurement
from wavealign.records import Cell, CellResult, Environment

# the skip features every result records, as SkipFeatures names them
FEATURE_FIELDS = ("num_q_blocks", "num_kv_blocks", "density", "nnz_mean", "nnz_cv", "adjacent_jaccard",
                  "wave_working_set_bytes", "working_set_over_l2")


def run_cell(cell: Cell) -> CellResult:
    """Run one cell; a failure becomes a ``failed`` result carrying the error and traceback."""
    return run_group([cell])[0]


def run_group(cells: list[Cell], then: list[Cell] | None = None, inputs: InputCache | None = None) -> list[CellResult]:
    """Run cells sharing one workload and mask (``group_id``), back to back on this worker's device.

    ``inputs`` is the worker's cache (a fresh one when not given: nothing is kept). ``then``, the group this worker
    runs next, has its inputs built in the background while these cells are measured; its prefetch starts only once
    this group holds its own inputs, so a prefetch can never replace the set this group was about to take."""
    if not cells:
        return []
    if len({c.group_id for c in cells}) != 1:
        raise ValueError(f"cells must share one group_id, got {sorted({c.group_id for c in cells})}")
    env = environment.capture()
    try:
        device, mask, qkv, features, mask_ms, prefetched = _group_inputs(
            cells[0], InputCache() if inputs is None else inputs, then)
    except Exception as exc:  # recorded here, so that the exception (and the frames it holds) dies with the block
        return [_failed(c, exc, env) for c in cells]
    results, measured = [], []
    for cell in cells:
        try:
            measured.append(_measure(cell, mask, features, qkv, device, mask_ms, env))
            results.append(measured[-1].result)
        except Exception as exc:
            results.append(_failed(cell, exc, env))
        results[-1].inputs_prefetched = prefetched
    for name in dict.fromkeys(c.measurer.measure for c in cells):  # each measurer's work on its cells, once
        after = measurers.get(name).after_group
        group = [m for m in measured if m.cell.measurer.measure == name]
        try:
            if after is not None:
                after(group)
        except Exception as exc:  # its cells fail with it; the other measurers' stand
            for m in group:
                index = next(i for i, r in enumerate(results) if r is m.result)
                results[index] = _failed(m.cell, exc, env)
                results[index].inputs_prefetched = prefetched
    _speedups(cells, results)
    _ranks(results, next((m.prepared.choice for m in measured if m.prepared.choice is not None), None))
    return results


def inputs_key(cell: Cell) -> str:
    """The identity of a cell's inputs before a worker builds them (``inputs.key`` in its worker pool): groups with
    equal keys run on the same mask and Q/K/V, which a worker keeps from one to the next."""
    return input_key(cell.inputs, cell.attention.geometry.block_size, measurers.get(cell.measurer.measure).needs_qkv,
                     placement.pool(cell))


def input_request(cell: Cell) -> InputRequest:
    """The inputs a cell's group needs on this worker: its spec's mask on its device, with Q/K/V if its measurer
    runs the kernel."""
    return InputRequest(cell.inputs, cell.attention.geometry.block_size, placement.device(cell),
                        with_qkv=measurers.get(cell.measurer.measure).needs_qkv)


def _group_inputs(cell: Cell, inputs: InputCache, then: list[Cell] | None):
    """The group's device, mask, Q/K/V and skip features, the ms they took (the mask's cost, shared by the group)
    and whether a prefetch built them; ``then``'s prefetch starts once they are taken (or failed to be)."""
    try:
        request = input_request(cell)
        mask, qkv, build_ms, prefetched = inputs.take(request)
    finally:
        if then:
            _prefetch(inputs, then[0])
    start = time.perf_counter()
    features = AttentionStep.of(cell.attention, cell.inputs).features(mask, cell.inputs.head_dim)
    return request.device, mask, qkv, features, build_ms + (time.perf_counter() - start) * 1e3, prefetched


def _prefetch(inputs: InputCache, cell: Cell) -> None:
    """Start building ``cell``'s group's inputs in the background; a request that cannot be made (no device for it
    here) is left for that group's own ``take``, which fails its cells with the error."""
    try:
        request = input_request(cell)
    except Exception:
        return
    inputs.prefetch(request, cell.group_id)


def _failed(cell: Cell, exc: BaseException, env: Environment) -> CellResult:
    return CellResult(cell_id=cell.cell_id, group_id=cell.group_id, status="failed",
                      error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(),
                      simulated=measurers.get(cell.measurer.measure).predicted, environment=env)


def _measure(cell: Cell, mask: torch.Tensor, features: skip.SkipFeatures, qkv: QKV | None, device: torch.device,
             mask_ms: float, env: Environment) -> Measurement:
    """One cell on the group's inputs: its step prepared (decision and order, the plan timed), then measured."""
    start = time.perf_counter()
    measurer = measurers.get(cell.measurer.measure)
    step = AttentionStep.of(cell.attention, cell.inputs)
    result = CellResult(cell_id=cell.cell_id, group_id=cell.group_id, status="done", simulated=measurer.predicted,
                        mask_ms=mask_ms, environment=env)
    for name in FEATURE_FIELDS:
        setattr(result, name, getattr(features, name))
    prepared = step.prepare(mask, features=features, timer=timing.time_plan, head_dim=cell.inputs.head_dim)
    decision = prepared.decision
    result.skip_reorder, result.skip_reason = decision.skip_reorder, decision.reason
    result.skip_predicted_gain_ms = decision.predicted_gain_ms
    result.stages_applied, result.reorder_applied = decision.stages, decision.reordered
    result.reorder_ms, result.reorder_cost = prepared.reorder_ms, "measured"
    result.order_candidate = prepared.candidate
    result.chooser_ms = prepared.choose_ms if prepared.choice is not None else math.nan
    result.reordered_wave_working_set_bytes = step.wave_working_set_bytes(prepared, features, cell.inputs.head_dim)
    shape = launch_shape(cell.inputs, cell.attention.geometry, qkv, device)
    measurement = Measurement(cell, step, prepared, qkv, shape, device, result)
    measurer.measure(measurement)
    result.cell_wall_s = time.perf_counter() - start
    return measurement


def _speedups(cells: list[Cell], results: list[CellResult]) -> None:
    """Each cell's total (reorder + kernel) ms, and its kernel and net (reorder counted) speedups against the group's
    original variant, measured beside it, with their intervals and verdicts (``wavealign.metrics``): paired ratios
    of the reps where the group was timed in rounds, else the two samples compared apart; a prediction's point
    alone."""
    for r in results:
        if r.status == "done":
            r.total_ms = r.reorder_ms + r.kernel_ms_median
    baseline = next((r for c, r in zip(cells, results, strict=True) if variants.of_spec(c.attention).is_baseline
                     and r.status == "done" and r.kernel_ms_median > 0), None)
    if baseline is None:
        return
    for r in results:
        if r.status != "done" or not r.kernel_ms_median > 0:
            continue
        r.speedup_vs_original = metrics.speedup(baseline.kernel_ms_median, r.kernel_ms_median)
        r.net_speedup_vs_original = metrics.speedup(baseline.kernel_ms_median, r.total_ms)
        if r is baseline:
            continue
        r.verdict_tolerance = metrics.TOLERANCE
        kernel, net = _intervals(baseline, r)
        if kernel is not None:
            r.speedup_vs_original, r.speedup_ci_low, r.speedup_ci_high = kernel.point, kernel.low, kernel.high
            r.net_speedup_vs_original, r.net_speedup_ci_low, r.net_speedup_ci_high = net.point, net.low, net.high
            r.speedup_outliers = kernel.outliers
        # a prediction is judged on its point; a measurement only on its interval (none from one rep)
        point, net_point = ((r.speedup_vs_original, r.net_speedup_vs_original) if r.simulated
                            else (math.nan, math.nan))
        # reps spread beyond metrics.SPREAD_LIMIT_PCT (a loaded CPU) give no verdict, whatever the interval says
        spreads = (metrics.spread_pct(baseline.kernel_ms_reps), metrics.spread_pct(r.kernel_ms_reps))
        r.verdict = metrics.verdict(r.speedup_ci_low, r.speedup_ci_high, point=point, spreads_pct=spreads)
        r.net_verdict = metrics.verdict(r.net_speedup_ci_low, r.net_speedup_ci_high, point=net_point,
                                        spreads_pct=spreads)


def _ranks(results: list[CellResult], choice) -> None:
    """Each done row's rank in its group by measured net time (1: fastest); where the group holds a chooser's answer
    (``choice``, an auto cell's), each row's predicted kernel time and rank, the order limit and the headroom its
    order took (``metrics.headroom_captured``, its measured speedup against the limit's predicted one)."""
    done = sorted((r for r in results if r.status == "done" and r.total_ms > 0), key=lambda r: r.total_ms)
    for rank, r in enumerate(done, start=1):
        r.measured_rank = rank
    if choice is None:
        return
    limit_speedup = choice.predicted_kernel_ms("original") / choice.limit_ms
    for r in done:
        r.predicted_kernel_ms = choice.predicted_kernel_ms(r.order_candidate)
        r.predicted_rank = choice.predicted_rank(r.order_candidate)
        r.order_limit_ms = choice.limit_ms
        r.headroom_captured = metrics.headroom_captured(r.speedup_vs_original, limit_speedup)


def _intervals(baseline: CellResult, r: CellResult) -> tuple[metrics.Ratio, metrics.Ratio] | tuple[None, None]:
    """The kernel and net speedups of ``r`` over ``baseline`` from their reps: paired when both were timed in the
    same rounds, else as two samples (``None`` for a prediction, or reps not recorded)."""
    if r.simulated or not r.kernel_ms_reps or not baseline.kernel_ms_reps:
        return None, None
    reorder_ms = r.reorder_ms if r.reorder_ms == r.reorder_ms else 0.0
    if r.paired and baseline.paired and len(r.kernel_ms_reps) == len(baseline.kernel_ms_reps):
        return (metrics.paired_ratio(baseline.kernel_ms_reps, r.kernel_ms_reps),
                metrics.paired_ratio(baseline.kernel_ms_reps, r.kernel_ms_reps, extra_ms=reorder_ms))
    return (metrics.independent_ratio(baseline.kernel_ms_reps, r.kernel_ms_reps),
            metrics.independent_ratio(baseline.kernel_ms_reps, [t + reorder_ms for t in r.kernel_ms_reps]))
