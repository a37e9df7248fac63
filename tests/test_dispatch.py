"""The dispatcher's queues: groups on the same inputs one after another, and a worker offered the group whose
inputs it keeps (``pipeline.group_inputs``), so a mask shared by several backends is built once per worker."""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from wavealign.orchestrator import dispatch
from wavealign.pipeline import inputs_key
from wavealign.records import Cell


def cell(backend: str, seed: int, tokens: int = 1024) -> Cell:
    name = f"{backend}-{seed}" + ("" if tokens == 1024 else f"-{tokens}")
    return Cell(cell_id=name, group_id=f"g-{name}", hardware="cpu", profile_hardware="h100", backend=backend,
                method="dense", variant="original", stages="none", skip_mode="force", workload="shape",
                seq_len_tokens=tokens, num_heads=2, head_dim=32, block_size=128, wave_size=4, seed=seed)


def test_groups_on_the_same_inputs_are_queued_one_after_another_in_the_order_of_their_first():
    # the grid's order: backend outer, seed inner
    cells = [cell(b, s) for b in ("reference", "sdpa") for s in (0, 1, 2)]
    queues, baselines = dispatch.queues(cells, cells)
    order = [group[0].cell_id for group in queues["cpu"]]
    assert order == ["reference-0", "sdpa-0", "reference-1", "sdpa-1", "reference-2", "sdpa-2"]
    assert baselines == set()


def test_a_worker_takes_the_group_on_the_inputs_it_keeps_else_the_head():
    groups = [[cell("reference", 0)], [cell("reference", 1)], [cell("sdpa", 1)], [cell("sdpa", 0)]]
    queue = deque(groups)
    held = inputs_key(cell("sdpa", 0))  # keeps seed 0's inputs (equal for both backends)
    assert dispatch.next_group(queue, held) is groups[0]  # the head is on them already
    assert dispatch.next_group(queue, held) is groups[3]  # further down the queue, taken out of order
    assert dispatch.next_group(queue, None) is groups[1]  # nothing kept: the head
    assert dispatch.next_group(queue, inputs_key(replace(cell("sdpa", 0), seed=7))) is groups[2]  # none: the head
    assert not queue


def test_blocks_of_groups_on_one_input_are_queued_longest_first_each_kept_together_in_its_order():
    # the grid's order: seed outer, length, then backend; the 2048-token groups cost 4x the 1024-token ones
    cells = [cell(b, s, n) for s in (0, 1) for n in (1024, 2048) for b in ("reference", "sdpa")]
    queues, _ = dispatch.queues(cells, cells)
    order = [group[0].cell_id for group in queues["cpu"]]
    assert order == ["reference-0-2048", "sdpa-0-2048", "reference-1-2048", "sdpa-1-2048",
                     "reference-0", "sdpa-0", "reference-1", "sdpa-1"]
    # more repetitions weigh as much as a longer sequence: (1 + 19) calls at 1024 outweigh (1 + 3) at 2048
    many_reps = [replace(c, reps=19, warmup=1) for c in cells if c.seq_len_tokens == 1024 and c.seed == 1]
    few_reps = [replace(c, reps=3, warmup=1) for c in cells if c.seq_len_tokens == 2048]
    queues, _ = dispatch.queues([*few_reps, *many_reps], [*few_reps, *many_reps])
    assert [group[0].cell_id for group in queues["cpu"]] == ["reference-1", "sdpa-1", "reference-0-2048",
                                                             "sdpa-0-2048", "reference-1-2048", "sdpa-1-2048"]


def test_a_group_s_predicted_cost_is_its_launch_calls_times_the_dense_work_of_its_shape():
    group = [replace(cell("reference", 0, 2048), reps=4, warmup=0), replace(cell("reference", 0, 2048), reps=4)]
    # warmup 0 and 1 both make the first call: 5 calls each
    assert dispatch.predicted_cost(group) == 2 * 5 * 2048**2 * 2 * 32
