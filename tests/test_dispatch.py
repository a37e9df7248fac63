"""The dispatcher's queues: groups on the same inputs one after another, and a worker offered the group whose
inputs it keeps (``inputs.InputCache``), so a mask shared by several backends is built once per worker."""

from __future__ import annotations

import math
from collections import deque

import pytest

from orchestrator import dispatch
from wavealign import metrics
from wavealign.pipeline import inputs_key
from wavealign.records import Cell


def cell(backend: str, seed: int, tokens: int = 1024) -> Cell:
    name = f"{backend}-{seed}" + ("" if tokens == 1024 else f"-{tokens}")
    return Cell.from_flat(dict(cell_id=name, group_id=f"g-{name}", hardware="cpu", profile_hardware="h100",
                               backend=backend, method="dense", variant="original", stages="none", skip="force",
                               workload="shape", seq_len_tokens=tokens, num_heads=2, head_dim=32, block_size=128,
                               wave_size=4, seed=seed))


def test_groups_on_the_same_inputs_are_queued_one_after_another_in_the_order_of_their_first():
    # the grid's order: backend outer, seed inner
    cells = [cell(b, s) for b in ("reference", "sdpa") for s in (0, 1, 2)]
    queues, baselines = dispatch.queues(cells, cells)
    order = [group[0].cell_id for group in queues["cpu"]]
    assert order == ["reference-0", "sdpa-0", "reference-1", "sdpa-1", "reference-2", "sdpa-2"]
    assert baselines == set()


def test_a_group_resumed_without_its_original_gets_it_back_as_a_baseline_run_first():
    """A variant added on resume is timed against an original re-run beside it, back to back, never against a
    row measured in another run; the re-run original is a baseline, not a result to record again."""
    original = cell("reference", 0).replaced(cell_id="o", group_id="g")
    added = original.replaced(cell_id="w", variant="wavealign", stages="both")
    queues, baselines = dispatch.queues([added], [original, added])
    assert [[c.cell_id for c in group] for group in queues["cpu"]] == [["o", "w"]]
    assert baselines == {"o"}


def test_a_worker_takes_the_group_on_the_inputs_it_keeps_else_the_head():
    groups = [[cell("reference", 0)], [cell("reference", 1)], [cell("sdpa", 1)], [cell("sdpa", 0)]]
    queue = deque(groups)
    held = inputs_key(cell("sdpa", 0))  # keeps seed 0's inputs (equal for both backends)
    assert dispatch.next_group(queue, held) is groups[0]  # the head is on them already
    assert dispatch.next_group(queue, held) is groups[3]  # further down the queue, taken out of order
    assert dispatch.next_group(queue, None) is groups[1]  # nothing kept: the head
    assert dispatch.next_group(queue, inputs_key(cell("sdpa", 0).replaced(seed=7))) is groups[2]  # none: the head
    assert not queue


def test_blocks_of_groups_on_one_input_are_queued_longest_first_each_kept_together_in_its_order():
    # the grid's order: seed outer, length, then backend; the 2048-token groups cost 4x the 1024-token ones
    cells = [cell(b, s, n) for s in (0, 1) for n in (1024, 2048) for b in ("reference", "sdpa")]
    queues, _ = dispatch.queues(cells, cells)
    order = [group[0].cell_id for group in queues["cpu"]]
    assert order == ["reference-0-2048", "sdpa-0-2048", "reference-1-2048", "sdpa-1-2048",
                     "reference-0", "sdpa-0", "reference-1", "sdpa-1"]
    # more repetitions weigh as much as a longer sequence: (1 + 19) calls at 1024 outweigh (1 + 3) at 2048
    many_reps = [c.replaced(reps=19, warmup=1) for c in cells if c.inputs.seq_len_tokens == 1024 and c.inputs.seed == 1]
    few_reps = [c.replaced(reps=3, warmup=1) for c in cells if c.inputs.seq_len_tokens == 2048]
    queues, _ = dispatch.queues([*few_reps, *many_reps], [*few_reps, *many_reps])
    assert [group[0].cell_id for group in queues["cpu"]] == ["reference-1", "sdpa-1", "reference-0-2048",
                                                             "sdpa-0-2048", "reference-1-2048", "sdpa-1-2048"]


def test_a_group_s_predicted_cost_is_its_launch_calls_times_the_dense_work_of_its_shape():
    group = [cell("reference", 0, 2048).replaced(reps=4, warmup=0), cell("reference", 0, 2048).replaced(reps=4)]
    # warmup 0 and 1 both make the first call: 5 calls each, of dense attention's FLOPs at 2048 tokens, 2 heads of 32
    assert dispatch.predicted_cost(group) == 2 * 5 * metrics.attention_flops(2048, 2048, 32, 2)


def test_the_next_group_is_reserved_for_prefetch_only_when_it_is_on_other_inputs():
    groups = [[cell("reference", 1)], [cell("sdpa", 0)], [cell("sdpa", 1)]]
    held = inputs_key(cell("reference", 0))
    queue = deque(groups)
    assert dispatch.reserve_next(queue, held) is None and len(queue) == 3  # sdpa-0 shares the inputs held
    queue = deque([groups[0], groups[2]])
    assert dispatch.reserve_next(queue, held) is groups[0] and list(queue) == [groups[2]]  # the head, taken off
    assert dispatch.reserve_next(deque(), held) is None


def test_an_idle_worker_takes_its_reserved_group_else_the_queue_else_a_busy_worker_s_reservation():
    mine, queued, theirs, elsewhere = ([cell("reference", s)] for s in range(4))
    reserved = {1: ("cpu", mine), 2: ("cpu", theirs), 3: ("h200", elsewhere)}
    queue = deque([queued])
    assert dispatch.take("cpu", queue, 1, {}, reserved) is mine  # its own, before the queue
    assert dispatch.take("cpu", queue, 1, {}, reserved) is queued
    assert dispatch.take("cpu", queue, 1, {}, reserved) is theirs  # queue empty: a busy cpu worker's
    assert dispatch.take("cpu", queue, 1, {}, reserved) is None  # never another placement's
    assert reserved == {3: ("h200", elsewhere)}


# ---- on a real local Ray: one CPU worker; six groups on six inputs, the `file` method's three failing in the worker
SWEEP = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[random,file]",
         "+grid.method_params.file.path=missing.npz", "grid.workload=[shape-2h]", "grid.seq_k=[0.5]",
         "grid.seed=[0,1,2]", "grid.variant=[original,wavealign]", "grid.reps=1", "grid.warmup=0", "progress=false",
         "ray.num_cpus=1", "mlflow.enabled=false"]


@pytest.fixture(scope="module")
def with_and_without_prefetch(tmp_path_factory):
    from rich.console import Console

    from orchestrator import config, dataset, sweep

    rows = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ADDRESS", "local")  # a fresh embedded Ray even if another cluster runs on this machine
        for prefetch in (False, True):
            root = tmp_path_factory.mktemp(f"prefetch-{prefetch}")
            cfg = config.load([*SWEEP, f"run_root={root}", f"ray.prefetch_inputs={str(prefetch).lower()}"])
            outcome = sweep.run(cfg, Console(quiet=True))
            assert outcome.workers == 1 and not outcome.interrupted
            rows[prefetch] = {r["cell_id"]: r for r in dataset.read(root).to_pylist()}
    return rows[False], rows[True]


def test_a_sweep_with_prefetch_records_every_cell_and_its_groups_after_the_first_as_prefetched(
        with_and_without_prefetch):
    _, rows = with_and_without_prefetch
    assert len(rows) == 12
    done = [r for r in rows.values() if r["status"] == "done"]
    failed = [r for r in rows.values() if r["status"] == "failed"]
    assert len(done) == len(failed) == 6 and all("missing.npz" in r["error"] for r in failed)
    # one worker: each group it is handed has the next (on other inputs) prefetched, so all but the first are
    # built ahead; a failed prefetch fails its group as a failed build would (and prefetched nothing)
    by_start = sorted({(r["started_at"], r["group_id"]) for r in rows.values()})
    first = by_start[0][1]
    assert {r["group_id"]: r["inputs_prefetched"] for r in done} == {g: g != first for _, g in by_start
                                                                     if g in {r["group_id"] for r in done}}
    assert not any(r["inputs_prefetched"] for r in failed)
    assert any("_build_ahead" in r["traceback"] for r in failed)


def test_a_sweep_with_prefetch_measures_what_one_without_does(with_and_without_prefetch):
    without, with_ = with_and_without_prefetch
    assert set(without) == set(with_)
    assert not any(r["inputs_prefetched"] for r in without.values())
    same = ("status", "error", "group_id", "num_q_blocks", "density", "nnz_mean", "nnz_cv", "adjacent_jaccard",
            "wave_working_set_bytes", "reordered_wave_working_set_bytes", "stages_applied", "reorder_applied",
            "skip_reorder", "skip_reason")  # not reps_done: a paired group repeats until stable, its count varies

    def fields(row):  # NaN (a failed cell's figures) equal to NaN
        return {k: "nan" if isinstance(row[k], float) and math.isnan(row[k]) else row[k] for k in same}

    for cell_id, row in without.items():
        assert fields(row) == fields(with_[cell_id]), cell_id


def test_a_ray_worker_handed_a_group_and_the_next_runs_the_next_on_inputs_built_ahead():
    """The run call carries the next group: its prefetch starts after the current group took its inputs, in the
    same worker process, so the next run always finds them (calls on one actor run in order)."""
    import ray

    from orchestrator import cluster

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    try:
        (worker,) = cluster.start_workers("cpu", 1, 0, cluster.inventory())
        first = worker.run.remote([cell("reference", 0)], [cell("reference", 1)])
        second = worker.run.remote([cell("reference", 1)])
        rows = ray.get([first, second], timeout=120)
        assert [[r["result"].inputs_prefetched for r in rs] for rs in rows] == [[False], [True]]
        assert all(r["result"].status == "done" for rs in rows for r in rs)
    finally:
        ray.shutdown()


def test_a_worker_ray_restarted_prefetches_no_more(tmp_path, monkeypatch):
    """A call retried on a restarted worker must not start its next group's build again: if that build is what
    killed the process, the retry would die too and fail a healthy group."""
    import os

    import ray

    from orchestrator import cluster

    died = tmp_path / "died"

    class DiesOnce(cluster.CellRunner):
        def run(self, cells, then=None):
            if not died.exists():
                died.write_text(str(os.getpid()))
                os._exit(1)
            return super().run(cells, then)

    monkeypatch.setattr(cluster, "CellWorker", ray.remote(DiesOnce))
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    try:
        (worker,) = cluster.start_workers("cpu", 1, 1, cluster.inventory())
        # one call after the other: the retried first call has finished before the second is sent
        first = ray.get(worker.run.remote([cell("reference", 0)], [cell("reference", 1)]), timeout=300)  # dies once
        second = ray.get(worker.run.remote([cell("reference", 1)]), timeout=300)
        rows = [first, second]
        assert [[(r["result"].status, r["result"].inputs_prefetched) for r in rs] for rs in rows] == \
            [[("done", False)], [("done", False)]]
        assert rows[0][0]["worker_pid"] != int(died.read_text())
    finally:
        ray.shutdown()
