"""FA4's SM100 tiling in the simulator: 128-row masks launched as 256-row units, orders over units, the static
persistent scheduler, and a simulated B200 sweep cell."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from wavealign import kernels, launch_order, pipeline, sim
from wavealign.kernels import ExecutionFacts
from wavealign.records import Cell
from wavealign.skip import plan_cost


def random_mask(heads: int, q_blocks: int, kv_blocks: int, density: float = 0.3, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(heads, q_blocks, kv_blocks, generator=generator) < density


@pytest.mark.parametrize("q_blocks", [6, 7])  # even, and ragged: the last unit holds one block
def test_coarsening_ors_each_pair_of_adjacent_rows_and_keeps_a_ragged_last_row_alone(q_blocks):
    mask = random_mask(2, q_blocks, 5)
    units = sim.coarsen_rows(mask, 2)
    assert units.shape == (2, (q_blocks + 1) // 2, 5) and units.dtype == torch.bool
    for u in range(units.shape[1]):
        expected = mask[:, 2 * u:2 * u + 2].any(dim=1)  # one row where the pair is cut short
        assert torch.equal(units[:, u], expected)


def test_coarsening_by_one_is_the_mask_and_a_bad_factor_is_named():
    mask = random_mask(1, 4, 4)
    assert sim.coarsen_rows(mask, 1) is mask
    with pytest.raises(ValueError, match="factor"):
        sim.coarsen_rows(mask, 0)


def test_fa4_on_the_b200_launches_256_row_units_under_its_static_persistent_scheduler():
    b200, h200 = sim.execution_facts("fa4", "b200"), sim.execution_facts("fa4", "h200")
    assert (b200.q_rows, b200.scheduler, b200.kv_walk) == (256, "static-persistent", "reverse")
    assert (h200.q_rows, h200.scheduler) == (128, "streaming")
    result = sim.simulate(random_mask(2, 9, 9), hardware="b200", backend="fa4")
    assert result.q_rows == 256 and result.row_slot.shape == (2, 5)  # nine 128-row blocks -> five units


def test_a_unit_reads_each_kv_block_once_for_both_of_its_query_tiles():
    """Rows 2u and 2u + 1 identical: 256-row units make half the K/V reads of 128-row rows for the same FLOPs."""
    mask = random_mask(1, 4, 8, density=0.5).repeat_interleave(2, dim=1)
    base = ExecutionFacts(128, 128, mma_efficiency=0.7, block_overhead_s=0.0)
    one = sim.simulate(mask, hardware="b200", backend=base, wave_size=4, l2_partitions=1)
    two = sim.simulate(mask, hardware="b200", backend=replace(base, q_stage=2), wave_size=4, l2_partitions=1)
    assert sum(h.l2_lookups for h in two.per_head) * 2 == sum(h.l2_lookups for h in one.per_head)


def test_a_wavealign_order_planned_on_the_units_is_a_permutation_of_units_the_b200_runs():
    mask = random_mask(3, 11, 11)
    units = sim.coarsen_rows(mask, 2)
    order = launch_order.plan(units, wave_size=kernels.get("fa4").wave_size("b200"))
    assert torch.equal(order.perm.sort(dim=-1).values, torch.arange(6).expand(3, 6))
    assert sim.simulate(mask, order, hardware="b200", backend="fa4").l2_hit_ratio >= 0
    with pytest.raises(ValueError, match="coarsen_rows"):  # an order of 128-row blocks is not one the kernel runs
        sim.simulate(mask, launch_order.plan(mask, wave_size=148), hardware="b200", backend="fa4")


def test_the_static_persistent_scheduler_gives_slot_s_entries_s_s_plus_wave_and_so_on_whatever_they_cost():
    """Two slots, rows of NNZ 3, 1, 1, 1. Streaming: slot 1 runs rows 1, 2, 3 while slot 0 runs row 0 (3 steps).
    Static: slot 0 runs rows 0 and 2, slot 1 rows 1 and 3 (4 steps)."""
    mask = torch.tensor([[[1, 1, 1, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]], dtype=torch.bool)
    base = ExecutionFacts(128, 128, mma_efficiency=0.7, block_overhead_s=0.0)
    streaming = sim.simulate(mask, hardware="h100", backend=base, wave_size=2)
    static = sim.simulate(mask, hardware="h100", backend=replace(base, scheduler="static-persistent"), wave_size=2)
    assert streaming.row_slot[0].tolist() == [0, 1, 1, 1] and streaming.makespan_steps == 3
    assert static.row_slot[0].tolist() == [0, 1, 0, 1] and static.makespan_steps == 4


def test_kernel_time_adds_the_exposed_share_of_the_shorter_of_compute_and_memory():
    base = ExecutionFacts(128, 128, mma_efficiency=0.7, block_overhead_s=0.0)
    mask = random_mask(2, 8, 8)
    roofline = sim.simulate(mask, hardware="h200", backend=base, wave_size=8)
    exposed = sim.simulate(mask, hardware="h200", backend=replace(base, exposed_memory_fraction=0.25), wave_size=8)
    shorter = min(roofline.compute_time_s, roofline.memory_time_s)
    assert exposed.kernel_time_s == pytest.approx(roofline.kernel_time_s + 0.25 * shorter)


def test_a_simulated_b200_cell_is_labelled_simulated_and_plans_its_order_over_units():
    cell = Cell.from_flat(dict(cell_id="orig", group_id="g0", hardware="b200", profile_hardware="b200", backend="fa4",
                               method="planted", variant="original", stages="none", skip="force", workload="shape",
                               seq_len_tokens=128 * 64, num_heads=2, head_dim=128, block_size=128, wave_size=148,
                               reps=1, warmup=0, measure="simulated", method_params={"density": 0.25, "prototypes": 8}))
    original, aligned = pipeline.run_group([cell, cell.replaced(cell_id="wa", variant="wavealign", stages="both")])
    for result in (original, aligned):
        assert result.status == "done", result.traceback
        assert result.simulated and result.timer == "simulated" and result.kernel_ms_median > 0
    # WaveAlign's cost predicted for planning 32 units (64 blocks of 128 rows, two to a unit) per head
    assert aligned.reorder_ms == plan_cost.predicted_plan_ms(2, 32, 64, "b200").ms
