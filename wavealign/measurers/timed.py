"""``timed``: the launch timed where it runs (``wavealign.instruments.timing``): on a GPU with CUDA events, L2 flushed
between repetitions; on a CPU with the wall clock, the group's cells in turns (``timing.time_in_turns``), so that a
load coming and going on the machine falls on the original order and its variants alike. The first call
(compile/JIT plus one run) is timed apart as ``first_call_ms`` and counts as the first warm-up. Median and IQR; the
launch's plan is timed beside it."""

from __future__ import annotations

import time

import torch

from wavealign import measurers
from wavealign.instruments import timing
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
    if device.type == "cuda":
        measured = timing.time_cuda(call, reps=cell.reps, warmup=max(cell.warmup - 1, 0))
        result.device, result.timer = torch.cuda.get_device_name(), "cuda_events"
        _record(result, measured)
    else:
        m.call = call  # timed with the group's other CPU cells, in turns: time_in_turns


def time_in_turns(group: list[Measurement]) -> None:
    """After a group: its cells on a CPU, timed in turns with the wall clock (their warm-ups, then their reps)."""
    pending = [m for m in group if m.call is not None]
    start = time.perf_counter()
    timings = timing.time_in_turns([m.call for m in pending], reps=[m.cell.reps for m in pending],
                                   warmup=[max(m.cell.warmup - 1, 0) for m in pending])
    share_s = (time.perf_counter() - start) / max(len(pending), 1)
    for m, measured in zip(pending, timings, strict=True):
        m.result.device, m.result.timer = CPU, "wall_clock"
        _record(m.result, measured)
        m.result.cell_wall_s += share_s  # its part of the rounds the group was timed in
        m.call = None


def _record(result, measured: timing.Timing) -> None:
    result.kernel_ms_median, result.kernel_ms_iqr = float(measured.median_ms), float(measured.iqr_ms)
    result.reps_done = measured.reps


measurers.register(measurers.Measurer(
    name="timed", measure=measure, after_group=time_in_turns,
    description="the launch timed where it runs: CUDA events (L2 flushed) on a GPU, the wall clock on a CPU (a "
                "group's cells in turns)"))
