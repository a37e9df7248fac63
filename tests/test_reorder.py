"""The reorder contract: permutations, stage properties, exactness, degenerate inputs and errors."""

import math
from pathlib import Path

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from wavealign import blockmask, kernels, launch_order, skip
from wavealign.masks import synthetic
from wavealign.reorderers.wavealign import stage1


@st.composite
def masks(draw, max_heads=3, max_blocks=40):
    heads = draw(st.integers(1, max_heads))
    mb = draw(st.integers(1, max_blocks))
    nb = draw(st.integers(1, max_blocks))
    density = draw(st.floats(0.0, 1.0))
    seed = draw(st.integers(0, 2**16))
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(heads, mb, nb, generator=gen) < density


@settings(max_examples=60, deadline=None)
@given(mask=masks(), stages=st.sampled_from(launch_order.STAGES), wave=st.integers(1, 16))
def test_perm_is_a_permutation_per_head_and_inverse_inverts_it(mask, stages, wave):
    order = launch_order.plan(mask, wave_size=wave, stages=stages)
    mb = mask.shape[1]
    assert order.perm.shape == order.inverse.shape == mask.shape[:2]
    assert order.perm.dtype == torch.int64
    assert torch.equal(order.perm.sort(-1).values, torch.arange(mb).expand_as(order.perm))
    assert torch.equal(torch.gather(order.perm, -1, order.inverse), torch.arange(mb).expand_as(order.perm))


@settings(max_examples=60, deadline=None)
@given(mask=masks(), stages=st.sampled_from(["temporal", "both"]), wave=st.integers(1, 16))
def test_nnz_is_non_increasing_within_each_wave_bucket(mask, stages, wave):
    order = launch_order.plan(mask, wave_size=wave, stages=stages)
    nnz = torch.gather(mask.sum(-1), 1, order.perm)
    for start in range(0, mask.shape[1], wave):
        bucket = nnz[:, start:start + wave]
        assert (bucket[:, 1:] <= bucket[:, :-1]).all()


@settings(max_examples=40, deadline=None)
@given(mask=masks(max_blocks=12), block=st.sampled_from([1, 4, 8]), ragged=st.integers(0, 7),
       stages=st.sampled_from(launch_order.STAGES))
def test_permute_rows_then_restore_rows_is_the_identity(mask, block, ragged, stages):
    heads, mb, _ = mask.shape
    n = max(1, mb * block - min(ragged, block - 1))  # a ragged last block when ragged > 0
    order = launch_order.plan(mask, wave_size=3, stages=stages)
    q = torch.randn(2, heads, n, 5)
    permuted = launch_order.permute_rows(q, order, block)
    assert permuted.shape[2] == mb * block  # whole blocks: a ragged one is padded where it lands
    assert torch.equal(launch_order.restore_rows(permuted, order, block, seq_len=n), q)
    first_slot = int(order.perm[0, 0])
    assert torch.equal(permuted[:, 0, :1], q[:, 0, first_slot * block:first_slot * block + 1])


@pytest.mark.parametrize("seq_len", [300, 384, 257])
def test_readme_recipe_is_exact_when_the_sequence_is_not_a_multiple_of_the_block(seq_len):
    # issue 39 item 1: a short last block kept short shifted every later block, so a kernel cutting Q into fixed
    # 128-row blocks mixed two blocks' rows (max error 0.44 at 300 tokens)
    gen = torch.Generator().manual_seed(0)
    mb = -(-seq_len // 128)
    mask = torch.rand(2, mb, mb, generator=gen) < 0.6
    mask[..., 0] = True  # every row keeps a block, so every output row is defined
    q, k, v = (torch.randn(1, 2, seq_len, 16, generator=gen) for _ in range(3))
    order = launch_order.RowOrder.from_perm(torch.stack([torch.arange(mb).flip(0), torch.arange(mb).roll(1)]),
                                       wave_size=2, stages="spatial")
    ref = kernels.get("reference")
    qp = launch_order.permute_rows(q, order, block_size=128)
    op = ref(qp, k, v, launch_order.permute_mask(mask, order), block_size=128)
    out = launch_order.restore_rows(op, order, block_size=128, seq_len=seq_len)
    assert torch.equal(out, ref(q, k, v, mask, block_size=128))


def test_a_hand_built_order_that_is_no_permutation_is_refused_by_every_launch():
    # issue 39 item 7: an all-zero perm ran block 0 in every slot and left 512 of 768 output rows zero
    zeros = torch.zeros(2, 6, dtype=torch.long)
    forged = launch_order.RowOrder(perm=zeros, inverse=zeros, wave_size=2, stages="spatial")
    mask = torch.ones(2, 6, 6, dtype=torch.bool)
    q = torch.randn(1, 2, 6 * 8, 16)
    with pytest.raises(ValueError, match="permutation"):
        kernels.get("reference").plan(mask, forged, kernels.LaunchShape.of(q, q, block_size=8))
    with pytest.raises(ValueError, match="permutation"):
        launch_order.permute_rows(q, forged, block_size=8)


def test_a_hand_built_order_with_a_wrong_inverse_is_refused():
    perm = torch.arange(6).flip(0).expand(2, 6).contiguous()
    forged = launch_order.RowOrder(perm=perm, inverse=perm.roll(1, -1), wave_size=2, stages="spatial")
    with pytest.raises(ValueError, match="inverse"):
        launch_order.permute_rows(torch.randn(1, 2, 48, 4), forged, block_size=8)


def test_an_identity_order_larger_than_memory_is_refused_before_allocating():
    with pytest.raises(ValueError, match=r"RowOrder.identity.*GiB"):
        launch_order.RowOrder.identity(10**6, 10**6)


@settings(max_examples=15, deadline=None)
@given(mask=masks(max_heads=2, max_blocks=10), stages=st.sampled_from(launch_order.STAGES),
       seed=st.integers(0, 1000))
def test_reference_output_with_reorder_equals_it_without_bitwise(mask, stages, seed):
    heads, mb, nb = mask.shape
    block = 8
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, mb * block, 16, generator=gen)
    k, v = (torch.randn(1, heads, nb * block, 16, generator=gen) for _ in range(2))
    ref = kernels.get("reference")
    order = launch_order.plan(mask, wave_size=4, stages=stages)
    plain = ref(q, k, v, mask, block_size=block)
    gathered = launch_order.restore_rows(
        ref(launch_order.permute_rows(q, order, block), k, v, launch_order.permute_mask(mask, order), block_size=block),
        order, block)
    in_kernel = ref(q, k, v, mask, order=order, block_size=block)
    assert torch.equal(plain, gathered)
    assert torch.equal(plain, in_kernel)


def test_stage1_groups_rows_of_planted_prototypes():
    mask = synthetic.planted_mask(3, 400, 400, density=0.2, prototypes=5, seed=3)
    # the mean K/V working set of a wave in each launch order (skip's own measure of it)
    shuffled, spatial = (skip.wave_working_set_bytes(launch_order.permute_mask(mask, order), order.wave_size)
                         for order in (launch_order.plan(mask, wave_size=64, stages=st) for st in ("none", "spatial")))
    assert spatial < 0.6 * shuffled


def _subspace_angle_deg(a: torch.Tensor, b: torch.Tensor) -> float:
    qa, qb = torch.linalg.qr(a)[0], torch.linalg.qr(b)[0]
    cosines = torch.linalg.svdvals(qa.T @ qb)
    return math.degrees(math.acos(float(cosines.min().clamp(-1, 1))))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_subspace_iteration_matches_dense_svd_of_centered_mask(seed):
    # three prototypes: the centered mask is near rank 2, so T = 10 iterations converge
    mask = synthetic.planted_mask(1, 120, 90, density=0.3, prototypes=3, noise=0.05, seed=seed)
    centered = mask[0].double() - mask[0].double().mean(0, keepdim=True)
    svd = torch.linalg.svd(centered, full_matrices=False)
    u, sigma = stage1.centered_top2(mask, iters=10, seed=seed)
    assert _subspace_angle_deg(u[0].double(), svd.U[:, :2]) < 1.0
    assert torch.allclose(sigma[0].double(), svd.S[:2], rtol=1e-3)


def test_same_seed_gives_the_same_order_and_another_seed_still_a_valid_one():
    mask = synthetic.random_mask(4, 300, 300, 0.2, seed=5)
    a, b = launch_order.plan(mask, seed=7), launch_order.plan(mask, seed=7)
    assert torch.equal(a.perm, b.perm)
    c = launch_order.plan(mask, seed=8)
    assert torch.equal(c.perm.sort(-1).values, a.perm.sort(-1).values)


@pytest.mark.parametrize("make", [
    lambda: torch.zeros(2, 20, 30, dtype=torch.bool),                       # every row empty
    lambda: torch.ones(2, 20, 30, dtype=torch.bool),                        # every row full
    lambda: (torch.rand(1, 1, 30) < 0.4).expand(2, 20, 30).contiguous(),     # identical rows
    lambda: torch.stack([torch.arange(30) < (10 if i % 2 else 20) for i in range(20)]).unsqueeze(0),  # rank 1
    lambda: torch.rand(3, 1, 7) < 0.5,                                       # MB = 1
    lambda: torch.rand(3, 2, 7) < 0.5,                                       # MB = 2
])
def test_degenerate_masks_fall_back_to_the_original_order_in_stage1(make):
    mask = make()
    order = launch_order.plan(mask, stages="spatial")
    assert torch.equal(order.perm, torch.arange(mask.shape[1]).expand(mask.shape[0], -1))


def test_mask_smaller_than_a_wave_is_one_bucket_sorted_by_nnz():
    mask = synthetic.fixed_nnz_mask(2, 50, 60, 0.3, nnz_spread=0.9, seed=1)
    order = launch_order.plan(mask, wave_size=132, stages="both")
    nnz = torch.gather(mask.sum(-1), 1, order.perm)
    assert (nnz[:, 1:] <= nnz[:, :-1]).all()


def test_kv_index_form_gives_the_same_order_as_the_dense_mask():
    mask = synthetic.planted_mask(3, 100, 80, seed=2)
    assert torch.equal(launch_order.plan(blockmask.to_kv_indices(mask)).perm, launch_order.plan(mask).perm)


def test_batched_mask_plans_each_batch_and_head():
    mask = torch.stack([synthetic.planted_mask(2, 60, 60, seed=s) for s in (1, 2)])
    order = launch_order.plan(mask, wave_size=16)
    assert order.perm.shape == (2, 2, 60)
    assert torch.equal(order.perm[1], launch_order.plan(mask[1], wave_size=16).perm)
    assert launch_order.plan(mask[:1], wave_size=16).perm.shape == (2, 60)
    assert torch.equal(launch_order.permute_mask(mask, order)[1], launch_order.permute_mask(
        mask[1], launch_order.plan(mask[1], wave_size=16)))


@pytest.mark.parametrize(("call", "message"), [
    (lambda m: launch_order.plan(m.int()), "dtype torch.bool"),
    (lambda m: launch_order.plan(m[0]), r"\(H, MB, NB\)"),
    (lambda m: launch_order.plan(m[:, :0]), "must not be empty"),
    (lambda m: launch_order.plan(m, stages="all"), "stages must be one of"),
    (lambda m: launch_order.plan(m, wave_size=0), "wave_size must be >= 1"),
    (lambda m: launch_order.plan(m, iters=0), "iters must be >= 1"),
    (lambda m: launch_order.plan((m.sum(-1),)), r"\(kv_num_blocks, kv_indices\)"),
    (lambda m: launch_order.permute_rows(torch.randn(1, 2, 100, 8), launch_order.plan(m), 16), "MB=10"),
    (lambda m: launch_order.permute_rows(torch.randn(1, 3, 160, 8), launch_order.plan(m), 16), "H=3 heads"),
    (lambda m: launch_order.permute_rows(torch.randn(2, 160, 8), launch_order.plan(m), 16), r"\(B, H, N, D\)"),
    (lambda m: launch_order.permute_rows(torch.randn(1, 2, 0, 8), launch_order.plan(m), 16), "must not be empty"),
    (lambda m: launch_order.restore_rows(torch.randn(1, 2, 160, 8), launch_order.plan(m), 0), "block_size must be"),
    (lambda m: launch_order.permute_mask(m[:, :5], launch_order.plan(m)), r"\(H, MB\)"),
    (lambda m: launch_order.permute_mask(m, launch_order.plan(torch.stack([m, m]))), "order is batched with B=2"),
    (lambda m: kernels.get("reference")(*(torch.randn(1, 2, 170, 8),) * 3, m, block_size=16), "mask has shape"),
    (lambda m: kernels.get("reference")(torch.randn(1, 2, 160, 8), torch.randn(1, 2, 160, 4),
                                        torch.randn(1, 2, 160, 4), m, block_size=16), "must share B, H"),
    (lambda m: kernels.get("nope"), "unknown backend 'nope'"),
])
def test_bad_input_raises_a_value_error_naming_it(call, message):
    mask = synthetic.random_mask(2, 10, 10, 0.3)
    with pytest.raises(ValueError, match=message):
        call(mask)


def test_permute_mask_keeps_the_kv_index_form_and_agrees_with_the_dense_form():
    mask = synthetic.random_mask(3, 9, 7, 0.4, seed=4)
    order = launch_order.plan(mask, wave_size=4)
    kv_num, kv_idx = launch_order.permute_mask(blockmask.to_kv_indices(mask), order)
    assert torch.equal(blockmask.as_dense((kv_num, kv_idx)), launch_order.permute_mask(mask, order))


def test_permute_mask_refuses_kv_lists_of_other_rows():
    mask = synthetic.random_mask(3, 9, 7, 0.4, seed=4)
    kv = blockmask.to_kv_indices(mask[:, :5])
    with pytest.raises(ValueError, match=r"\(H, MB\)"):
        launch_order.permute_mask(kv, launch_order.plan(mask))


def test_the_gpu_paths_closed_form_2x2_eigenproblem_matches_torch():
    """``stage1_cuda._eigh2`` (the Rayleigh-Ritz step of the GPU Stage 1) against ``torch.linalg.eigh``."""
    from wavealign.reorderers.wavealign import stage1_cuda

    a = torch.randn(64, 2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    sym = a @ a.transpose(1, 2)
    values, vectors = stage1_cuda._eigh2(sym)
    ref_values, ref_vectors = torch.linalg.eigh(sym)
    assert torch.allclose(values, ref_values.flip(-1), atol=1e-12)
    # eigenvectors agree up to sign, column by column
    cos = (vectors * ref_vectors.flip(-1)).sum(1).abs()
    assert torch.allclose(cos, torch.ones_like(cos), atol=1e-12)


def test_packed_rows_are_padded_to_whole_16_word_chunks():
    from wavealign.reorderers.wavealign import stage1_cuda

    assert [stage1_cuda.padded_words(bits) for bits in (1, 31, 32, 512, 513, 2841)] == [16, 16, 16, 16, 32, 96]


def test_the_reference_kernel_takes_an_order_or_its_permutation_alike():
    mask = synthetic.random_mask(2, 4, 4, 0.5, seed=3)
    q, k, v = (torch.randn(1, 2, 64, 16) for _ in range(3))
    order = launch_order.plan(mask, wave_size=2)
    attend = kernels.get("reference")
    assert torch.equal(attend(q, k, v, mask, order, block_size=16), attend(q, k, v, mask, order.perm, block_size=16))


def test_the_readme_recipe_runs_as_written_and_is_bitwise_exact():
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    section = readme.split("## Use the reorder in your own pipeline", 1)[1]
    snippet = section.split("```python", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(snippet, scope)  # the README's own code, as a user pastes it
    q, k, v, mask = (scope[name] for name in ("q", "k", "v", "mask"))
    assert q.shape[2] % 128  # the recipe shows a ragged length
    assert torch.equal(scope["out"], kernels.get("reference")(q, k, v, mask, block_size=128))
