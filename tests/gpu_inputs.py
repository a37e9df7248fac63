"""Inputs and checks shared by the GPU kernel tests (``test_kernels_gpu``, ``test_kernels_fa4_flashinfer``)."""

import torch

from wavealign.masks import synthetic


def attention_inputs(batch, heads, seq_len, head_dim, block_size, seed, density=0.4):
    """bf16 q, k, v on the GPU and a random block mask with an empty row (must give zeros) and the ragged last
    K/V block selected (must be read only up to the sequence's end)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(batch, heads, seq_len, head_dim, generator=gen, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    blocks = -(-seq_len // block_size)
    mask = synthetic.fixed_nnz_mask(heads, blocks, blocks, density, nnz_spread=0.5, seed=seed).cuda()
    mask[0, min(1, blocks - 1)] = False
    mask[-1, 0, -1] = True
    return q, k, v, mask


def run_poisoned(backend, q, k, v, mask, order=None, block_size=128, **params):
    """Fill the memory the output will most likely reuse with NaN, so an unwritten element shows."""
    poison = torch.full_like(q, float("nan"))
    del poison
    return backend(q, k, v, mask, order=order, block_size=block_size, **params)


def relative_error(out, ref):
    return float((out.float() - ref).norm() / ref.norm())
