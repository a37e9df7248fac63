"""The dispatcher's queues: groups on the same inputs one after another, and a worker offered the group whose
inputs it keeps (``pipeline.group_inputs``), so a mask shared by several backends is built once per worker."""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from wavealign.orchestrator import dispatch
from wavealign.pipeline import inputs_key
from wavealign.records import Cell


def cell(backend: str, seed: int) -> Cell:
    return Cell(cell_id=f"{backend}-{seed}", group_id=f"g-{backend}-{seed}", hardware="cpu", profile_hardware="h100",
                backend=backend, method="dense", variant="original", stages="none", skip_mode="force",
                workload="shape", seq_len_tokens=1024, num_heads=2, head_dim=32, block_size=128, wave_size=4,
                seed=seed)


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
