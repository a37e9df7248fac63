"""``timed``: the launch timed where it runs (``wavealign.measure.timing``): on a GPU with CUDA events, L2 flushed
between repetitions; on a CPU with the wall clock. The first call (compile/JIT plus one run) is timed apart as
``first_call_ms`` and counts as the first warm-up. Median and IQR; the launch's plan is timed beside it."""

from __future__ import annotations

import torch

from wavealign import measurers
from wavealign.measure import timing
from wavealign.measurers import Measurement
from wavealign.records import CPU


def calls(warmup: int, reps: int) -> int:
    """How many times a timed cell calls its launch: the first call (timed apart: compile/JIT plus one full run)
    is its first warm-up, then ``warmup - 1`` more warm-ups and ``reps`` timed repetitions; with ``warmup=0`` the
    first call still runs."""
    return max(warmup, 1) + reps


def measure(m: Measurement) -> None:
    """Plan the backend's launch (timed: ``launch_plan_ms``), then time ``calls(warmup, reps)`` runs of it."""
    cell, result, device = m.cell, m.result, m.device
    launch, result.launch_plan_ms = timing.time_plan(
        lambda: m.step.launch(m.prepared.mask, m.prepared.order, m.shape), device)
    q, k, v = m.qkv

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


measurers.register(measurers.Measurer(
    name="timed", measure=measure,
    description="the launch timed where it runs: CUDA events (L2 flushed) on a GPU, the wall clock on a CPU"))
