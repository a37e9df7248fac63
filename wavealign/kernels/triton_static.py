"""Backend ``triton-static``: the project's Triton block-sparse kernel under a static persistent tile scheduler.

The same tile as backend ``triton`` (``triton_blocksparse``: a query block's rows against its selected K/V blocks,
the row order read in-kernel), launched as FA4 launches its SM100 non-causal block-sparse forward
(``StaticPersistentTileScheduler``, flash-attn-4 4.0.0b36 ``flash_attn/cute/tile_scheduler.py``): a grid of ``G``
programs, one per SM, program ``p`` running tiles ``p, p + G, p + 2G, ...`` of the queue numbered launch slot fastest,
then head, then batch, whatever each tile costs. It measures on a Hopper GPU the scheduler that the order chooser's
scheduler-aware orders (``launch_order.scheduled``) are made for. Every tile computes exactly what the streaming
kernel's does, so the output is bitwise that of backend ``triton`` in any order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from wavealign import hardware as hardware_registry
from wavealign.blockmask import check_int
from wavealign.kernels import Backend, LaunchShape, register
from wavealign.kernels import triton_blocksparse as streaming

# the grid of persistent programs: one per resident CTA slot of the GPU (its wave), unless a launch says otherwise
OPTIONS = ("grid",)
# the inner loop's share of the bf16 peak, fitted (least squares in log kernel time) on the seven original-order
# cells of Nsight Compute's triton-static runs on the H200 (benchmarks/results/orders-h200/static_ncu.csv, README's
# static-path section); streaming.EXECUTION keeps its round 0.55, which no measurement of that backend has replaced
MMA_EFFICIENCY = 0.496


def programs(shape: LaunchShape, grid: int | None) -> int:
    """The persistent grid of a launch of ``shape``: ``grid`` when given, else its planned wave (``wave_size``), else
    the wave of the GPU it runs on (SMs x the streaming kernel's CTAs per SM there)."""
    if grid is not None:
        return check_int("grid", grid, lo=1)
    if shape.wave_size is not None:
        return shape.wave_size
    if shape.device.type == "cuda":
        known = hardware_registry.detect(shape.device.index)
        sms = torch.cuda.get_device_properties(shape.device).multi_processor_count
        return sms * (1 if known is None else streaming.BACKEND.ctas_per_sm.get(known.name, 1))
    raise ValueError("backend 'triton-static' needs grid= (persistent programs) or a LaunchShape with wave_size "
                     f"on a {shape.device.type} device")


def check_options(options: Mapping[str, Any], block_size: int) -> None:
    """``grid`` (a positive integer or None) and the streaming kernel's ``KernelConfig`` fields; its launch order
    is fixed (slot fastest, then head), so there is no ``head_order``."""
    if "head_order" in options:
        raise ValueError("backend 'triton-static' has no head_order: its static scheduler runs slots fastest, then "
                         "heads")
    if options.get("grid") is not None:
        check_int("grid", options["grid"], lo=1)
    streaming.check_options({k: v for k, v in options.items() if k not in OPTIONS}, block_size)


def plan(mask, order, shape: LaunchShape, *, grid: int | None = None, config: streaming.KernelConfig | None = None,
         **params: Any) -> streaming.TritonLaunch:
    """``triton``'s plan, launched persistently on ``programs(shape, grid)`` programs."""
    check_options({"grid": grid, **params}, shape.block_size)
    return streaming.plan(mask, order, shape, config=config, persistent_grid=programs(shape, grid), **params)


register(Backend(
    name="triton-static",
    plan=plan,
    description="WaveAlign's Triton block-sparse forward on a static persistent scheduler (FA4 SM100's stride)",
    ctas_per_sm=streaming.BACKEND.ctas_per_sm,  # the same tile: the same occupancy
    execution=dataclasses.replace(streaming.EXECUTION, scheduler="static-persistent", mma_efficiency=MMA_EFFICIENCY),
    ncu_kernels=r"_block_sparse_attn_fwd",
    is_available=streaming.is_available,
    params={"grid": None, **dict.fromkeys(streaming.TUNED_OPTIONS)},
    types={"grid": int | None, **streaming.TUNED_TYPES},
    check_options=check_options,
))
