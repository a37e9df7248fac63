"""Specification of the video mask families and their plumbing: a method's own token order (``masks.TokenOrder``),
the latent video shape a method reads (``latent=(T, H, W)``), Radial Attention's static mask and VSA's cube top-k."""

from __future__ import annotations

from types import MappingProxyType

import pytest
import torch

from wavealign import masks, workloads
from wavealign.masks._common import pool_blocks


def _qkv(b: int, h: int, n: int, d: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=gen) for _ in range(3))  # type: ignore[return-value]


def _random_order(b: int, h: int, n: int, seed: int = 0) -> masks.TokenOrder:
    gen = torch.Generator().manual_seed(seed)
    q_perm = torch.stack([torch.stack([torch.randperm(n, generator=gen) for _ in range(h)]) for _ in range(b)])
    kv_perm = torch.stack([torch.stack([torch.randperm(n, generator=gen) for _ in range(h)]) for _ in range(b)])
    return masks.TokenOrder(q_perm=q_perm, kv_perm=kv_perm)


# --- TokenOrder ---------------------------------------------------------------------------------------------------

def test_token_order_gather_puts_original_token_perm_p_at_position_p():
    q, k, _ = _qkv(2, 3, 37)
    order = _random_order(2, 3, 37)
    gathered = order.gather(q, "q")
    for b in range(2):
        for h in range(3):
            assert torch.equal(gathered[b, h], q[b, h, order.q_perm[b, h]])
    assert torch.equal(order.gather(k, "kv")[1, 2], k[1, 2, order.kv_perm[1, 2]])


def test_token_order_scatter_is_the_bitwise_inverse_of_the_q_gather():
    q, _, _ = _qkv(2, 3, 37)
    order = _random_order(2, 3, 37, seed=1)
    assert torch.equal(order.scatter(order.gather(q, "q")), q)


def test_token_order_shared_by_all_heads_may_be_an_expanded_view():
    q, _, _ = _qkv(1, 4, 20)
    perm = torch.randperm(20, generator=torch.Generator().manual_seed(2)).view(1, 1, 20).expand(1, 4, 20)
    order = masks.TokenOrder(q_perm=perm, kv_perm=perm)
    assert torch.equal(order.gather(q)[0, 3], q[0, 3, perm[0, 0]])
    assert torch.equal(order.scatter(order.gather(q)), q)


def test_token_order_refuses_perms_that_are_not_int64_b_h_n():
    with pytest.raises(ValueError, match="q_perm"):
        masks.TokenOrder(q_perm=torch.arange(5).view(1, 1, 5).int(), kv_perm=torch.arange(5).view(1, 1, 5))
    with pytest.raises(ValueError, match="kv_perm"):
        masks.TokenOrder(q_perm=torch.arange(5).view(1, 1, 5), kv_perm=torch.arange(5).view(1, 5))
    with pytest.raises(ValueError, match="one shape"):
        masks.TokenOrder(q_perm=torch.arange(5).view(1, 1, 5), kv_perm=torch.arange(4).view(1, 1, 4))
    with pytest.raises(ValueError, match="q_labels"):
        masks.TokenOrder(q_perm=torch.arange(5).view(1, 1, 5), kv_perm=torch.arange(5).view(1, 1, 5),
                         q_labels=torch.zeros(1, 1, 4, dtype=torch.int64))


def test_token_order_refuses_a_tensor_of_another_shape():
    order = _random_order(1, 2, 10)
    with pytest.raises(ValueError, match=r"\(B, H, N\) = \(1, 2, 10\)"):
        order.gather(torch.zeros(1, 2, 11, 4))
    with pytest.raises(ValueError, match="which"):
        order.gather(torch.zeros(1, 2, 10, 4), "k")


# --- a token-ordered method through the masks entry points ---------------------------------------------------------

def _reverse_order(q: torch.Tensor, k: torch.Tensor, *, block_size: int, **params) -> masks.TokenOrder:
    b, h, n, _ = q.shape
    perm = torch.arange(n - 1, -1, -1).expand(b, h, n)
    return masks.TokenOrder(q_perm=perm, kv_perm=perm)


def _pooled_sign_mask(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, block_size: int,
                      token_order: masks.TokenOrder | None = None, **params) -> torch.Tensor:
    """A mask read off the blocks of q and k as given: kept where the pooled q . k is positive."""
    out = [[(pool_blocks(q[b, h], block_size) @ pool_blocks(k[b, h], block_size).T) > 0 for h in range(q.shape[1])]
           for b in range(q.shape[0])]
    return torch.stack([torch.stack(row) for row in out])


def test_a_token_ordered_method_builds_its_mask_on_q_k_v_gathered_into_its_order():
    method = masks.MaskMethod("toy-reversed", _pooled_sign_mask, MappingProxyType({}), "toy",
                              token_order=_reverse_order)
    q, k, v = _qkv(1, 2, 50)
    built = method.build_ordered(q, k, v, block_size=16)
    assert torch.equal(built.q, q.flip(2)) and torch.equal(built.k, k.flip(2)) and torch.equal(built.v, v.flip(2))
    assert torch.equal(built.mask, _pooled_sign_mask(q.flip(2), k.flip(2), v, block_size=16))
    assert torch.equal(method(q, k, v, block_size=16), built.mask)
    # the ragged first block of the reversed order differs from the original order's ragged last block
    assert not torch.equal(built.mask, _pooled_sign_mask(q, k, v, block_size=16))


def test_an_ordinary_method_builds_in_the_original_order():
    q, k, v = _qkv(1, 2, 300)
    built = masks.get("xattention").build_ordered(q, k, v, block_size=64)
    assert built.order is None and built.q is q
    assert torch.equal(built.mask, masks.build("xattention", q, k, v, block_size=64))


def test_a_token_order_needs_a_build_from_q_k():
    with pytest.raises(ValueError, match="token_order"):
        masks.register("toy-static-ordered", None, {}, "toy", from_shape=lambda *a, **k: None,
                       token_order=_reverse_order)


# --- latent ----------------------------------------------------------------------------------------------------------

def test_a_workload_preset_knows_its_latent_video_shape_in_tokens():
    wl = workloads.preset("wan2.1-14b", frames=81, resolution="720p")
    assert wl.latent == (21, 45, 80)
    assert wl.latent[0] * wl.latent[1] * wl.latent[2] == wl.seq_len


def test_latent_is_part_of_the_workload_identity_a_sweep_never_sets():
    assert "latent" in masks.IDENTITY_PARAMS


def test_latent_param_check_takes_three_positive_integers_or_none():
    assert masks.check_latent("latent", [2, 3, 4]) == (2, 3, 4)
    assert masks.check_latent("latent", None) is None
    for bad in ((2, 3), (2, 0, 4), "2,3,4", (2, 3.5, 4)):
        with pytest.raises(ValueError, match="latent"):
            masks.check_latent("latent", bad)
