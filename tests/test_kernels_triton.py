"""The Triton block-sparse kernel, run on the CPU by Triton's interpreter at tiny shapes, against ``reference``.

The interpreter must be switched on before the kernel module is imported, and other tests in the same run
may have imported it already, so the kernel runs in one child process with ``TRITON_INTERPRET=1`` that
reports every case at once. float16 stands in for bfloat16: the interpreter's bfloat16 dot is wrong
(numpy has no bfloat16); the GPU tests cover bfloat16.
"""

import json

import pytest
import torch
from interpreted import run_interpreted

from wavealign import launch_order
from wavealign.kernels import triton_blocksparse

pytest.importorskip("triton")

CHILD = r"""
import json, torch
from wavealign import blockmask, launch_order
from wavealign.masks import synthetic
from wavealign.kernels.reference import reference_attention
from wavealign.kernels import LaunchShape, triton_static
from wavealign.kernels.triton_blocksparse import attention

def inputs(batch, heads, n, d, bs, seed, density=0.5):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(batch, heads, n, d, generator=g).half() for _ in range(3))
    mb = -(-n // bs)
    mask = synthetic.fixed_nnz_mask(heads, mb, mb, density, nnz_spread=0.5, seed=seed)
    mask[0, 1] = False
    return q, k, v, mask

def rel_err(out, q, k, v, mask, bs):
    ref = reference_attention(q.float(), k.float(), v.float(), mask, block_size=bs)
    return float((out.float() - ref).norm() / ref.norm())

results = {}
# (name, batch, heads, n, head_dim, block_size, block_m, block_n): ragged and whole last blocks, both head dims
for name, b, h, n, d, bs, bm, bn in [("ragged_d64", 1, 2, 100, 64, 32, 32, 16),
                                      ("whole_d128", 1, 2, 128, 128, 32, 16, 32),
                                      ("ragged_d128_b16", 2, 2, 70, 128, 16, 16, 16)]:
    q, k, v, mask = inputs(b, h, n, d, bs, seed=n)
    cfg = dict(block_m=bm, block_n=bn, num_warps=4)
    plain = attention(q, k, v, mask, None, bs, **cfg)
    order = launch_order.RowOrder.from_perm(torch.stack([torch.randperm(mask.shape[1]) for _ in range(h)]), 4, "none")
    permuted = attention(q, k, v, mask, order, bs, **cfg)
    results[name] = {
        "rel_err": rel_err(plain, q, k, v, mask, bs),
        "permuted_rel_err": rel_err(permuted, q, k, v, mask, bs),
        "permuted_bitwise": torch.equal(plain, permuted),
        "empty_row_max": float(plain[:, 0, bs:2 * bs].abs().max()),
        "parallel_heads_bitwise": torch.equal(plain, attention(q, k, v, mask, None, bs, head_order="parallel", **cfg)),
        "tma_bitwise": torch.equal(plain, attention(q, k, v, mask, None, bs, use_tma=True, **cfg)),
        "flat_tma_bitwise": torch.equal(plain, attention(q, k, v, mask, None, bs, use_tma=True, flat_loads=True,
                                                         **cfg)),
        "kv_form_bitwise": torch.equal(plain, attention(q, k, v, blockmask.to_kv_indices(mask), None, bs, **cfg)),
        # triton-static: 3 persistent programs striding over the tiles, in the order and in a balanced one
        "static_bitwise": torch.equal(permuted, triton_static.plan(mask, order, LaunchShape.of(q, k, bs), grid=3,
                                                                   **cfg).run(q, k, v)),
        "static_balanced_bitwise": torch.equal(plain, triton_static.plan(
            mask, launch_order.plan(mask, wave_size=3, stages="spatial", reorderer="balanced"),
            LaunchShape.of(q, k, bs), grid=3, **cfg).run(q, k, v)),
    }
q, k, v, _ = inputs(2, 2, 64, 64, 16, seed=3)
batched = torch.stack([synthetic.random_mask(2, 4, 4, 0.5, seed=s) for s in (1, 2)])
batched_order = launch_order.RowOrder.from_perm(
    torch.stack([torch.randperm(4) for _ in range(4)]).view(2, 2, 4), 4, "none")
out = attention(q, k, v, batched, batched_order, 16, block_m=16, block_n=16)
results["batched"] = {"rel_err": rel_err(out, q, k, v, batched, 16)}
shared = batched[:1]  # one (1, H, MB, NB) pattern for both batch elements, as reference broadcasts it
results["batch1_mask"] = {"bitwise": torch.equal(attention(q, k, v, shared, None, 16, block_m=16, block_n=16),
                                                 attention(q, k, v, shared[0], None, 16, block_m=16, block_n=16))}
print("RESULTS" + json.dumps(results))
"""


@pytest.fixture(scope="module")
def interpreted() -> dict:
    return json.loads(run_interpreted(CHILD, timeout=600).split("RESULTS", 1)[1])


CASES = ["ragged_d64", "whole_d128", "ragged_d128_b16"]


@pytest.mark.parametrize("case", CASES)
def test_matches_reference(interpreted, case):
    assert interpreted[case]["rel_err"] < 2e-3


@pytest.mark.parametrize("case", CASES)
def test_matches_reference_with_a_row_order(interpreted, case):
    assert interpreted[case]["permuted_rel_err"] < 2e-3


@pytest.mark.parametrize("case", CASES)
def test_row_order_leaves_output_bitwise_equal(interpreted, case):
    assert interpreted[case]["permuted_bitwise"]


@pytest.mark.parametrize("case", CASES)
def test_static_persistent_kernel_is_bitwise_the_streaming_one(interpreted, case):
    assert interpreted[case]["static_bitwise"]


@pytest.mark.parametrize("case", CASES)
def test_static_persistent_kernel_in_a_balanced_order_is_bitwise_the_original(interpreted, case):
    assert interpreted[case]["static_balanced_bitwise"]


@pytest.mark.parametrize("case", CASES)
def test_rows_without_blocks_are_zero(interpreted, case):
    assert interpreted[case]["empty_row_max"] == 0.0


@pytest.mark.parametrize("case", CASES)
def test_parallel_head_order_gives_the_same_output(interpreted, case):
    assert interpreted[case]["parallel_heads_bitwise"]


@pytest.mark.parametrize("case", CASES)
def test_tensor_descriptor_loads_give_the_same_output(interpreted, case):
    assert interpreted[case]["tma_bitwise"]


@pytest.mark.parametrize("case", CASES)
def test_flat_tensor_descriptor_loads_give_the_same_output(interpreted, case):
    assert interpreted[case]["flat_tma_bitwise"]


@pytest.mark.parametrize("case", CASES)
def test_kv_index_form_gives_the_same_output(interpreted, case):
    assert interpreted[case]["kv_form_bitwise"]


def test_per_batch_masks_and_orders_match_reference(interpreted):
    assert interpreted["batched"]["rel_err"] < 2e-3


def _qkv(d=64, dtype=torch.float16):
    return [torch.zeros(1, 2, 64, d, dtype=dtype) for _ in range(3)]


def _mask():
    return torch.ones(2, 2, 2, dtype=torch.bool)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"head_order": "diagonal"}, "head_order"),
    ({"block_m": 48}, "block_m"),
    ({"block_n": 64, "block_size": 32}, "block_n"),
])
def test_bad_options_raise(kwargs, match):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=match):
        triton_blocksparse.attention(q, k, v, _mask(), **{"block_size": 32, **kwargs})


def test_unsupported_head_dim_raises():
    q, k, v = _qkv(d=96)
    with pytest.raises(ValueError, match="head dim"):
        triton_blocksparse.attention(q, k, v, _mask(), block_size=32)


def test_float32_inputs_raise():
    q, k, v = _qkv(dtype=torch.float32)
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        triton_blocksparse.attention(q, k, v, _mask(), block_size=32)


def test_mask_of_the_wrong_shape_raises():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="MB=2"):
        triton_blocksparse.attention(q, k, v, torch.ones(2, 3, 3, dtype=torch.bool), block_size=32)


def test_order_of_the_wrong_shape_raises():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"order covers \(H, MB\) = \(2, 3\)"):
        triton_blocksparse.attention(q, k, v, _mask(), order=launch_order.RowOrder.identity(2, 3), block_size=32)


def test_a_batch_one_mask_serves_every_batch_element(interpreted):
    assert interpreted["batch1_mask"]["bitwise"]


def test_a_timeline_is_recorded_by_the_persistent_launch_only():
    from wavealign.kernels import LaunchShape

    q, k, v = _qkv()
    launch = triton_blocksparse.plan(_mask(), None, LaunchShape.of(q, k, 32, v=v))
    with pytest.raises(ValueError, match="persistent launch only"):
        launch.timeline(q, k, v)


@pytest.mark.gpu
def test_on_the_gpu_the_timeline_launch_computes_the_launch_and_times_every_tile_on_one_of_its_sms():
    from wavealign import kernels
    from wavealign.kernels import LaunchShape
    from wavealign.masks import synthetic

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 3, 1000, 128, generator=g, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask = synthetic.fixed_nnz_mask(3, 8, 8, 0.4, nnz_spread=0.8, seed=1).cuda()
    launch = kernels.get("triton-static").plan(mask, None, LaunchShape.of(q, k, 128, v=v), grid=5)
    out, record = launch.timeline(q, k, v)
    assert torch.equal(out, launch.run(q, k, v))
    start, end, sm = record.cpu().unbind(-1)
    assert record.shape == (24, 3) and bool((start > 0).all()) and bool((end >= start).all())
    assert bool((sm < torch.cuda.get_device_properties(0).multi_processor_count).all())
    # a program runs its tiles one after another: tile t + 5 starts after tile t ends
    assert bool((start[5:] >= end[:-5]).all())
