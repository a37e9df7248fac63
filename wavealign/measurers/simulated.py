"""``simulated``: the L2/HBM simulator (``wavealign.sim``) predicts the cell's backend launching its mask, in its
order, on the cell's GPU with its wave, from a CPU worker: tiles, K/V walk, launch order and MMA efficiency are the
backend's execution facts (``wavealign.kernels``), the L2, HBM and peak those of the GPU (``wavealign.hardware``).

No kernel runs and no Q/K/V is built: the figures (kernel ms, L2 hit, HBM bytes) are predictions, recorded
``simulated``. The reorder the host planned on its CPU says nothing of the GPU: its cost there is predicted
(``wavealign.skip.plan_cost``) and the host's time kept apart (``host_reorder_ms``).

Where the backend's query tile on the cell's GPU spans several mask blocks (FA4 on b200: 256-row units of two
128-row blocks, ``wavealign.sim.tiling``), the kernel launches units, so the cell's order is planned again, with the
same stages, reorderer and wave, on the mask coarsened to units (a unit's token count as the step's block size): a
permutation of units, as that kernel can run it.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from wavealign import measurers, sim
from wavealign.blockmask import check_seed
from wavealign.instruments import timing
from wavealign.launch_order import pairing
from wavealign.masks import check_number, one_of
from wavealign.masks import optional as or_none
from wavealign.measurers import Measurement
from wavealign.records import CPU
from wavealign.skip import plan_cost


def measure(m: Measurement) -> None:
    """The simulator's prediction of the launch, and the reorder's predicted cost on the GPU."""
    cell, result, order = m.cell, m.result, m.prepared.order
    options = MEASURER.resolve(cell.measurer.measure_params)
    q_stage = sim.execution_facts(m.step.backend, m.shape.hardware).q_stage
    launch_rows, mask = m.shape.q_blocks, m.prepared.mask
    if q_stage > 1:
        # which blocks share a unit is the planner's free, exact choice: paired by K/V overlap for every order but
        # the original, which keeps the kernel's own (token-adjacent) units
        rows = mask.reshape(-1, *mask.shape[-2:])
        pairs = (torch.arange(rows.shape[1]).expand(rows.shape[0], -1) if order is None
                 else pairing.pair_blocks(rows, q_stage, m.step.seed))
        result.or_inflation = pairing.or_inflation(rows, pairs, q_stage)
        mask = pairing.paired_rows(rows, pairs)
        units = sim.coarsen_rows(mask, q_stage)
        launch_rows = units.shape[-2]
        if order is not None:
            # a unit is q_stage blocks of tokens: a reorderer placing rows by position (curve) reads it so
            step = dataclasses.replace(m.step, geometry=dataclasses.replace(
                m.step.geometry, block_size=q_stage * m.shape.block_size))
            stages = m.prepared.decision.stages
            chosen = result.order_candidate if m.step.variant.skip == "choose" else None
            order, result.reorder_ms = timing.time_plan(lambda: step.plan_order(units, stages, chosen), m.device)
    predicted = sim.simulate(mask, order, hardware=m.shape.hardware, backend=m.step.backend,
                             head_dim=m.shape.head_dim, wave_size=m.shape.wave_size, block_size=m.shape.block_size,
                             **options)
    result.device, result.timer, result.reps_done = CPU, "simulated", 1
    result.kernel_ms_median, result.kernel_ms_iqr = predicted.kernel_time_s * 1e3, 0.0
    result.l2_hit_pct, result.hbm_read_bytes = predicted.l2_hit_pct, float(predicted.hbm_read_bytes)
    if order is not None:
        _predicted_plan_cost(m, launch_rows)


def _predicted_plan_cost(m: Measurement, launch_rows: int) -> None:
    """The reorder's cost predicted for the cell's GPU, planning ``launch_rows`` rows per head; only WaveAlign's stages
    have a GPU model: another reorderer's cost there is unknown (NaN)."""
    result, reorderer = m.result, m.step.reorderer
    result.host_reorder_ms = result.reorder_ms
    if reorderer not in plan_cost.MODELLED_REORDERERS:
        result.reorder_ms, result.reorder_cost = math.nan, f"unknown: no GPU cost model for reorderer {reorderer}"
        return
    plan = plan_cost.predicted_plan_ms(m.shape.heads, launch_rows, m.shape.kv_blocks, m.shape.hardware,
                                       m.prepared.decision.stages)
    result.reorder_ms, result.reorder_cost = plan.ms, plan.source


MEASURER = measurers.register(measurers.Measurer(
    name="simulated", measure=measure,
    description="the L2/HBM simulator's prediction of the backend's launch on the cell's GPU, from a CPU worker",
    # sim.simulate's own knobs: l2_partitions (None: the GPU's count), row_jitter and the seed of its noise
    params={"l2_partitions": None, "row_jitter": 0.0, "seed": 0},
    checks={"l2_partitions": or_none(one_of((1, 2))),
            "row_jitter": lambda name, value: check_number(name, value, 0.0, sim.MAX_ROW_JITTER),
            "seed": check_seed},
    needs_qkv=False, models_gpu=True, predicted=True, types={"l2_partitions": int | None}))
