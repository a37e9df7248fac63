"""The cell pipeline: inputs -> attention step (skip decision, reorder plan) -> measurer -> one result per cell; and
a worker's input cache (kept and prefetched inputs)."""

from __future__ import annotations

import math

import pytest
import torch

from wavealign import environment, inputs, metrics, pipeline
from wavealign.inputs import InputCache
from wavealign.measurers import timed
from wavealign.records import Cell
from wavealign.skip import plan_cost


def make_cell(**changes) -> Cell:
    cell = Cell.from_flat(dict(cell_id="c0", group_id="g0", hardware="cpu", profile_hardware="h100",
                               backend="reference", method="planted", variant="original", stages="none",
                               skip="force", workload="shape", seq_len_tokens=1024, num_heads=2, head_dim=32,
                               block_size=128, wave_size=4, reps=2, warmup=0))
    return cell.replaced(**changes)


def variants(**changes) -> list[Cell]:
    return [make_cell(cell_id="orig", **changes),
            make_cell(cell_id="wa", variant="wavealign", stages="both", **changes)]


def test_reference_cell_is_wall_clock_timed_on_cpu():
    result = pipeline.run_cell(make_cell())
    assert result.status == "done", result.traceback
    assert (result.device, result.timer, result.simulated) == ("cpu", "wall_clock", False)
    assert result.kernel_ms_median > 0 and result.kernel_ms_iqr >= 0


def test_group_speedups_are_paired_ratios_over_the_original_variant_of_the_group():
    original, aligned = pipeline.run_group(variants())
    assert original.speedup_vs_original == 1.0 and original.verdict is None
    assert original.paired and aligned.paired and len(aligned.kernel_ms_reps) == len(original.kernel_ms_reps) >= 2
    paired = metrics.paired_ratio(original.kernel_ms_reps, aligned.kernel_ms_reps)
    assert (aligned.speedup_vs_original, aligned.speedup_ci_low, aligned.speedup_ci_high) == pytest.approx(
        (paired.point, paired.low, paired.high))
    spreads = (metrics.spread_pct(original.kernel_ms_reps), metrics.spread_pct(aligned.kernel_ms_reps))
    assert aligned.verdict == metrics.verdict(paired.low, paired.high, point=paired.point, spreads_pct=spreads)
    assert aligned.net_speedup_ci_low <= aligned.net_speedup_vs_original <= aligned.net_speedup_ci_high


def test_blocked_timing_compares_the_two_samples_apart():
    blocked = {"timed": {"paired": False}}
    original, aligned = pipeline.run_group(variants(measure_params=blocked["timed"]))
    assert not aligned.paired and len(aligned.kernel_ms_reps) == 2
    apart = metrics.independent_ratio(original.kernel_ms_reps, aligned.kernel_ms_reps)
    assert aligned.speedup_vs_original == pytest.approx(apart.point)


def test_reorder_is_applied_and_costed_only_for_reordering_variants():
    original, aligned = pipeline.run_group(variants())
    assert (original.reorder_applied, original.reorder_ms) == (False, 0.0)
    assert aligned.reorder_applied and aligned.stages_applied == "both" and aligned.reorder_ms > 0


def test_mask_statistics_and_skip_features_are_recorded():
    result = pipeline.run_cell(make_cell())
    assert (result.num_q_blocks, result.num_kv_blocks) == (8, 8)
    assert 0 < result.density <= 1 and result.nnz_mean > 0 and result.wave_working_set_bytes > 0


def test_policy_variant_obeys_the_skip_decision():
    # the provisional h100 profile skips sequences below 150K tokens
    cell = make_cell(variant="adaptive", stages="both", skip="policy")
    result = pipeline.run_cell(cell)
    assert result.skip_reorder is False and "skip" in result.skip_reason
    assert result.stages_applied == "none" and result.reorder_applied is False


def test_forced_variant_reorders_despite_a_skip_decision():
    result = pipeline.run_cell(make_cell(variant="wavealign", stages="both"))
    assert result.skip_reorder is False and result.reorder_applied


def test_a_simulated_cell_is_labelled_simulated_and_reports_cache_figures():
    cells = variants(backend="flex", measure="simulated", hardware="a40", profile_hardware="a40",
                     seq_len_tokens=64 * 256, num_heads=2, head_dim=128, block_size=64, wave_size=168,
                     method_params={"density": 0.25, "prototypes": 8})
    original, aligned = pipeline.run_group(cells)
    assert original.simulated and original.timer == "simulated" and original.device == "cpu"
    assert 0 <= original.l2_hit_pct <= 100 and original.hbm_read_bytes > 0
    # planted rows shuffled: WaveAlign regroups them, so a wave reuses more K/V in L2
    assert aligned.l2_hit_pct > original.l2_hit_pct


def test_a_simulated_cell_counts_the_reorder_predicted_for_its_gpu_not_the_host_s_cpu_time():
    cells = variants(backend="flex", measure="simulated", hardware="a40", profile_hardware="a40",
                     seq_len_tokens=64 * 256, num_heads=2, head_dim=128, block_size=64, wave_size=168,
                     method_params={"density": 0.25, "prototypes": 8})
    original, aligned = pipeline.run_group(cells)
    predicted = plan_cost.predicted_plan_ms(2, 256, 256, "a40")
    assert aligned.reorder_ms == predicted.ms and aligned.reorder_cost == predicted.source
    assert "a40" in aligned.reorder_cost and "h200" in aligned.reorder_cost
    assert aligned.host_reorder_ms > 0  # the host's own plan time, kept apart
    assert aligned.total_ms == aligned.kernel_ms_median + predicted.ms
    assert original.reorder_ms == 0.0 and math.isnan(original.host_reorder_ms)
    temporal = pipeline.run_group([cells[0], cells[1].replaced(cell_id="s2", variant="temporal", stages="temporal",
                                                               reorderer="identity")])[1]
    stage2 = plan_cost.predicted_plan_ms(2, 256, 256, "a40", stages="temporal")
    assert temporal.reorder_ms == stage2.ms < predicted.ms  # Stage 2 alone has its own, smaller cost
    assert "Stage 2 alone" in temporal.reorder_cost


def test_a_simulated_cell_of_a_reorderer_without_a_gpu_cost_model_leaves_its_cost_unknown():
    cells = variants(backend="flex", measure="simulated", hardware="a40", profile_hardware="a40",
                     seq_len_tokens=64 * 256, num_heads=2, head_dim=128, block_size=64, wave_size=168, reorderer="lsh")
    aligned = pipeline.run_group(cells)[1]
    assert math.isnan(aligned.reorder_ms) and math.isnan(aligned.net_speedup_vs_original)
    assert "no GPU cost model for reorderer lsh" in aligned.reorder_cost and aligned.host_reorder_ms > 0
    assert aligned.speedup_vs_original > 0  # the kernel's own speedup stands


def test_the_predicted_plan_cost_grows_with_the_mask_and_shrinks_with_more_sms():
    h200 = plan_cost.predicted_plan_ms(40, 2841, 2841, "h200")
    # what it was fitted to: the H200's 40- and 8-head plans (benchmarks/results/plan-h200)
    assert h200.ms == pytest.approx(1.835, rel=0.02)
    assert plan_cost.predicted_plan_ms(8, 2841, 2841, "h200").ms == pytest.approx(0.85, rel=0.02)
    # H100 has the H200's 132 SMs; A40 has 84, so its per-entry part is 132/84 times the H200's
    assert plan_cost.predicted_plan_ms(40, 2841, 2841, "h100").ms == h200.ms
    a40 = plan_cost.predicted_plan_ms(40, 2841, 2841, "a40")
    assert a40.ms - plan_cost.FIXED_MS == pytest.approx((h200.ms - plan_cost.FIXED_MS) * 132 / 84)
    assert "x 1.57 for SM count" in a40.source and "SM count" not in h200.source
    # Stage 2 alone: what it was measured at, 0.35 ms for 40 heads on the H200
    assert plan_cost.predicted_plan_ms(40, 2841, 2841, "h200", stages="temporal").ms == pytest.approx(0.35)


def test_a_cell_that_raises_is_failed_with_its_error_and_traceback():
    result = pipeline.run_cell(make_cell(method_params={"density": 2.0}))
    assert result.status == "failed"
    assert "density" in result.error and "Traceback" in result.traceback
    assert math.isnan(result.kernel_ms_median)


def test_a_method_mask_from_a_model_workload():
    cell = make_cell(method="xattention", model="wan2.1-1.3b", resolution="480p", frames=5, heads=[0, 1],
                     seq_len_tokens=3120, head_dim=128)
    result = pipeline.run_cell(cell)
    assert result.status == "done", result.traceback
    assert result.num_q_blocks == 25


def test_environment_names_the_software_and_host():
    env = environment.capture()
    assert env.torch_version and env.host and env.wavealign_version


def test_a_group_must_share_its_group_id():
    with pytest.raises(ValueError, match="group_id"):
        pipeline.run_group([make_cell(), make_cell(group_id="other")])


def test_nsight_compute_on_a_cpu_cell_says_why_there_are_no_counters():
    result = pipeline.run_cell(make_cell(measure="ncu"))
    assert result.status == "done" and "CPU" in result.ncu_unavailable
    assert math.isnan(result.ncu_l2_hit_pct)


def test_a_workers_next_group_on_the_same_inputs_reuses_them_and_another_builds_its_own(monkeypatch):
    """Groups of two backends on one (dense) mask: one build; a group of another seed builds again."""
    built = []
    build = inputs.build
    monkeypatch.setattr(inputs, "build", lambda request: built.append(request.spec.seed) or build(request))
    reference = variants(group_id="ref", method="dense")  # sdpa computes dense attention only
    sdpa = [c.replaced(backend="sdpa", group_id="sdpa", cell_id=c.cell_id + "-sdpa") for c in reference]
    reseeded = [c.replaced(seed=1, group_id="seed1", cell_id=c.cell_id + "-s1") for c in reference]
    cache = InputCache()
    first, second, third = (pipeline.run_group(g, inputs=cache) for g in (reference, sdpa, reseeded))
    assert built == [0, 1]  # the reference group's seed, then the reseeded group's
    assert all(r.status == "done" for r in (*first, *second, *third)), [r.traceback for r in second]
    assert pipeline.inputs_key(reference[0]) == pipeline.inputs_key(sdpa[0]) != pipeline.inputs_key(reseeded[0])
    # a simulated cell needs no Q/K/V, so its inputs are not those of one that computes attention
    assert pipeline.inputs_key(reference[0].replaced(measure="simulated")) != pipeline.inputs_key(reference[0])


def test_a_group_given_no_cache_keeps_nothing_for_the_next(monkeypatch):
    built = []
    build = inputs.build
    monkeypatch.setattr(inputs, "build", lambda request: built.append(request.spec.seed) or build(request))
    cells = variants(group_id="g")
    pipeline.run_group(cells)
    pipeline.run_group(cells)
    assert built == [0, 0]


@pytest.mark.parametrize(("warmup", "reps", "calls"), [(3, 2, 5), (1, 2, 3), (0, 2, 3)])
def test_a_cell_calls_its_launch_warmup_plus_reps_times_the_first_call_being_the_first_warmup(monkeypatch, warmup,
                                                                                             reps, calls):
    from wavealign.kernels import reference

    made = []
    run = reference.ReferenceLaunch.run
    monkeypatch.setattr(reference.ReferenceLaunch, "run", lambda self, q, k, v: made.append(1) or run(self, q, k, v))
    result = pipeline.run_cell(make_cell(warmup=warmup, reps=reps))
    assert result.status == "done", result.traceback
    assert len(made) == calls == timed.calls(warmup, reps)
    assert result.reps_done == reps and result.first_call_ms > 0  # the first call is timed apart on a CPU too


def _prefetch(cache: InputCache, group: list[Cell]) -> bool:
    """Prefetch ``group``'s inputs as a worker does for its next group."""
    return cache.prefetch(pipeline.input_request(group[0]), group[0].group_id)


def _counting_builds(monkeypatch) -> list[tuple[int, str]]:
    """(the inputs' seed, thread name) of every inputs.build call from now on, through the real build; the tests'
    groups differ by seed."""
    import threading

    built: list[tuple[int, str]] = []
    build = inputs.build

    def counted(request):
        built.append((request.spec.seed, threading.current_thread().name))
        return build(request)

    monkeypatch.setattr(inputs, "build", counted)
    return built


def test_a_prefetched_group_takes_the_inputs_built_in_the_background_and_a_reusing_group_keeps_the_flag(monkeypatch):
    cache = InputCache()
    built = _counting_builds(monkeypatch)
    first, second = variants(group_id="seed0"), variants(group_id="seed1", seed=1)
    sdpa = [c.replaced(backend="sdpa", method="dense", group_id="sdpa1", cell_id=c.cell_id + "-sdpa") for c in second]
    dense = [c.replaced(method="dense", group_id="dense1") for c in second]
    assert [r.inputs_prefetched for r in pipeline.run_group(first, inputs=cache)] == [False, False]
    assert _prefetch(cache, dense)
    assert not _prefetch(cache, dense)  # already being built (or built): not twice
    results = pipeline.run_group(dense, inputs=cache)
    assert all(r.status == "done" and r.inputs_prefetched for r in results), [r.traceback for r in results]
    # reused: the same inputs
    assert [r.inputs_prefetched for r in pipeline.run_group(sdpa, inputs=cache)] == [True, True]
    assert not _prefetch(cache, sdpa)  # kept already
    assert built == [(0, "MainThread"), (1, "prefetch-dense1")]


def test_a_group_prefetches_the_group_it_is_told_comes_next_once_it_holds_its_own_inputs(monkeypatch):
    """``run_group(cells, then)`` starts ``then``'s build only after taking its own inputs: a prefetch asked for
    earlier (of ``cells``) is taken, never replaced by ``then``'s, and ``then`` runs on what was built ahead."""
    cache = InputCache()
    built = _counting_builds(monkeypatch)
    a, b, c = (variants(group_id=g, seed=s) for g, s in (("a", 1), ("b", 2), ("c", 3)))
    assert _prefetch(cache, b)
    # b is being built meanwhile
    assert [r.inputs_prefetched for r in pipeline.run_group(a, then=b, inputs=cache)] == [False, False]
    assert [r.inputs_prefetched for r in pipeline.run_group(b, then=c, inputs=cache)] == [True, True]
    assert [r.inputs_prefetched for r in pipeline.run_group(c, inputs=cache)] == [True, True]
    assert sorted(built) == [(1, "MainThread"), (2, "prefetch-b"), (3, "prefetch-c")]  # each built once


def test_a_group_whose_inputs_fail_still_prefetches_the_next(monkeypatch):
    cache = InputCache()
    built = _counting_builds(monkeypatch)
    broken = variants(group_id="broken", method_params={"density": 2.0})  # the planted mask refuses it
    fine = variants(group_id="fine", seed=4)
    assert [r.status for r in pipeline.run_group(broken, then=fine, inputs=cache)] == ["failed", "failed"]
    results = pipeline.run_group(fine, inputs=cache)
    assert [(r.status, r.inputs_prefetched) for r in results] == [("done", True), ("done", True)]
    assert sorted(built) == [(0, "MainThread"), (4, "prefetch-fine")]


@pytest.mark.parametrize("prefetched", [False, True])
def test_a_failed_build_frees_what_it_had_allocated_without_waiting_for_the_cycle_collector(monkeypatch, prefetched):
    """A build that raises (e.g. out of memory half-way) must not leave its tensors alive through the exception's
    frames: on a GPU the worker's next group would then run out of memory too."""
    import gc
    import weakref

    cache = InputCache()
    allocated = []

    def failing_build(request):
        partial = torch.ones(1024)
        allocated.append(weakref.ref(partial))
        raise RuntimeError("out of memory, half-way through the build")

    monkeypatch.setattr(inputs, "build", failing_build)
    cells = variants(group_id="broken")
    gc.disable()
    try:
        if prefetched:
            assert _prefetch(cache, cells)
        results = pipeline.run_group(cells, inputs=cache)
        assert [r.status for r in results] == ["failed", "failed"] and "half-way" in results[0].error
        assert ("_build_ahead" in results[0].traceback) == prefetched  # the lines survive, the locals do not
        assert allocated and allocated[0]() is None
    finally:
        gc.enable()


def test_prefetched_inputs_give_the_results_built_inputs_give():
    cache = InputCache()
    cells = variants(group_id="g", seed=3)
    built = pipeline.run_group(cells, inputs=cache)
    cache.forget()
    assert _prefetch(cache, cells)
    prefetched = pipeline.run_group(cells, inputs=cache)
    assert [r.inputs_prefetched for r in (*built, *prefetched)] == [False, False, True, True]
    for a, b in zip(built, prefetched, strict=True):
        for name in ("status", "density", "nnz_mean", "nnz_cv", "adjacent_jaccard", "wave_working_set_bytes",
                     "reordered_wave_working_set_bytes", "stages_applied", "skip_reason"):
            assert getattr(a, name) == getattr(b, name), name


def test_a_prefetch_that_fails_fails_its_group_with_the_error_and_the_worker_goes_on(monkeypatch):
    cache = InputCache()
    built = _counting_builds(monkeypatch)
    broken = variants(group_id="broken", method_params={"density": 2.0})  # the planted mask refuses it
    assert _prefetch(cache, broken)
    failed = pipeline.run_group(broken, inputs=cache)
    assert [r.status for r in failed] == ["failed", "failed"]
    assert all("density" in r.error and "_build_ahead" in r.traceback for r in failed)  # raised in the prefetch
    assert built == [(0, "prefetch-broken")]  # not built again by the group
    fine = pipeline.run_group(variants(group_id="fine"), inputs=cache)
    assert [r.status for r in fine] == ["done", "done"]


def test_a_newer_prefetch_replaces_one_not_taken_so_one_set_waits_at_most(monkeypatch):
    cache = InputCache()
    built = _counting_builds(monkeypatch)
    a, b = variants(group_id="a", seed=1), variants(group_id="b", seed=2)
    assert _prefetch(cache, a) and _prefetch(cache, b)
    assert cache.prefetching == pipeline.input_request(b[0]).key
    assert [r.inputs_prefetched for r in pipeline.run_group(b, inputs=cache)] == [True, True]
    assert [r.inputs_prefetched for r in pipeline.run_group(a, inputs=cache)] == [False, False]  # a's set was dropped
    assert [seed for seed, _ in built] == [1, 2, 1]


@pytest.mark.gpu
def test_on_a_gpu_the_prefetch_builds_on_a_stream_of_its_own_the_inputs_a_plain_build_gives(monkeypatch):
    import torch

    cache = InputCache()
    cell = make_cell(hardware="h200", profile_hardware="h200", seq_len_tokens=4096, num_heads=4, head_dim=64,
                     wave_size=132, method="random", method_params={"density": 0.3})
    request = pipeline.input_request(cell)
    assert request.device.type == "cuda"
    mask, qkv = inputs.build(request)
    streams = []
    build = inputs.build
    monkeypatch.setattr(inputs, "build", lambda r: streams.append(torch.cuda.current_stream(r.device)) or build(r))
    assert _prefetch(cache, [cell])
    got_mask, got_qkv, _, prefetched = cache.take(request)
    assert prefetched and streams and streams[0] != torch.cuda.default_stream(request.device)
    assert torch.equal(got_mask, mask) and all(torch.equal(a, b) for a, b in zip(got_qkv, qkv, strict=True))
    result = pipeline.run_group([cell.replaced(group_id="again")], inputs=cache)[0]  # the kept inputs, GPU-timed
    assert result.status == "done" and result.inputs_prefetched and result.timer == "cuda_events", result.traceback


@pytest.mark.gpu
def test_on_a_gpu_an_ncu_cell_is_timed_then_profiled_by_nsight_compute_in_a_child_process():
    import shutil

    if shutil.which("ncu") is None:
        pytest.skip("needs Nsight Compute's ncu on PATH")
    cells = variants(backend="triton", measure="ncu", hardware="h200", profile_hardware="h200", seq_len_tokens=8192,
                     num_heads=2, head_dim=128, wave_size=132, method="random", method_params={"density": 0.3})
    results = pipeline.run_group(cells)
    for result in results:
        assert result.status == "done" and result.timer == "cuda_events", result.traceback
        assert result.ncu_unavailable is None and result.ncu_kernel_ms > 0 and 0 <= result.ncu_l2_hit_pct <= 100


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_random_qkv_is_drawn_on_the_cells_device_in_its_dtype_and_fixed_by_the_seed(device):
    """Q/K/V for the Q/K-free masks are drawn where the cell runs (bf16 on a GPU: no 560M-number host draw and
    copy at 364K tokens), and a seed gives the same tensors again on that device."""
    import torch

    cell = make_cell(seq_len_tokens=3000, num_heads=2, head_dim=64, method="random", method_params={"density": 0.3})
    first, again = (inputs.random_qkv(cell.inputs, torch.device(device)) for _ in range(2))
    other = inputs.random_qkv(cell.replaced(seed=cell.inputs.seed + 1).inputs, torch.device(device))
    want = torch.bfloat16 if device == "cuda" else torch.float32
    assert all(t.device.type == device and t.dtype == want and t.shape == (1, 2, 3000, 64) for t in first)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], first[1]) and not torch.equal(first[0], other[0])
