"""Whole-block gather/scatter (``wavealign.launch_order.block_gather``): the torch path's contract on the CPU, and the
Triton copy kernel run by Triton's interpreter in a child process, bitwise against the torch path."""

import json

import pytest
import torch
from interpreted import run_interpreted

from wavealign import launch_order
from wavealign.launch_order import block_gather


def _order(perm) -> launch_order.RowOrder:
    return launch_order.RowOrder.from_perm(torch.as_tensor(perm), wave_size=2, stages="both")


def test_gathered_slot_p_holds_block_perm_p_and_the_ragged_block_is_zero_padded():
    x = torch.arange(1 * 1 * 10 * 2, dtype=torch.float32).view(1, 1, 10, 2) + 1  # 3 blocks of 4, last has 2
    order = _order([[2, 0, 1]])
    y = block_gather.gather_blocks(x, order, 4)
    assert y.shape == (1, 1, 12, 2)
    assert torch.equal(y[0, 0, 0:2], x[0, 0, 8:10]) and torch.equal(y[0, 0, 2:4], torch.zeros(2, 2))
    assert torch.equal(y[0, 0, 4:8], x[0, 0, 0:4]) and torch.equal(y[0, 0, 8:12], x[0, 0, 4:8])


@pytest.mark.parametrize("n", [64, 61])
def test_scatter_undoes_gather_per_head_and_batch(n):
    x = torch.randn(2, 3, n, 8)
    order = launch_order.RowOrder.from_perm(torch.stack([torch.randperm(8) for _ in range(6)]).view(2, 3, 8), 2, "both")
    y = block_gather.gather_blocks(x, order, 8)
    assert torch.equal(block_gather.scatter_blocks(y, order, 8, n), x)


def test_a_transposed_view_is_read_through_its_strides():
    x = torch.randn(1, 20, 2, 4)  # (B, S, H, D) memory, viewed as (B, H, S, D)
    order = _order([[1, 0, 2, 4, 3], [4, 3, 2, 1, 0]])
    view = x.transpose(1, 2)
    assert torch.equal(block_gather.gather_blocks(view, order, 4), block_gather.gather_blocks(view.contiguous(),
                                                                                              order, 4))


@pytest.mark.parametrize(("call", "message"), [
    (lambda: block_gather.gather_blocks(torch.zeros(1, 2, 10, 4), _order([[0, 1]]), 4), "covers MB=2 query blocks"),
    (lambda: block_gather.gather_blocks(torch.zeros(1, 2, 12, 4), _order([[0, 1, 2]]), 4), "order has 1"),
    (lambda: block_gather.scatter_blocks(torch.zeros(1, 1, 12, 4), _order([[0, 1, 2]]), 4, 7), "seq_len=7"),
    (lambda: block_gather.gather_blocks(torch.zeros(2, 10, 4), _order([[0, 1, 2]]), 4), r"\(B, H, N, D\)"),
    (lambda: block_gather.scatter_blocks(torch.zeros(1, 1, 10, 4), _order([[0, 1, 2]]), 4, 10), "make 12"),
    (lambda: block_gather.gather_blocks(torch.zeros(1, 1, 10, 4).transpose(2, 3), _order([[0]]), 4),
     "unit stride"),
])
def test_bad_inputs_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


CHILD = r"""
import json, torch
from wavealign import launch_order
from wavealign.launch_order import block_gather
out = {}
for name, (b, h, n, d, bs) in {"ragged_d64": (1, 2, 100, 64, 32), "whole_d128": (2, 2, 128, 128, 32),
                               "odd_d": (1, 3, 70, 24, 16)}.items():
    x = torch.randn(b, h, n, d).half()
    mb = -(-n // bs)
    perm = torch.stack([torch.randperm(mb) for _ in range(b * h)]).view(b, h, mb)
    order = launch_order.RowOrder.from_perm(perm, 4, "both")
    padded = x.new_empty(b, h, mb * bs, d)
    fast = block_gather.copy_blocks_triton(x, torch.full_like(padded, float("nan")), order, bs, True)
    slow = block_gather.copy_blocks_torch(x, padded, order, bs, True)
    back = block_gather.copy_blocks_triton(fast, torch.full_like(x, float("nan")), order, bs, False)
    out[name] = {"gather_bitwise": torch.equal(fast, slow), "round_trip_bitwise": torch.equal(back, x)}
# one (H, MB) order for a batch of 2, and a source read through a transposed view (FA4's (B, S, H, D) output)
x = torch.randn(2, 40, 3, 16).half().transpose(1, 2)  # (B, H, N, D) view, N stride = H * D
order = launch_order.RowOrder.from_perm(torch.stack([torch.randperm(3) for _ in range(3)]), 4, "both")
fast = block_gather.copy_blocks_triton(x, x.new_full((2, 3, 48, 16), float("nan")), order, 16, True)
slow = block_gather.copy_blocks_torch(x, x.new_empty(2, 3, 48, 16), order, 16, True)
back = block_gather.copy_blocks_triton(fast, x.new_full((2, 3, 40, 16), float("nan")), order, 16, False)
out["unbatched_order_strided_source"] = {"gather_bitwise": torch.equal(fast, slow),
                                          "round_trip_bitwise": torch.equal(back, x)}
print(json.dumps(out))
"""


def test_the_triton_copy_equals_the_torch_copy_bitwise_under_the_interpreter():
    pytest.importorskip("triton")
    results = json.loads(run_interpreted(CHILD, timeout=300).strip().splitlines()[-1])
    assert results == {name: {"gather_bitwise": True, "round_trip_bitwise": True} for name in results}
    assert len(results) == 4
