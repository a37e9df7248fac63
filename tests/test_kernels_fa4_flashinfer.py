"""The FA4 and FlashInfer backends: their block-sparse structures (CPU) and their output on the GPU."""

import inspect

import pytest
import torch
from gpu_inputs import attention_inputs, relative_error, run_poisoned

from wavealign import blockmask, kernels, launch_order
from wavealign.kernels import fa4, flashinfer
from wavealign.kernels.reference import reference_attention
from wavealign.kernels.sparse_formats import (
    KernelRequirement,
    LastBuilt,
    full_block_lists,
    paged_bsr,
    permute_block_lists,
    permute_paged_bsr,
    split_heads,
)
from wavealign.masks import synthetic


def _order(perm) -> launch_order.RowOrder:
    return launch_order.RowOrder.from_perm(torch.tensor(perm), wave_size=2, stages="both")


# ---- FA4 full-block lists ------------------------------------------------------------------------------

HAND_MASK = torch.tensor([[[0, 1, 0, 1],
                           [0, 0, 0, 0],
                           [1, 1, 1, 0]]], dtype=torch.bool)


def test_fa4_lists_count_each_rows_blocks_as_int32_with_a_batch_dim():
    lists = full_block_lists(HAND_MASK)
    assert lists.count.dtype == lists.index.dtype == torch.int32
    assert lists.count.tolist() == [[[2, 0, 3]]]
    assert lists.index.shape == (1, 1, 3, 3)  # cut to the longest row


def test_fa4_lists_name_each_rows_blocks_ascending_first():
    lists = full_block_lists(HAND_MASK)
    assert lists.index[0, 0, 0, :2].tolist() == [1, 3]
    assert lists.index[0, 0, 2, :3].tolist() == [0, 1, 2]


def test_fa4_lists_of_an_empty_mask_keep_one_column():
    lists = full_block_lists(torch.zeros(2, 3, 5, dtype=torch.bool))
    assert lists.count.sum() == 0 and lists.index.shape == (1, 2, 3, 1)


def test_fa4_lists_keep_the_batch_of_a_4d_mask():
    mask = synthetic.random_mask(2, 4, 5, 0.5, seed=1).reshape(1, 2, 4, 5).expand(3, 2, 4, 5)
    assert full_block_lists(mask).count.shape == (3, 2, 4)


def test_fa4_lists_are_ascending_in_every_row():
    lists = full_block_lists(synthetic.fixed_nnz_mask(3, 9, 11, 0.4, nnz_spread=0.5, seed=2))
    for count, index in zip(lists.count.flatten().tolist(), lists.index.reshape(-1, lists.index.shape[-1]),
                            strict=True):
        assert index[:count].tolist() == sorted(index[:count].tolist())


def test_permuted_fa4_lists_equal_the_lists_of_the_permuted_mask():
    mask = synthetic.fixed_nnz_mask(3, 10, 7, 0.35, nnz_spread=0.6, seed=3)
    order = launch_order.plan(mask, wave_size=4)
    permuted = permute_block_lists(full_block_lists(mask), order)
    expected = full_block_lists(launch_order.permute_mask(mask, order))
    assert torch.equal(permuted.count, expected.count)
    assert torch.equal(blockmask.from_kv_indices(permuted.count, permuted.index, 7),
                       blockmask.from_kv_indices(expected.count, expected.index, 7))


def test_permuting_fa4_lists_moves_whole_rows():
    permuted = permute_block_lists(full_block_lists(HAND_MASK), _order([[2, 0, 1]]))
    assert permuted.count.tolist() == [[[3, 2, 0]]]
    assert permuted.index[0, 0, 0].tolist() == [0, 1, 2]


def test_a_batched_order_gives_unbatched_lists_its_batch():
    mask = synthetic.random_mask(2, 5, 5, 0.5, seed=4)
    perm = torch.stack([torch.arange(5).expand(2, 5), torch.arange(4, -1, -1).expand(2, 5)])
    permuted = permute_block_lists(full_block_lists(mask), launch_order.RowOrder.from_perm(perm, 4, "both"))
    assert permuted.count.shape == (2, 2, 5)
    assert permuted.count[1, 0].tolist() == full_block_lists(mask).count[0, 0].flip(0).tolist()


def test_permuting_fa4_lists_by_an_order_of_another_shape_is_refused():
    with pytest.raises(ValueError, match="order has perm of shape"):
        permute_block_lists(full_block_lists(HAND_MASK), _order([[0, 1, 2, 3]]))


def test_fa4_launch_lists_are_laid_out_per_batch_element():
    lists = fa4.launch_lists(HAND_MASK, _order([[2, 0, 1]]), batch=2)
    assert lists.count.tolist() == [[[3, 2, 0]], [[3, 2, 0]]]
    assert lists.count.is_contiguous() and lists.index.is_contiguous()


# ---- FlashInfer paged BSR ------------------------------------------------------------------------------

# two heads, 2 query blocks of 4 tokens over q_len=7 (the last has 3), 3 K/V blocks over kv_len=10 (last: 2)
BSR_MASK = torch.tensor([[[1, 0, 1], [0, 0, 0]],
                         [[0, 1, 0], [1, 1, 1]]], dtype=torch.bool)


def test_paged_bsr_has_a_request_per_head_and_query_block():
    bsr = paged_bsr(BSR_MASK, block_size=4, q_len=7, kv_len=10)
    assert bsr.qo_indptr.tolist() == [0, 4, 7, 11, 14]
    assert bsr.kv_indptr.tolist() == [0, 2, 2, 3, 6]


def test_paged_bsr_pages_are_head_offset_kv_blocks_ascending():
    bsr = paged_bsr(BSR_MASK, block_size=4, q_len=7, kv_len=10)
    assert bsr.kv_indices.tolist() == [0, 2, 4, 3, 4, 5]


def test_paged_bsr_shortens_the_last_page_of_rows_that_select_the_ragged_block():
    bsr = paged_bsr(BSR_MASK, block_size=4, q_len=7, kv_len=10)
    assert bsr.kv_last_page_len.tolist() == [2, 4, 4, 2]


def test_paged_bsr_is_int32_throughout():
    bsr = paged_bsr(BSR_MASK, block_size=4, q_len=7, kv_len=10)
    assert {t.dtype for t in (bsr.qo_indptr, bsr.kv_indptr, bsr.kv_indices, bsr.kv_last_page_len)} == {torch.int32}


def test_paged_bsr_refuses_lengths_that_do_not_match_the_mask():
    with pytest.raises(ValueError, match="kv_len=13 with block_size=4 gives 4 blocks, but the mask has 3"):
        paged_bsr(BSR_MASK, block_size=4, q_len=7, kv_len=13)


def test_permuted_paged_bsr_moves_requests_with_their_lengths_and_pages():
    bsr = permute_paged_bsr(paged_bsr(BSR_MASK, 4, 7, 10), _order([[1, 0], [1, 0]]))
    assert bsr.qo_indptr.tolist() == [0, 3, 7, 10, 14]
    assert bsr.kv_indptr.tolist() == [0, 0, 2, 5, 6]
    assert bsr.kv_indices.tolist() == [0, 2, 3, 4, 5, 4]
    assert bsr.kv_last_page_len.tolist() == [4, 2, 2, 4]


def test_permuted_paged_bsr_equals_the_bsr_of_the_permuted_mask():
    mask = synthetic.fixed_nnz_mask(3, 8, 6, 0.4, nnz_spread=0.5, seed=5)
    order = launch_order.plan(mask, wave_size=3)
    permuted = permute_paged_bsr(paged_bsr(mask, 16, 128, 90), order)
    expected = paged_bsr(launch_order.permute_mask(mask, order), 16, 128, 90)
    for name in ("qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len"):
        assert torch.equal(getattr(permuted, name), getattr(expected, name)), name


def test_an_unbatched_order_permutes_every_batch_element_alike():
    mask = synthetic.random_mask(2, 4, 4, 0.5, seed=6)
    order = _order([[3, 2, 1, 0], [1, 0, 3, 2]])
    batched = permute_paged_bsr(paged_bsr(mask.expand(2, 2, 4, 4), 8, 32, 32), order)
    single = permute_paged_bsr(paged_bsr(mask, 8, 32, 32), order)
    half = len(single.kv_indices)
    assert torch.equal(batched.kv_indptr[:9], single.kv_indptr)
    assert torch.equal(batched.kv_indptr[8:] - batched.kv_indptr[8], single.kv_indptr)  # batch element 1 alike
    assert torch.equal(batched.kv_indices[:half], single.kv_indices)
    # batch element 1's pages are its own: one (H x NB) page block past element 0's, in the same order
    assert torch.equal(batched.kv_indices[half:] - 2 * 4, single.kv_indices)


def test_split_heads_gives_each_heads_own_bsr():
    mask = synthetic.fixed_nnz_mask(3, 5, 4, 0.5, nnz_spread=0.5, seed=7)
    order = launch_order.plan(mask, wave_size=2)
    parts = split_heads(permute_paged_bsr(paged_bsr(mask, 8, 37, 30), order))
    for g, part in enumerate(parts):
        alone = permute_paged_bsr(paged_bsr(mask[g:g + 1], 8, 37, 30),
                                  launch_order.RowOrder.from_perm(order.perm[g:g + 1], 2, "both"))
        for name in ("qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len"):
            assert torch.equal(getattr(part, name), getattr(alone, name)), (g, name)


def test_flashinfer_launches_one_structure_natively_and_one_per_head_sequentially():
    mask = BSR_MASK.unsqueeze(0)
    assert len(flashinfer.launch_structures(mask, None, 4, 7, 10, "native")) == 1
    assert len(flashinfer.launch_structures(mask, None, 4, 7, 10, "sequential")) == 2


def test_flashinfer_refuses_an_unknown_head_order():
    with pytest.raises(ValueError, match="head_order must be one of"):
        flashinfer.launch_structures(BSR_MASK, None, 4, 7, 10, "parallel")


# ---- plan once, run many -------------------------------------------------------------------------------

class _Counter:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return self.calls


def test_last_built_reuses_the_value_for_the_same_tensors_and_params():
    cache, build, mask = LastBuilt(), _Counter(), torch.zeros(3, dtype=torch.bool)
    assert cache.get((mask, None), (128,), build) == cache.get((mask, None), (128,), build) == 1


def test_last_built_rebuilds_after_an_in_place_edit():
    cache, build, mask = LastBuilt(), _Counter(), torch.zeros(3, dtype=torch.bool)
    cache.get((mask,), (), build)
    mask[0] = True
    assert cache.get((mask,), (), build) == 2


def test_last_built_rebuilds_for_an_equal_but_different_tensor_or_other_params():
    cache, build, mask = LastBuilt(), _Counter(), torch.zeros(3, dtype=torch.bool)
    cache.get((mask,), (128,), build)
    assert cache.get((mask.clone(),), (128,), build) == 2
    assert cache.get((mask,), (64,), build) == 3


def _failing_build():
    raise RuntimeError("no GPU")


def test_last_built_forgets_the_old_value_when_a_build_fails():
    cache, mask = LastBuilt(), torch.zeros(3, dtype=torch.bool)
    cache.get((mask,), (1,), lambda: "old")
    with pytest.raises(RuntimeError):
        cache.get((mask,), (2,), _failing_build)
    assert cache.get((mask,), (1,), lambda: "rebuilt") == "rebuilt"


# ---- availability and registration ----------------------------------------------------------------------

REQ = KernelRequirement(backend="x", distribution="pkg", version="1.0", min_capability=(9, 0), extra="x")


def test_a_requirement_names_a_missing_gpu():
    assert "no CUDA GPU" in REQ.problem(None, "1.0")


def test_a_requirement_names_a_too_old_gpu_and_what_it_needs():
    problem = REQ.problem((8, 6), "1.0", "NVIDIA A40")
    assert "NVIDIA A40 has compute capability 8.6" in problem and "9.0 or newer" in problem


def test_a_requirement_names_the_missing_package_and_its_extra():
    assert REQ.problem((9, 0), None) == "the package pkg==1.0 is not installed (pip install 'wavealign[x]')"


def test_a_requirement_names_a_wrong_package_version():
    assert "pkg 0.9 is installed, but this backend is written against pkg==1.0" in REQ.problem((9, 0), "0.9")


def test_a_requirement_is_met_by_the_right_gpu_and_version():
    assert REQ.problem((10, 0), "1.0") is None


def test_the_pins_are_the_versions_seen_working_on_the_h200():
    assert fa4.REQUIREMENT.distribution == "flash-attn-4" and fa4.FA4_VERSION == "4.0.0b36"
    assert flashinfer.REQUIREMENT.distribution == "flashinfer-python"
    assert flashinfer.FLASHINFER_VERSION == "0.7.2.post1"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error is for machines without CUDA")
@pytest.mark.parametrize("name", ["fa4", "flashinfer"])
def test_calling_a_vendor_backend_without_cuda_says_so(name):
    q = torch.zeros(1, 1, 64, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=f"backend '{name}' runs on a CUDA GPU; q/k/v are on cpu"):
        kernels.get(name)(q, q, q, torch.ones(1, 1, 1, dtype=torch.bool), block_size=64)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the registry on a machine without CUDA")
def test_vendor_backends_are_registered_but_unavailable_without_cuda():
    assert {"fa4", "flashinfer"} <= set(kernels.names())
    assert not {"fa4", "flashinfer"} & set(kernels.available())


def test_fa4_runs_on_hopper_and_blackwell_only():
    backend = kernels.get("fa4")
    assert [hw for hw in ("a40", "a100", "h100", "h200", "b200") if backend.supports(hw)] == ["h100", "h200", "b200"]


def test_flashinfer_runs_on_ampere_and_hopper():
    backend = kernels.get("flashinfer")
    assert [hw for hw in ("a40", "a100", "h100", "h200", "b200") if backend.supports(hw)] == [
        "a40", "a100", "h100", "h200"]


def test_fa4_walks_its_kv_list_in_reverse_and_flashinfer_forward():
    assert kernels.get("fa4").execution.kv_walk == "reverse"
    assert kernels.get("flashinfer").execution.kv_walk == "forward"


@pytest.mark.parametrize("name", ["fa4", "flashinfer"])
def test_the_parameters_a_sweep_may_set_are_the_backend_s_plan_options(name):
    backend = kernels.get(name)
    assert backend.name == name
    assert set(backend.params) <= set(inspect.signature(backend.plan).parameters)


# ---- GPU: against the reference ------------------------------------------------------------------------

# (batch, heads, seq_len, head_dim, block_size): ragged and whole last blocks, both head dims, 64 and 128 blocks
SHAPES = [(1, 2, 1000, 128, 128), (2, 3, 768, 64, 128), (1, 2, 700, 128, 64), (1, 1, 4096, 128, 128)]
VARIANTS = [("fa4", {}), ("flashinfer", {"head_order": "native"}), ("flashinfer", {"head_order": "sequential"})]
VARIANT_IDS = ["fa4", "flashinfer-native", "flashinfer-sequential"]


def _backend_or_skip(name, block_size=128):
    module = {"fa4": fa4, "flashinfer": flashinfer}[name]
    problem = module.REQUIREMENT.problem_here()
    if problem is not None:
        pytest.skip(f"{name}: {problem}")
    if name == "fa4" and torch.cuda.get_device_capability()[0] >= 10 and block_size % 256:
        pytest.skip("FA4 on Blackwell runs two 128-row Q tiles per CTA: block_size must be a multiple of 256")
    return kernels.get(name)


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_vendor_backend_matches_reference_in_bf16(name, params, shape):
    backend = _backend_or_skip(name, shape[-1])
    q, k, v, mask = attention_inputs(*shape, seed=sum(shape) % 1000)
    out = run_poisoned(backend, q, k, v, mask, block_size=shape[-1], **params)
    ref = reference_attention(q.float(), k.float(), v.float(), mask, block_size=shape[-1])
    assert out.shape == q.shape and out.dtype == q.dtype
    assert torch.isfinite(out).all()
    assert relative_error(out, ref) <= 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=VARIANT_IDS)
def test_vendor_backend_gives_zeros_for_empty_rows(name, params):
    backend = _backend_or_skip(name)
    q, k, v, mask = attention_inputs(1, 2, 1000, 128, 128, seed=3)
    out = run_poisoned(backend, q, k, v, mask, **params)
    assert torch.count_nonzero(out[0, 0, 128:256]) == 0


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("shape", [(1, 3, 3000, 128, 128), (2, 2, 1000, 64, 64)], ids=lambda s: "x".join(map(str, s)))
def test_vendor_backend_row_order_leaves_output_bitwise_equal(name, params, shape):
    backend = _backend_or_skip(name, shape[-1])
    q, k, v, mask = attention_inputs(*shape, seed=7)
    order = launch_order.plan(mask, wave_size=8)
    plain = backend(q, k, v, mask, block_size=shape[-1], **params)
    permuted = run_poisoned(backend, q, k, v, mask, order=order, block_size=shape[-1], **params)
    assert torch.equal(plain, permuted)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["fa4", "flashinfer"])
def test_vendor_backend_takes_the_kv_index_form_of_the_mask(name):
    backend = _backend_or_skip(name)
    q, k, v, mask = attention_inputs(1, 2, 1000, 128, 128, seed=9)
    assert torch.equal(backend(q, k, v, mask), backend(q, k, v, blockmask.to_kv_indices(mask)))


@pytest.mark.gpu
def test_flashinfer_head_orders_agree():
    backend = _backend_or_skip("flashinfer")
    q, k, v, mask = attention_inputs(2, 3, 1500, 128, 128, seed=11)
    order = launch_order.plan(mask, wave_size=4)
    native = backend(q, k, v, mask, order=order, head_order="native")
    sequential = backend(q, k, v, mask, order=order, head_order="sequential")
    # split-KV chunking depends on how many requests one launch holds, so the sums may round differently
    assert relative_error(sequential, native.float()) <= 1e-2


@pytest.mark.gpu
def test_flashinfer_plan_runs_again_with_new_inputs_of_the_same_shape():
    _backend_or_skip("flashinfer")
    q, k, v, mask = attention_inputs(1, 2, 1000, 128, 128, seed=13)
    launch = flashinfer.plan(mask, None, kernels.LaunchShape.of(q, k, block_size=128))
    q2, k2, v2 = (torch.randn_like(t) for t in (q, k, v))
    ref = reference_attention(q2.float(), k2.float(), v2.float(), mask, block_size=128)
    assert relative_error(launch.run(q2, k2, v2), ref) <= 1e-2
