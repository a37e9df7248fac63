"""The mask methods' GPU kernels (``wavealign.masks._kernels``), run on the CPU by Triton's interpreter at small
shapes, against each method's torch reference.

The interpreter must be on before Triton compiles anything, and other tests of the run may have used Triton already,
so every case runs in one child process with ``TRITON_INTERPRET=1`` that reports them all at once. Inputs are
float32 (the interpreter's bfloat16 dot is wrong; the GPU tests cover bfloat16), with positional structure so that
the masks are sparse, and ties placed where a selection must break them in index order.
"""

import json

import pytest
from interpreted import run_interpreted

pytest.importorskip("triton")

CHILD = r"""
import json, math, torch
from wavealign import masks
from wavealign.masks import _kernels, flexprefill, spargeattn, xattention
from wavealign.masks._common import diagonal_mass, pool_blocks

def structured_qkv(heads, n, d, seed, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    pos = torch.linspace(0, 6.28, n)[:, None] * torch.arange(1, d // 2 + 1)[None] / 4
    rope = torch.cat([pos.sin(), pos.cos()], -1)  # nearby tokens alike: local attention, sparse masks
    q, k = (scale * rope + torch.randn(heads, n, d, generator=g) for _ in range(2))
    return q[None], k[None], torch.randn(1, heads, n, d, generator=g)

results = {}
q, k, v = structured_qkv(2, 1000, 32, seed=0)  # 16 blocks of 64, the last ragged; 125 groups of 8
for case, name, params in [
        ("xattention", "xattention", {"stride": 8}),
        ("xattention_stride4_diagonal", "xattention", {"stride": 4, "threshold": 0.6, "keep_diagonal": True}),
        ("spargeattn_tuned", "spargeattn", {}),
        ("spargeattn_fixed", "spargeattn", {"autotune": False, "simthreshd1": 0.3, "cdfthreshd": 0.7}),
        ("minference_searched", "minference", {}),
        ("minference_vertical_slash", "minference", {"search": False, "vertical_size": 64, "slash_size": 64,
                                                     "n_init": 8, "n_local": 16}),
        ("flexprefill", "flexprefill", {"min_budget": 64}),
        ("flexprefill_query_aware", "flexprefill", {"min_budget": 64, "tau": 1.0})]:
    fast = masks.build(name, q, k, v, block_size=64, **params)
    want = masks.get(name).build_reference(q, k, v, block_size=64, **params)
    results[case] = {"differing": int((fast != want).sum()), "density": float(want.float().mean()),
                     "shape": list(fast.shape)}

# the pieces, on their own
qh, kh = q[0], k[0]
got = _kernels.xattention_scores(qh[:, :997], kh[:, :997], 64, 8)  # 997 tokens: ragged groups and blocks
want = torch.stack([xattention.block_scores(qh[h, :997], kh[h, :997], 64, 8) for h in range(2)])
results["xattention_scores_max_abs_error"] = float((got - want).abs().max())
results["xattention_scores_row_sums"] = got.sum(-1).flatten().tolist()
pooled, sim = _kernels.block_stats(kh, 64, mean=kh.mean(1))
smoothed = kh - kh.mean(1, keepdim=True)
ref_pooled, ref_sim = zip(*(spargeattn._pool_and_similarity(smoothed[h], 64) for h in range(2)))
results["block_stats_max_abs_error"] = max(float((pooled - torch.stack(ref_pooled)).abs().max()),
                                           float((sim - torch.stack(ref_sim)).abs().max()))
probs = torch.softmax(torch.randn(2, 7, 50, generator=torch.Generator().manual_seed(1)), -1)
results["diagonal_mass_max_abs_error"] = float((_kernels.diagonal_mass(probs, 50)
                                                - torch.stack([diagonal_mass(p, 50) for p in probs])).abs().max())

# ties at the threshold: a stable sort takes them in index order, and so must the value cut-offs
tied = torch.tensor([[[0.1, 0.25, 0.25, 0.25, 0.25, 0.05, 0.0, 0.05]]])
results["xattention_ties"] = {
    "kernel": _kernels.select_by_mass(tied, 0.6, False, False)[0, 0].tolist(),
    "reference": xattention.select_blocks(tied[0], 0.6, False, False)[0].tolist()}
probs_tied = tied / tied.sum(-1, keepdim=True)
ones = torch.ones(1, 1)
results["spargeattn_ties"] = {
    "kernel": _kernels.spargeattn_select(probs_tied.log(), ones, torch.ones(1, 8), ones[0] * 0.5, ones[0] * 0.6,
                                         False)[0, 0].tolist(),
    "reference": spargeattn.cdf_select(probs_tied[0], 0.6)[0].tolist()}
values = torch.randint(0, 6, (3, 5000), generator=torch.Generator().manual_seed(2)).float() / 7  # many ties
results["keep_by_mass_differing"] = int((_kernels.keep_by_mass(values, 0.6)
                                         != flexprefill.keep_by_mass_sorted(values, 0.6)).sum())
results["keep_by_mass_kept"] = int(_kernels.keep_by_mass(values, 0.6).sum())
print("RESULTS" + json.dumps(results))
"""


@pytest.fixture(scope="module")
def interpreted() -> dict:
    return json.loads(run_interpreted(CHILD, timeout=900).split("RESULTS", 1)[1])


METHOD_CASES = ["xattention", "xattention_stride4_diagonal", "spargeattn_tuned", "spargeattn_fixed",
                "minference_searched", "minference_vertical_slash", "flexprefill", "flexprefill_query_aware"]


@pytest.mark.parametrize("case", METHOD_CASES)
def test_the_kernels_build_the_reference_s_mask(interpreted, case):
    assert interpreted[case]["differing"] == 0
    assert interpreted[case]["shape"] == [1, 2, 16, 16]


@pytest.mark.parametrize("case", ["xattention", "spargeattn_fixed", "minference_vertical_slash", "flexprefill"])
def test_the_compared_masks_are_sparse(interpreted, case):
    """Equal masks prove something only when they are neither empty nor dense."""
    assert 0.05 < interpreted[case]["density"] < 0.9


def test_xattention_s_fused_scores_equal_the_row_softmax_summed_per_block(interpreted):
    assert interpreted["xattention_scores_max_abs_error"] < 1e-5  # of scores up to 8
    # every query group's softmax sums to 1, so a block row sums to its groups (16 blocks of 8 groups of 8 tokens;
    # 997 tokens make 125 groups, so the last block holds 5)
    sums = interpreted["xattention_scores_row_sums"]
    assert sums[:15] == pytest.approx([8.0] * 15, rel=1e-5) and sums[15] == pytest.approx(5.0, rel=1e-5)


def test_block_stats_pool_and_measure_self_similarity_as_the_reference(interpreted):
    assert interpreted["block_stats_max_abs_error"] < 1e-5


def test_the_diagonal_mass_kernel_sums_as_the_reference(interpreted):
    assert interpreted["diagonal_mass_max_abs_error"] < 1e-6


@pytest.mark.parametrize("case", ["xattention_ties", "spargeattn_ties"])
def test_ties_at_the_threshold_are_taken_in_index_order(interpreted, case):
    assert interpreted[case]["kernel"] == interpreted[case]["reference"]
    # of the four tied blocks only some fit: the first of them in index order
    assert sum(interpreted[case]["kernel"][1:5]) in (1, 2, 3)
    assert interpreted[case]["kernel"][1:5] == sorted(interpreted[case]["kernel"][1:5], reverse=True)


def test_a_whole_head_selection_takes_ties_as_a_stable_sort(interpreted):
    assert interpreted["keep_by_mass_differing"] == 0
    assert 0 < interpreted["keep_by_mass_kept"] < 15000
