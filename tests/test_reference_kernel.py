"""The reference backend computes exact block-sparse attention."""

import torch

from wavealign import kernels
from wavealign.masks import synthetic


def dense_masked_attention(q, k, v, mask, block):
    """softmax over the token-level expansion of the block mask, in float64."""
    token_mask = mask.repeat_interleave(block, -2).repeat_interleave(block, -1)
    token_mask = token_mask[..., : q.shape[2], : k.shape[2]]
    scores = (q.double() @ k.double().transpose(-1, -2)) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(~token_mask, float("-inf"))
    out = torch.softmax(scores, -1).nan_to_num(0.0) @ v.double()
    return out


def test_reference_matches_dense_masked_softmax_with_ragged_blocks_and_empty_rows():
    block, heads = 16, 3
    q = torch.randn(2, heads, 5 * block - 7, 32)
    k, v = torch.randn(2, heads, 4 * block - 3, 32), torch.randn(2, heads, 4 * block - 3, 32)
    mask = synthetic.random_mask(heads, 5, 4, 0.5, seed=4)
    mask[0, 2] = False  # an empty row
    out = kernels.get("reference")(q, k, v, mask, block_size=block)
    expected = dense_masked_attention(q, k, v, mask.unsqueeze(0), block)
    assert torch.allclose(out.double(), expected, atol=1e-5)
    assert torch.equal(out[:, 0, 2 * block:3 * block], torch.zeros_like(out[:, 0, :block]))


def test_reference_keeps_bf16_inputs_in_bf16_within_bf16_accuracy():
    block = 8
    q, k, v = (torch.randn(1, 2, 64, 16).bfloat16() for _ in range(3))
    mask = synthetic.random_mask(2, 8, 8, 0.4, seed=1)
    out = kernels.get("reference")(q, k, v, mask, block_size=block)
    expected = dense_masked_attention(q, k, v, mask.unsqueeze(0), block)
    assert out.dtype == torch.bfloat16
    assert float((out.double() - expected).norm() / expected.norm()) < 1e-2


def test_reference_is_registered_and_available_everywhere():
    assert "reference" in kernels.available()
    assert kernels.get("reference").supports("a40")
