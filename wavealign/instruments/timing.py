"""CUDA-event timing of one launch: warm-up first, L2 flushed between repetitions, median and IQR.

Compile/JIT time is measured on its own (the first call's wall time) and never mixed into kernel time. Every wait
here is for the calling thread's current stream only, not the whole device: a sweep worker may be building its next
group's inputs on another stream meanwhile (``inputs.InputCache.prefetch``), and the timed work must not wait for that.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TypeVar

import torch

# Over four times the H200's 60 MiB L2, so writing it evicts everything a previous repetition left there
FLUSH_BYTES = 256 << 20
# a sweep's reorder and launch plans are timed after one warm-up plan (which holds any JIT compile): the median of up
# to PLAN_REPS calls, fewer once PLAN_BUDGET_S is spent (a plan of seconds, e.g. a hypergraph partition, is timed once)
PLAN_REPS = 3
PLAN_BUDGET_S = 2.0
T = TypeVar("T")


def synced_clock(device: torch.device | str) -> float:
    """``time.perf_counter()`` once the work queued on ``device``'s current stream has finished (CUDA is
    asynchronous): two of these bracket host-side work such as planning a reorder or building a mask."""
    if torch.device(device).type == "cuda":
        torch.cuda.current_stream(device).synchronize()
    return time.perf_counter()


@dataclass(frozen=True)
class Timing:
    """Repetitions of one launch, in milliseconds of GPU time between two CUDA events."""

    median_ms: float
    p25_ms: float
    p75_ms: float
    min_ms: float
    reps: int

    @property
    def iqr_ms(self) -> float:
        return self.p75_ms - self.p25_ms

    def as_dict(self) -> dict[str, float]:
        return {**asdict(self), "iqr_ms": self.iqr_ms}


def summarize(samples_ms: list[float]) -> Timing:
    """Median, quartiles and minimum of repetition times (ms)."""
    if not samples_ms:
        raise ValueError("samples_ms must hold at least one time, got an empty list")
    if len(samples_ms) == 1:
        q1 = q3 = samples_ms[0]
    else:
        q1, _, q3 = statistics.quantiles(samples_ms, n=4, method="inclusive")
    return Timing(median_ms=statistics.median(samples_ms), p25_ms=q1, p75_ms=q3, min_ms=min(samples_ms),
                  reps=len(samples_ms))


class L2Flusher:
    """Overwrites a buffer larger than L2, so each repetition starts with a cold cache."""

    def __init__(self, device: torch.device | str = "cuda", nbytes: int = FLUSH_BYTES) -> None:
        self.buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


def time_cuda(fn: Callable[[], object], *, reps: int = 10, warmup: int = 2, flush_l2: bool = True) -> Timing:
    """Time ``fn`` with CUDA events after ``warmup`` calls; the L2 flush runs outside the events."""
    if reps < 1 or warmup < 0:
        raise ValueError(f"reps must be >= 1 and warmup >= 0, got reps={reps}, warmup={warmup}")
    for _ in range(warmup):
        fn()
    flush = L2Flusher() if flush_l2 else None
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    stream = torch.cuda.current_stream()
    stream.synchronize()
    for start, end in zip(starts, ends, strict=True):
        if flush is not None:
            flush()
        start.record()
        fn()
        end.record()
    stream.synchronize()
    return summarize([s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)])


# the most rounds a group is timed in, whatever its stability rule asks (config's MAX_REPS bounds the minimum)
MAX_ROUNDS = 100_000


@dataclass(frozen=True)
class Rounds:
    """Several launches timed together: each one's repetition times (ms) in the order taken, the rounds dropped
    because the GPU throttled while they ran, the timer and whether the launches alternated rep by rep."""

    samples_ms: list[list[float]]
    throttled_rounds: int
    timer: str
    paired: bool


def time_rounds(fns: list[Callable[[], object]], *, device: torch.device, reps: int, warmup: int, paired: bool = True,
                baseline: int | None = None, stable_pct: float | None = None, budget_s: float = math.inf,
                throttled: Callable[[], bool] | None = None) -> Rounds:
    """Time launches to be compared. ``paired``: in rounds, each round calling every one of ``fns`` once in turn
    (A B C, C B A, ...), so clock, thermal or load drift falls on all of them alike and rep i of each forms a pair
    (``metrics.paired_ratio``); otherwise each in its own block of reps (A A A B B B ...), as timed before paired
    timing. On a GPU every launch is timed with CUDA events after an L2 flush; on a CPU with the wall clock.

    After ``warmup`` rounds, at least ``reps`` rounds run; with ``stable_pct`` (paired, given a ``baseline`` index)
    rounds go on until every launch's paired speedup over the baseline has an interval narrower than +-stable_pct %
    or ``budget_s`` seconds per launch are spent. A round during which ``throttled()`` turned true (the GPU slowed
    for power or heat: ``wavealign.gpu_state``) is dropped and counted, at most ``reps`` of them (then kept: a GPU
    that always throttles still gets a time, and the count says so)."""
    if reps < 1 or warmup < 0:
        raise ValueError(f"reps must be >= 1 and warmup >= 0, got reps={reps}, warmup={warmup}")
    cuda = torch.device(device).type == "cuda"
    flush = L2Flusher(device) if cuda else None
    timer = "cuda_events" if cuda else "wall_clock"
    for _ in range(warmup):
        for fn in fns:
            fn()
    samples: list[list[float]] = [[] for _ in fns]
    dropped = 0
    synced_clock(device)
    began = time.perf_counter()

    def timed_round(launches: list[Callable[[], object]]) -> list[float]:
        if not cuda:
            times = []
            for fn in launches:
                start = time.perf_counter()
                fn()
                times.append((time.perf_counter() - start) * 1e3)
            return times
        events = []
        for fn in launches:
            flush()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            events.append((start, end))
        torch.cuda.current_stream(device).synchronize()
        return [s.elapsed_time(e) for s, e in events]

    def keep(times_by_fn: list[tuple[int, float]]) -> None:
        nonlocal dropped
        if throttled is not None and dropped < reps and throttled():
            dropped += 1
            return
        for i, t in times_by_fn:
            samples[i].append(t)

    if not paired:
        for i, fn in enumerate(fns):
            while len(samples[i]) < reps:
                keep([(i, timed_round([fn])[0])])
        return Rounds(samples, dropped, timer, paired=False)
    while True:
        # every other round in reverse (A B C, C B A, ...): no launch always runs first, after the flush's write-back,
        # or last
        order = list(range(len(fns)))[::-1 if len(samples[0]) % 2 else 1]
        keep(list(zip(order, timed_round([fns[i] for i in order]), strict=True)))
        rounds = len(samples[0])
        if rounds >= MAX_ROUNDS or (rounds >= reps and (
                stable_pct is None or baseline is None or len(fns) < 2
                or time.perf_counter() - began >= budget_s * len(fns)
                or _stable(samples, baseline, stable_pct))):
            break
    return Rounds(samples, dropped, timer, paired=True)


def _stable(samples: list[list[float]], baseline: int, stable_pct: float) -> bool:
    """Whether every launch's paired speedup over ``samples[baseline]`` is known to within +-``stable_pct`` %."""
    from wavealign import metrics

    for i, times in enumerate(samples):
        if i == baseline:
            continue
        width = metrics.paired_ratio(samples[baseline], times).half_width_pct
        if not width <= stable_pct:  # NaN (fewer than two kept pairs) is not stable either
            return False
    return True


def time_first_call_ms(fn: Callable[[], object], device: torch.device | str = "cuda") -> float:
    """Wall time (ms) of one synchronised call on ``device``: on a fresh shape this is compile/JIT plus one run."""
    start = synced_clock(device)
    fn()
    return (synced_clock(device) - start) * 1e3


def time_plan(plan: Callable[[], T], device: torch.device | str, warmup: bool = True) -> tuple[T, float]:
    """``plan()``'s value and its host cost in ms, synchronised on CUDA: the median of ``PLAN_REPS`` calls after a
    warm-up call (none when ``warmup`` is False), or of as many as ``PLAN_BUDGET_S`` allows (at least one)."""
    if warmup:
        plan()
    times: list[float] = []
    while len(times) < PLAN_REPS and sum(times) < PLAN_BUDGET_S * 1e3:
        start = synced_clock(device)
        value = plan()
        times.append((synced_clock(device) - start) * 1e3)
    return value, statistics.median(times)
