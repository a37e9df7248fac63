"""GPU backends against the reference, the in-kernel/out-of-kernel row order, and the GPU reorder plan."""

import pytest
import torch
from gpu_inputs import attention_inputs, relative_error, run_poisoned

from wavealign import blockmask, kernels, launch_order, nvrtc
from wavealign.kernels.reference import reference_attention
from wavealign.launch_order import plan_graphs
from wavealign.masks import synthetic
from wavealign.reorderers.wavealign import stage1, stage1_cuda

pytestmark = pytest.mark.gpu

FAST_BACKENDS = ["triton", "triton-static", "flex"]
# (batch, heads, seq_len, head_dim, block_size): ragged and whole last blocks, both head dims
SHAPES = [(1, 2, 1000, 128, 128), (2, 3, 768, 64, 128), (1, 2, 700, 128, 64), (1, 1, 4096, 128, 128)]


@pytest.mark.parametrize("name", FAST_BACKENDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_backend_matches_reference_in_bf16(name, shape):
    if name == "flex" and shape[-1] != 128:
        pytest.skip("the flex baseline runs 128x128 mask blocks only")
    q, k, v, mask = attention_inputs(*shape, seed=hash(shape) % 1000)
    block_size = shape[-1]
    out = run_poisoned(kernels.get(name), q, k, v, mask, block_size=block_size)
    ref = reference_attention(q.float(), k.float(), v.float(), mask, block_size=block_size)
    assert torch.isfinite(out).all()
    assert relative_error(out, ref) <= 1e-2


@pytest.mark.parametrize("name", FAST_BACKENDS)
def test_empty_rows_give_zeros(name):
    q, k, v, mask = attention_inputs(1, 2, 1000, 128, 128, seed=3)
    out = run_poisoned(kernels.get(name), q, k, v, mask)
    assert torch.count_nonzero(out[0, 0, 128:256]) == 0


@pytest.mark.parametrize("name", FAST_BACKENDS)
@pytest.mark.parametrize("stages", ["both", "spatial"])
def test_row_order_leaves_output_bitwise_equal(name, stages):
    q, k, v, mask = attention_inputs(1, 3, 3000, 128, 128, seed=7)
    order = launch_order.plan(mask, wave_size=8, stages=stages)
    backend = kernels.get(name)
    plain = backend(q, k, v, mask)
    permuted = run_poisoned(backend, q, k, v, mask, order=order)
    assert torch.equal(plain, permuted)


@pytest.mark.parametrize("reorderer", ["balanced", "rounds", "longest-first"])
def test_triton_static_is_bitwise_the_streaming_kernel_in_the_scheduler_aware_orders(reorderer):
    q, k, v, mask = attention_inputs(1, 3, 3000, 128, 128, seed=11)
    order = launch_order.plan(mask, wave_size=132, stages="spatial", reorderer=reorderer)
    plain = kernels.get("triton")(q, k, v, mask)
    assert torch.equal(plain, run_poisoned(kernels.get("triton-static"), q, k, v, mask, order=order))


def test_triton_head_orders_give_the_same_output():
    q, k, v, mask = attention_inputs(2, 3, 1500, 64, 128, seed=11)
    order = launch_order.plan(mask, wave_size=4)
    run = kernels.get("triton")
    assert torch.equal(run(q, k, v, mask, order=order, head_order="parallel"),
                       run(q, k, v, mask, order=order, head_order="sequential"))


def test_triton_pointer_and_tma_loads_agree():
    q, k, v, mask = attention_inputs(1, 2, 1000, 128, 128, seed=13)
    run = kernels.get("triton")
    assert torch.equal(run(q, k, v, mask, use_tma=False), run(q, k, v, mask, use_tma=True))


def test_triton_reads_the_kv_index_form():
    q, k, v, mask = attention_inputs(1, 2, 900, 128, 128, seed=17)
    run = kernels.get("triton")
    assert torch.equal(run(q, k, v, blockmask.to_kv_indices(mask)), run(q, k, v, mask))


def _wave_union(mask, perm, wave_size):
    rows = torch.gather(mask, 1, perm.unsqueeze(-1).expand_as(mask))
    waves = rows.split(wave_size, dim=1)
    return float(sum(w.any(1).sum() for w in waves)) / len(waves)


@pytest.mark.parametrize("stages", ["spatial", "both"])
def test_gpu_plan_agrees_with_cpu_plan(stages):
    mask = synthetic.planted_mask(4, 600, 600, 0.25, seed=5)
    cpu = launch_order.plan(mask, wave_size=64, stages=stages)
    gpu = launch_order.plan(mask.cuda(), wave_size=64, stages=stages)
    perm = gpu.perm.cpu()
    assert torch.equal(perm.sort(-1).values, torch.arange(600).expand(4, 600))
    # float32 rounding may swap rows at equal angles; the waves they form must be as tight
    assert _wave_union(mask, perm, 64) <= 1.02 * _wave_union(mask, cpu.perm, 64)


@pytest.mark.parametrize("kind", ["planted", "random"])
def test_packed_plan_keeps_the_torch_paths_orders(kind, monkeypatch):
    """The packed int8 path's launch orders are those of the float32 torch path, on the GPU and on the CPU, up
    to rows swapped at equal angles (a rounding of 1e-7 decides between them)."""
    mask = getattr(synthetic, f"{kind}_mask")(8, 1000, 1000, 0.25, seed=7)
    packed = launch_order.plan(mask.cuda()).perm.cpu()
    cpu = launch_order.plan(mask).perm
    monkeypatch.setattr(nvrtc, "usable", lambda m: False)
    torch_gpu = launch_order.plan(mask.cuda()).perm.cpu()
    for ref in (cpu, torch_gpu):
        assert (packed == ref).float().mean() >= 0.99
        assert _wave_union(mask, packed, 132) <= 1.005 * _wave_union(mask, ref, 132)


def test_gpu_row_nnz_equals_the_cpu_count():
    mask = synthetic.random_mask(3, 257, 3001, 0.4, seed=2)
    assert torch.equal(blockmask.row_nnz(mask.cuda()).cpu().long(), mask.sum(-1))


def test_gpu_temporal_plan_equals_cpu_plan():
    mask = synthetic.fixed_nnz_mask(4, 500, 500, 0.3, nnz_spread=0.8, seed=9)
    assert torch.equal(launch_order.plan(mask.cuda(), wave_size=64, stages="temporal").perm.cpu(),
                       launch_order.plan(mask, wave_size=64, stages="temporal").perm)


def test_gpu_stage1_finds_the_cpu_subspace():
    mask = synthetic.planted_mask(3, 500, 450, 0.3, seed=21)
    u_cpu, s_cpu = stage1.centered_top2(mask)
    u_gpu, s_gpu = stage1.centered_top2(mask.cuda())
    cosines = torch.linalg.svdvals(torch.bmm(u_cpu.double().transpose(1, 2), u_gpu.cpu().double()))
    assert cosines.min() > 1 - 1e-5
    assert torch.allclose(s_gpu.cpu(), s_cpu, rtol=1e-4)


@pytest.mark.parametrize(("heads", "mb", "nb"), [(2, 70, 50), (2, 45, 90), (3, 33, 65), (1, 17, 31), (0, 40, 300)],
                         ids=["tall", "wide", "ragged_words", "one_head_under_a_word", "more_heads_than_sms"])
def test_packed_products_match_the_torch_path_on_ragged_shapes(heads, mb, nb):
    """The persistent product kernel on shapes whose rows end inside a word and inside a 16-row tile, with one head,
    and with more heads than blocks in its grid (heads=0 here: the GPU's SM count + 8): the subspace and the
    singular values of the float32 torch path."""
    heads = heads or torch.cuda.get_device_properties(0).multi_processor_count + 8
    mask = synthetic.planted_mask(heads, mb, nb, 0.3, prototypes=3, noise=0.05, seed=mb)
    u_ref, s_ref = stage1.centered_top2(mask)
    u, s = stage1_cuda.centered_top2(mask.cuda(), 10, 0, True)
    cosines = torch.linalg.svdvals(torch.bmm(u_ref.double().transpose(1, 2), u.cpu().double()))
    assert cosines.min() > 1 - 1e-5
    assert torch.allclose(s.cpu(), s_ref, rtol=1e-4)


def _unpacked(words: torch.Tensor) -> torch.Tensor:
    """The bool columns of packed words (..., W): column 4m + i of a word sits at bit 8i + m (stage1.cu)."""
    bit_of_column = torch.tensor([8 * (c % 4) + c // 4 for c in range(32)], device=words.device)
    return ((words.unsqueeze(-1) >> bit_of_column) & 1).flatten(-2).bool()


@pytest.mark.parametrize(("mb", "nb"), [(70, 50), (45, 90), (33, 65), (600, 513)])
def test_pack_holds_every_bit_zero_padding_and_the_column_sums(mb, nb):
    mask = synthetic.random_mask(3, mb, nb, 0.3, seed=mb, device="cuda")
    packed, packed_t, col_sums = stage1_cuda.pack(mask)
    assert torch.equal(col_sums, mask.sum(1).float())
    assert packed.shape[-1] == stage1_cuda.padded_words(nb) and packed_t.shape[-1] == stage1_cuda.padded_words(mb)
    assert torch.equal(_unpacked(packed)[..., :nb], mask) and not _unpacked(packed)[..., nb:].any()
    assert torch.equal(_unpacked(packed_t)[..., :mb], mask.transpose(1, 2)) and not _unpacked(packed_t)[..., mb:].any()


def test_pack_and_row_counts_read_a_view_that_starts_and_ends_mid_vector():
    """A view's bytes start at any address and may end at its allocation's last byte: 16-byte loads must not read
    past either end, nor count the neighbours' bytes."""
    full = synthetic.random_mask(4, 33, 65, 0.5, seed=3, device="cuda")
    view = full[1:3]  # starts 2145 bytes in, ends 2145 bytes before the allocation's end
    assert view.data_ptr() % 16 != 0
    packed, _, _ = stage1_cuda.pack(view)
    assert torch.equal(_unpacked(packed)[..., :65], view)
    assert torch.equal(blockmask.row_nnz(view).long(), view.sum(-1))
    assert torch.equal(blockmask.row_nnz(full[3:]).long(), full[3:].sum(-1))


def test_packed_plan_is_the_same_on_every_run():
    """Every reduction of the product kernel runs in a fixed order: two plans of one mask are equal."""
    mask = synthetic.random_mask(40, 700, 700, 0.25, seed=4, device="cuda")
    assert torch.equal(launch_order.plan(mask).perm, launch_order.plan(mask).perm)


@pytest.mark.parametrize("stages", ["both", "temporal"])
def test_graphed_plan_equals_the_launched_one_for_each_mask(stages, monkeypatch):
    """A CUDA plan replays one captured graph per shape: each mask through it gets its own order, the order the
    launches give without the graph."""
    masks = [synthetic.planted_mask(8, 500, 500, 0.25, seed=s).cuda() for s in (1, 2)]
    graphed = [launch_order.plan(m, stages=stages).perm for m in (*masks, masks[0])]
    monkeypatch.setattr(plan_graphs, "replay", lambda mask, key, plan: plan(mask))
    launched = [launch_order.plan(m, stages=stages).perm for m in masks]
    assert not torch.equal(launched[0], launched[1])
    for got, want in zip(graphed, (*launched, launched[0]), strict=True):
        assert torch.equal(got, want)


def test_a_plan_first_captured_under_inference_mode_also_plans_outside_it():
    """A diffusers pipeline runs under torch.inference_mode, so the first plan of a shape may capture its graph
    there; the graph's mask buffer must still take a later mask planned outside it (an inference tensor would not)."""
    mask = synthetic.planted_mask(4, 300, 300, 0.25, seed=3).cuda()
    with torch.inference_mode():
        inside = launch_order.plan(mask).perm
    outside = launch_order.plan(mask).perm
    assert torch.equal(inside, outside) and not outside.is_inference()


def test_a_plan_is_captured_while_another_thread_works_on_the_gpu():
    """A sweep worker builds its next group's inputs on a side stream in a thread while it plans (and so captures)
    the current one: the capture must not fail on the other thread's allocations and launches, nor they on it.
    The thread draws from its own generator, as the input builders do: torch's default CUDA generator belongs to
    any capture under way, and a draw from it on another thread fails."""
    import threading

    stop, started = threading.Event(), threading.Event()
    draws: list[int] = []
    errors: list[BaseException] = []

    def busy() -> None:
        try:
            gen = torch.Generator(device="cuda").manual_seed(0)
            with torch.cuda.stream(torch.cuda.Stream()):
                while not stop.is_set():
                    torch.randn(1 << 20, device="cuda", generator=gen).sum()
                    draws.append(1)
                    started.set()
        except BaseException as exc:  # re-raised by the test below
            errors.append(exc)
            started.set()

    mask = synthetic.planted_mask(4, 333, 333, 0.25, seed=8).cuda()  # a shape no other test plans
    worker = threading.Thread(target=busy)
    worker.start()
    try:
        assert started.wait(60)
        before = len(draws)
        graphed = launch_order.plan(mask).perm
        during = len(draws) - before
    finally:
        stop.set()
        worker.join()
    assert not errors, f"the other thread failed: {errors[0]!r}"
    assert during > 0  # it was drawing while the plan was captured
    launched = launch_order.temporal_order(blockmask.row_nnz(mask), stage1.spatial_order(mask), 132)  # no graph
    assert torch.equal(graphed, launched)  # an empty or broken capture would give another order


def test_the_stage1_kernels_launch_from_a_thread_that_has_not_used_cuda_yet():
    """A Ray worker with two concurrent calls runs a group on a thread of its pool that may never have touched CUDA:
    the driver-API launches must make the context current themselves."""
    import threading

    mask = synthetic.random_mask(2, 100, 300, 0.3, seed=5, device="cuda")
    counts = []
    worker = threading.Thread(target=lambda: counts.append(blockmask.row_nnz(mask).long().cpu()))
    worker.start()
    worker.join()
    assert len(counts) == 1 and torch.equal(counts[0], mask.sum(-1).cpu())
