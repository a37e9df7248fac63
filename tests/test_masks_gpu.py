"""Mask builders on the GPU: where they compute differently from the CPU path (the Triton kernels of
``masks._kernels``, the tensor cores), they must pick the same blocks, and the same on every run."""

import pytest
import torch

from wavealign import masks, workloads
from wavealign.masks import spargeattn, xattention

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def qkv_bf16():
    """Two heads of a Wan-1.3B 480p workload over more than one generator chunk, in bf16 on the GPU."""
    wl = workloads.preset("wan2.1-1.3b", 61, "480p")  # 24,960 tokens, 195 blocks of 128 (the last one ragged)
    return workloads.synthetic(wl, heads=[0, 3], layer=5, step=10, seed=2, device="cuda")


def test_xattention_tensor_core_scores_match_float32_and_pick_the_same_blocks(qkv_bf16):
    """bf16 q/k go through the tensor cores with float32 results; the float32 path on the same values gives the
    same block masses to float32 rounding, and the same blocks at the threshold but for near-ties."""
    q, k, _ = qkv_bf16
    for h in range(q.shape[1]):
        fast = xattention.block_scores(q[0, h], k[0, h], 128, 8)
        exact = xattention.block_scores(q[0, h].float(), k[0, h].float(), 128, 8)
        assert fast.dtype == exact.dtype == torch.float32
        assert torch.allclose(fast, exact, rtol=1e-4, atol=1e-7)
        picked, want = (xattention.select_blocks(s, 0.9) for s in (fast, exact))
        assert 0 < float(want.float().mean()) < 1
        assert float((picked != want).float().mean()) < 1e-3


def test_spargeattn_autotune_on_the_gpu_picks_what_it_picks_on_the_cpu(qkv_bf16):
    """The lockstep bisection batches every simthreshd1's error into one pass on the GPU; the configs it picks
    are the CPU's on the same bf16 values (the errors agree to float32 rounding)."""
    q, k, v = qkv_bf16
    for h in range(q.shape[1]):
        on_gpu = spargeattn.tune_head(q[0, h], k[0, h], v[0, h], 128, l1_bound=0.06, sample_blocks=8)
        on_cpu = spargeattn.tune_head(*(t[0, h].float().cpu() for t in (q, k, v)), 128, l1_bound=0.06,
                                      sample_blocks=8)
        assert 0 < on_cpu["density"] < 1
        assert (on_gpu["simthreshd1"], on_gpu["cdfthreshd"]) == (on_cpu["simthreshd1"], on_cpu["cdfthreshd"])
        assert on_gpu["l1_error"] == pytest.approx(on_cpu["l1_error"], rel=1e-3)


@pytest.mark.parametrize("method", ["flexprefill", "xattention", "spargeattn", "minference"])
def test_each_method_builds_the_same_mask_on_every_run(qkv_bf16, method):
    """A sweep cell re-run, or its mask rebuilt for another backend, must see the same blocks: no method may sum
    in the order a GPU's atomics land (FlexPrefill's diagonal scores once did)."""
    q, k, v = qkv_bf16
    first, second = (masks.build(method, q, k, v, 128) for _ in range(2))
    assert torch.equal(first, second)


METHODS = ["flexprefill", "xattention", "spargeattn", "minference"]


@pytest.mark.parametrize("method", METHODS)
def test_the_kernels_pick_the_blocks_the_torch_reference_picks_on_bf16_inputs(qkv_bf16, method):
    """``build`` runs the Triton kernels on a GPU, ``build_reference`` the method's torch code on the same device:
    they may part only where a cumulative sum rounds to the other side of its threshold."""
    q, k, v = qkv_bf16
    store = {"tuned_config": masks.TunedConfigs(method)} if masks.get(method).tuned else {}
    fast = masks.build(method, q, k, v, 128, **store)
    want = masks.get(method).build_reference(q, k, v, 128, **store)
    assert 0 < float(want.float().mean()) < 1
    assert int((fast != want).sum()) <= 1e-4 * want.numel()


@pytest.fixture(scope="module")
def qkv_364k():
    """A whole 40-head layer of Wan2.1-14B at 720p and 401 frames (363,600 tokens), as a sweep cell draws it."""
    wl = workloads.preset("wan2.1-14b", 401, "720p")
    return workloads.synthetic(wl, heads=list(range(40)), layer=20, step=25, seed=0, device="cuda")


@pytest.mark.parametrize("method", METHODS)
def test_a_whole_364k_layer_gets_bitwise_the_same_mask_on_three_builds(qkv_364k, method):
    """At the paper's length the sums are long enough for an unordered reduction to flip a block (FlexPrefill's
    did, in 5-7 of 323M blocks): three builds of the same Q/K must agree bit for bit, with a live layer's tuned
    configs reused after the first."""
    q, k, v = qkv_364k
    store = {"tuned_config": masks.TunedConfigs(method)} if masks.get(method).tuned else {}
    first, second, third = (masks.build(method, q, k, v, 128, **store) for _ in range(3))
    assert torch.equal(first, second) and torch.equal(first, third)
    assert 0 < float(first.float().mean()) < 1
