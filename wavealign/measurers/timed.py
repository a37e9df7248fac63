"""``timed``: the launch timed where it runs (``wavealign.instruments.timing``): CUDA events with L2 flushed before
every launch on a GPU, the wall clock on a CPU. A group's cells are timed together once all are planned
(``timing.time_rounds``): by default paired, the original order and each variant launched alternately rep by rep,
so every speedup is a paired ratio (``wavealign.metrics``), repeated until each speedup's interval is within
``stable_pct`` or ``budget_s`` per cell is spent; ``paired: false`` times each cell in its own block of reps, as
before paired timing. The first call (compile/JIT plus one run) is timed apart as ``first_call_ms`` and counts as
the first warm-up. The GPU's clocks, power, temperature and throttle reasons are read before and after
(``wavealign.gpu_state``); rounds taken while it throttled are dropped and counted."""

from __future__ import annotations

import time

import torch

from wavealign import gpu_state, measurers
from wavealign.instruments import timing
from wavealign.masks import check_flag, check_number, optional
from wavealign.measurers import Measurement
from wavealign.records import CPU, MeasurerSpec

PARAMS = {"paired": True, "stable_pct": 0.5, "budget_s": 1.0}


def runs(spec: MeasurerSpec) -> int:
    """The launches measuring a cell makes at least (``calls``)."""
    return calls(spec.warmup, spec.reps)


def calls(warmup: int, reps: int) -> int:
    """How many times a timed cell calls its launch at least: the first call (timed apart: compile/JIT plus one full
    run) is its first warm-up, then ``warmup - 1`` more warm-ups and ``reps`` timed repetitions; with ``warmup=0``
    the first call still runs."""
    return max(warmup, 1) + reps


def measure(m: Measurement) -> None:
    """Plan the backend's launch (timed: ``launch_plan_ms``) and make its first call; the timed repetitions come
    with the group's other cells (``time_group``)."""
    result, device = m.result, m.device
    launch, result.launch_plan_ms = timing.time_plan(
        lambda: m.step.launch(m.prepared.mask, m.prepared.order, m.shape), device)
    q, k, v = m.qkv

    def call() -> torch.Tensor:
        return launch.run(q, k, v)

    result.first_call_ms = timing.time_first_call_ms(call, device)
    m.call = call


def time_group(group: list[Measurement]) -> None:
    """After a group's cells are planned: their launches timed together (``timing.time_rounds``), the baseline's
    pairs first in the stability rule; each cell's reps, median and IQR recorded, the GPU's state beside them."""
    pending = [m for m in group if m.call is not None]
    if not pending:
        return
    first = pending[0]
    params = measurers.get("timed").resolve(first.cell.measurer.measure_params)
    device = first.device
    baseline = next((i for i, m in enumerate(pending) if m.step.variant.is_baseline), None)
    before = gpu_state.read(device)
    start = time.perf_counter()
    rounds = timing.time_rounds(
        [m.call for m in pending], device=device, reps=max(m.cell.measurer.reps for m in pending),
        warmup=max(max(m.cell.measurer.warmup for m in pending) - 1, 0), paired=params["paired"], baseline=baseline,
        stable_pct=params["stable_pct"], budget_s=params["budget_s"],
        throttled=None if before is None else lambda: _throttled(device))
    after = gpu_state.read(device)
    share_s = (time.perf_counter() - start) / len(pending)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else CPU
    for m, samples in zip(pending, rounds.samples_ms, strict=True):
        result = m.result
        result.device, result.timer, result.paired = name, rounds.timer, rounds.paired
        measured = timing.summarize(samples)
        result.kernel_ms_median, result.kernel_ms_iqr = float(measured.median_ms), float(measured.iqr_ms)
        result.reps_done, result.kernel_ms_reps = measured.reps, [float(t) for t in samples]
        result.reps_throttled = rounds.throttled_rounds
        gpu_state.record(result, before, after)
        result.cell_wall_s += share_s  # its part of the rounds the group was timed in
        m.call = None


def _throttled(device: torch.device) -> bool:
    state = gpu_state.read(device)
    return state is not None and state.throttled


measurers.register(measurers.Measurer(
    name="timed", measure=measure, after_group=time_group, runs=runs,
    description="the launch timed where it runs: CUDA events (L2 flushed) on a GPU, the wall clock on a CPU; a "
                "group's cells paired rep by rep until each speedup is stable",
    params=PARAMS,
    checks={"paired": check_flag,
            "stable_pct": optional(lambda name, value: check_number(name, value, 0.0, 100.0, lo_open=True)),
            "budget_s": lambda name, value: check_number(name, value, 0.0, 3600.0)},
    types={"stable_pct": float | None}))
