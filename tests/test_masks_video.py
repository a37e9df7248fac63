"""Specification of the video mask families and their plumbing: a method's own token order (``masks.TokenOrder``),
the latent video shape a method reads (``latent=(T, H, W)``), Radial Attention's static mask and VSA's cube top-k."""

from __future__ import annotations

import math
from pathlib import Path
from types import MappingProxyType

import pytest
import torch

from wavealign import kernels, masks, workloads
from wavealign.integrations.attention import BlockSparseAttention
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
    # the ragged first block of the reversed order differs from the original order's ragged last block
    assert not torch.equal(built.mask, _pooled_sign_mask(q, k, v, block_size=16))


@pytest.mark.parametrize("name", ["vsa", "svg2"])
def test_a_method_with_its_own_token_order_refuses_to_hand_out_a_bare_mask(name):
    """A bare mask in the method's order would run another attention on q, k, v in the original one."""
    q, k, v = _qkv(1, 1, 64)
    params = {"latent": (1, 8, 8), "cube": (1, 4, 4)} if name == "vsa" else {"q_clusters": 2, "kv_clusters": 2}
    for bare in (lambda: masks.build(name, q, k, v, 16, **params),
                 lambda: masks.get(name)(q, k, v, 16, **params),
                 lambda: masks.get(name).build_reference(q, k, v, 16, **params)):
        with pytest.raises(ValueError, match=rf"method '{name}' builds its mask in a token order of its own.*"
                                             rf"masks\.build_ordered\('{name}'"):
            bare()


def test_a_toy_token_ordered_method_refuses_a_bare_mask_too():
    method = masks.MaskMethod("toy-reversed", _pooled_sign_mask, MappingProxyType({}), "toy",
                              token_order=_reverse_order)
    with pytest.raises(ValueError, match="build_ordered"):
        method(*_qkv(1, 1, 50), block_size=16)


def _attention_under_the_mask_mapped_back(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                          built: masks.OrderedBuild, block: int) -> torch.Tensor:
    """Dense attention over q, k, v (1, H, N, D) in the original order, each token pair allowed where the build's
    mask keeps the block pair the two tokens land in, in the build's order."""
    n = q.shape[2]
    identity = torch.arange(n).expand(1, q.shape[1], n)
    q_perm = identity if built.order is None else built.order.q_perm
    kv_perm = identity if built.order is None else built.order.kv_perm
    heads = []
    for h in range(q.shape[1]):
        q_block, kv_block = torch.empty(n, dtype=torch.long), torch.empty(n, dtype=torch.long)
        q_block[q_perm[0, h]] = torch.arange(n) // block  # each original token's block in the build's order
        kv_block[kv_perm[0, h]] = torch.arange(n) // block
        allowed = built.mask[0, h][q_block][:, kv_block]
        scores = (q[0, h] @ k[0, h].T) / q.shape[-1] ** 0.5
        heads.append(torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v[0, h])
    return torch.stack(heads)[None]


@pytest.mark.parametrize("name", ["vsa", "svg2", "radial"])
def test_an_ordered_build_restores_the_attention_of_q_k_v_in_their_original_order(name):
    """Attention on the build's q, k, v and mask, restored, is attention over the original tokens under the
    method's mask mapped back onto them."""
    latent, block = (3, 4, 8), 16  # 96 tokens, 6 blocks
    q, k, v = _qkv(1, 2, 96, d=16, seed=7)
    params = {"vsa": {"latent": latent, "cube": (1, 4, 4)}, "radial": {"latent": latent},
              "svg2": {"q_clusters": 4, "kv_clusters": 4, "iters": 2}}[name]
    built = masks.build_ordered(name, q, k, v, block, **params)
    out = built.restore(kernels.get("reference")(built.q, built.k, built.v, built.mask, block_size=block))
    assert torch.allclose(out, _attention_under_the_mask_mapped_back(q, k, v, built, block), atol=1e-5)
    assert (built.order is None) == (name == "radial")


def test_the_readmes_video_family_example_runs_as_written_and_restores_the_original_order():
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    section = readme.split("## Use the reorder in your own pipeline", 1)[1].split("### In diffusers", 1)[0]
    snippet = "import torch\n" + section.split("```python", 2)[2].split("```", 1)[0]
    scope: dict = {}
    exec(snippet, scope)  # the README's own code, as a user pastes it
    q, k, v, built = (scope[name] for name in ("q", "k", "v", "built"))
    assert built.order is not None and scope["radial"].shape == built.mask.shape
    assert torch.allclose(scope["out"], _attention_under_the_mask_mapped_back(q, k, v, built, 128), atol=1e-5)


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


# --- radial --------------------------------------------------------------------------------------------------------

def _radial_reference(latent: tuple[int, int, int], block_size: int, decay_factor: float,
                      model_type: str) -> torch.Tensor:
    """Radial Attention's rule written out token by token, frame pair by frame pair: each pair's token mask placed in
    a tile of the blocks its frames touch, shrunk as upstream's ``shrinkMaskStrict`` (float densities), OR-ed."""
    frames, height, width = latent
    per_frame = height * width
    blocks = -(-frames * per_frame // block_size)
    out = torch.zeros(blocks, blocks, dtype=torch.bool)
    base = 2 ** per_frame.bit_length()
    idx = torch.arange(per_frame)
    for i in range(frames):
        for j in range(frames):
            d = abs(i - j)
            if model_type == "wan" and j == 0:
                tokens = torch.ones(per_frame, per_frame, dtype=torch.bool)
            else:
                decay = base / 2 ** d.bit_length()
                window = per_frame if d <= 1 else max(decay * decay_factor, block_size)
                tokens = (idx.view(1, -1) - idx.view(-1, 1)).abs() <= window
                if not (decay >= block_size or d % int(block_size / decay) == 0):
                    tokens = torch.zeros_like(tokens)
            r0, c0 = i * per_frame // block_size, j * per_frame // block_size
            r1, c1 = -(-(i + 1) * per_frame // block_size), -(-(j + 1) * per_frame // block_size)
            tile = torch.zeros((r1 - r0) * block_size, (c1 - c0) * block_size, dtype=torch.bool)
            ro, co = i * per_frame - r0 * block_size, j * per_frame - c0 * block_size
            tile[ro:ro + per_frame, co:co + per_frame] = tokens
            density = tile.view(r1 - r0, block_size, c1 - c0, block_size).sum(1) / block_size
            high = (density > 1 / 3).sum(-1) / ((density > 0).sum(-1) + 1e-9)
            out[r0:r1, c0:c1] |= high > 0.6
    return out


@pytest.mark.parametrize(("latent", "block_size", "decay_factor", "model_type"), [
    ((5, 3, 7), 16, 1.0, "wan"),       # 105 tokens: frames of 21 straddle blocks, the last block holds 9
    ((9, 4, 6), 8, 0.2, "wan"),        # blocks smaller than a frame, narrow windows
    ((12, 2, 3), 16, 1.0, "hunyuan"),  # frames of 6 tokens: several frames per block
    ((17, 5, 13), 32, 0.5, "wan"),     # far frames dropped by the split
])
def test_radial_mask_follows_its_token_level_rule_at_ragged_shapes(latent, block_size, decay_factor, model_type):
    expected = _radial_reference(latent, block_size, decay_factor, model_type)
    tokens = latent[0] * latent[1] * latent[2]
    blocks = -(-tokens // block_size)
    got = masks.get("radial").for_shape(3, blocks, blocks, block_size=block_size, latent=latent,
                                        decay_factor=decay_factor, model_type=model_type)
    assert got.shape == (3, blocks, blocks)
    assert torch.equal(got[0], expected) and torch.equal(got[1], expected) and torch.equal(got[2], expected)


def test_radial_window_shrinks_as_temporal_distance_grows():
    latent, block_size = (33, 16, 16), 16  # 256 tokens a frame: 16 blocks
    mask = masks.get("radial").for_shape(1, 528, 528, block_size=block_size, latent=latent, model_type="hunyuan")[0]
    per_frame_blocks = 16
    frame_pair = mask.view(33, per_frame_blocks, 33, per_frame_blocks).sum((1, 3))  # kept blocks per frame pair
    assert frame_pair[16, 15] == frame_pair[16, 16] == per_frame_blocks ** 2  # the dense diagonal frame band
    kept_by_distance = [int(frame_pair[16, 16 + d]) for d in (2, 4, 8, 16)]
    assert kept_by_distance == sorted(kept_by_distance, reverse=True) and kept_by_distance[0] > kept_by_distance[-1]


def test_radial_on_q_k_v_draws_the_latents_mask_for_every_head():
    q, k, v = _qkv(1, 2, 105)
    built = masks.build("radial", q, k, v, block_size=16, latent=(5, 3, 7))
    assert torch.equal(built[0, 0], _radial_reference((5, 3, 7), 16, 1.0, "wan"))
    assert torch.equal(built[0, 1], built[0, 0])


def test_radial_without_a_latent_says_it_needs_one():
    with pytest.raises(ValueError, match=r"method 'radial' needs latent=\(T, H, W\)"):
        masks.get("radial").for_shape(1, 7, 7, block_size=16)
    q, k, v = _qkv(1, 1, 105)
    with pytest.raises(ValueError, match=r"method 'radial' needs latent=\(T, H, W\)"):
        masks.build("radial", q, k, v, block_size=16)


def test_radial_refuses_a_latent_of_another_length():
    with pytest.raises(ValueError, match="q_blocks and kv_blocks"):
        masks.get("radial").for_shape(1, 7, 7, block_size=16, latent=(5, 3, 8))


def test_radial_gets_its_latent_from_the_workload_like_the_identity_params():
    q, k, v = _qkv(1, 2, 105)
    built = masks.build_for_heads("radial", q, k, v, 16, model=None, layer=0, heads=[0, 1], latent=(5, 3, 7))
    assert built.order is None and built.q is q
    assert torch.equal(built.mask, masks.build("radial", q, k, v, block_size=16, latent=(5, 3, 7)))
    assert masks.identity_params("radial", model="m", layer=3, heads=[0], latent=(5, 3, 7)) == {"latent": (5, 3, 7)}
    assert masks.identity_params("xattention", model="m", layer=3, heads=[0], latent=(5, 3, 7)) == {}


# --- vsa -----------------------------------------------------------------------------------------------------------

def _vsa_reference(q: torch.Tensor, k: torch.Tensor, latent: tuple[int, int, int], cube: tuple[int, int, int],
                   block_size: int, sparsity: float) -> tuple[torch.Tensor, torch.Tensor]:
    """VSA's coarse stage written out: tiles cut by loops (full tiles, then edge tiles, each in tile raster order),
    tokens gathered, each block of positions mean-pooled, and per query block the top-k key blocks by a stable sort.
    Returns (perm, mask (B, H, MB, NB))."""
    frames, height, width = latent
    index = torch.arange(frames * height * width).view(frames, height, width)
    full, edge = [], []
    for t0 in range(0, frames, cube[0]):
        for h0 in range(0, height, cube[1]):
            for w0 in range(0, width, cube[2]):
                tile = index[t0:t0 + cube[0], h0:h0 + cube[1], w0:w0 + cube[2]].flatten()
                (full if tile.numel() == block_size else edge).append(tile)
    perm = torch.cat(full + edge)
    n = perm.numel()
    blocks = -(-n // block_size)
    keep = max(1, math.ceil((1 - sparsity) * blocks))
    mask = torch.zeros(q.shape[0], q.shape[1], blocks, blocks, dtype=torch.bool)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            pooled = [torch.stack([x[b, h, perm][i * block_size:(i + 1) * block_size].mean(0) for i in range(blocks)])
                      for x in (q, k)]
            scores = pooled[0] @ pooled[1].T / q.shape[-1] ** 0.5
            order = torch.sort(scores, dim=-1, descending=True, stable=True).indices[:, :keep]
            mask[b, h].scatter_(1, order, True)
    return perm, mask


@pytest.mark.parametrize(("latent", "cube", "block_size", "sparsity"), [
    ((4, 4, 8), (2, 2, 4), 16, 0.75),   # every tile full: 8 blocks, one tile each
    ((5, 6, 7), (2, 2, 4), 16, 0.9),    # edge tiles on every axis, packed at the tail; 210 tokens, ragged last block
    ((3, 9, 16), (1, 4, 4), 16, 0.5),   # edge tiles along H only
])
def test_vsa_mask_follows_its_rule_in_its_cube_order(latent, cube, block_size, sparsity):
    n = latent[0] * latent[1] * latent[2]
    q, k, v = _qkv(2, 2, n, seed=3)
    perm, expected = _vsa_reference(q, k, latent, cube, block_size, sparsity)
    built = masks.get("vsa").build_ordered(q, k, v, block_size, latent=latent, cube=cube, sparsity=sparsity)
    assert torch.equal(built.order.q_perm[1, 1], perm) and torch.equal(built.order.kv_perm[0, 1], perm)
    assert torch.equal(built.mask, expected)
    assert torch.equal(masks.build_ordered("vsa", q, k, v, block_size, latent=latent, cube=cube,
                                           sparsity=sparsity).mask, expected)


def test_vsa_labels_name_each_positions_tile_in_raster_tile_order():
    latent, cube = (3, 4, 6), (2, 2, 4)  # tiles: 2 x 2 x 2; t and w cut short
    q, k, _ = _qkv(1, 1, 72)
    order = masks.get("vsa").token_order(q, k, block_size=16, latent=latent, cube=cube, sparsity=0.5)
    index = torch.arange(72).view(3, 4, 6)
    for position in range(72):
        t, h, w = (int(c) for c in torch.nonzero(index == order.q_perm[0, 0, position])[0])
        assert order.q_labels[0, 0, position] == ((t // 2) * 2 + h // 2) * 2 + w // 4


def test_vsa_keeps_k_blocks_per_row_ceil_of_one_minus_sparsity():
    q, k, v = _qkv(1, 3, 5 * 6 * 7, seed=4)
    mask = masks.build_ordered("vsa", q, k, v, 16, latent=(5, 6, 7), cube=(2, 2, 4), sparsity=0.8).mask  # 14 blocks
    assert (mask.sum(-1) == 3).all()  # ceil(0.2 * 14)


def test_vsa_top_k_takes_tied_scores_in_index_order():
    from wavealign.masks.vsa import select_top_k

    scores = torch.tensor([[1.0, 2.0, 2.0, 2.0, 0.0], [3.0, 3.0, 3.0, 3.0, 3.0]])
    assert select_top_k(scores, 2).tolist() == [[False, True, True, False, False],
                                                [True, True, False, False, False]]


def test_vsa_without_a_latent_says_it_needs_one():
    q, k, v = _qkv(1, 1, 64)
    with pytest.raises(ValueError, match=r"method 'vsa' needs latent=\(T, H, W\)"):
        masks.build_ordered("vsa", q, k, v, 16, cube=(1, 4, 4))


def test_vsa_refuses_a_cube_that_is_not_one_block():
    q, k, v = _qkv(1, 1, 64)
    with pytest.raises(ValueError, match="cube must hold one block"):
        masks.build_ordered("vsa", q, k, v, 16, latent=(1, 8, 8), cube=(2, 2, 2))


# --- in the integrations -------------------------------------------------------------------------------------------

def _attention(method: str, reorder: str, **kwargs) -> BlockSparseAttention:
    return BlockSparseAttention(method=method, backend="reference", reorder=reorder, hardware="h100", block_size=16,
                                **kwargs)


def test_vsa_with_wavealigns_order_gives_bitwise_the_output_of_vsa_alone():
    latent = (5, 6, 7)  # 210 tokens: edge cubes on every axis, a ragged last block
    q, k, v = _qkv(1, 2, 210, d=16, seed=5)
    params = {"cube": (2, 2, 4), "sparsity": 0.7}
    alone = _attention("vsa", "never", latent=latent, method_params=params)
    aligned = _attention("vsa", "always", latent=latent, method_params=params)
    out = alone(q, k, v)
    assert torch.equal(aligned(q, k, v), out)
    assert aligned.calls[-1].reordered and not alone.calls[-1].reordered
    # and it is attention under VSA's mask, back in the original token order
    built = masks.get("vsa").build_ordered(q, k, v, 16, latent=latent, **params)
    block = torch.empty(210, dtype=torch.long)
    block[built.order.q_perm[0, 0]] = torch.arange(210) // 16  # each original token's block in the cube order
    allowed = built.mask[0][:, block][:, :, block]  # (H, N, N) token-level mask
    scores = (q[0] @ k[0].transpose(-1, -2)) / 4.0
    expected = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v[0]
    assert torch.allclose(out[0], expected, atol=1e-5)
    assert 0 < aligned.calls[-1].density < 1


def test_a_static_method_is_planned_once_per_shape_across_layers_and_denoising_steps():
    attend = _attention("radial", "always", latent=(5, 3, 7))
    q, k, v = _qkv(1, 2, 105, d=16)
    outputs = [attend(q + step, k, v, layer=layer) for step in range(3) for layer in range(2)]
    assert [c.plan_reused for c in attend.calls] == [False] + [True] * 5
    assert attend.calls[0].reorder_ms > 0 and all(c.reorder_ms == 0 and c.mask_ms == 0 for c in attend.calls[1:])
    assert not torch.equal(outputs[0], outputs[2])  # each step still computes on its own Q
    assert torch.equal(attend(q, k, v, layer=1), outputs[0])
    q2, k2, v2 = _qkv(1, 2, 126, d=16)  # another video shape: a plan of its own
    attend(q2, k2, v2, latent=(6, 3, 7))
    assert not attend.calls[-1].plan_reused


def test_a_static_method_plans_every_call_when_plans_are_not_reused():
    attend = _attention("radial", "always", latent=(5, 3, 7), reuse_static_plans=False)
    q, k, v = _qkv(1, 2, 105, d=16)
    first, second = attend(q, k, v), attend(q, k, v)
    assert torch.equal(first, second) and not any(c.plan_reused for c in attend.calls)


def test_a_method_that_reads_the_latent_says_so_where_a_call_has_none():
    attend = _attention("radial", "never")
    q, k, v = _qkv(1, 1, 105, d=16)
    with pytest.raises(ValueError, match=r"method 'radial' needs latent=\(T, H, W\)"):
        attend(q, k, v)
    with pytest.raises(ValueError, match="latent"):
        _attention("vsa", "never", latent=(5, 3))


def test_diffusers_apply_reads_each_forwards_latent_from_the_model():
    diffusers = pytest.importorskip("diffusers")
    from wavealign.integrations import diffusers as wa

    torch.manual_seed(0)
    model = diffusers.WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
        text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, rope_max_seq_len=64).eval()
    gen = torch.Generator().manual_seed(1)
    text = torch.randn(1, 8, 32, generator=gen)

    def forward(frames: int, height: int, width: int) -> torch.Tensor:
        latents = torch.randn(1, 4, frames, height, width, generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            return model(hidden_states=latents, timestep=torch.tensor([500]), encoder_hidden_states=text,
                         return_dict=False)[0]

    params = {"cube": (1, 4, 4), "sparsity": 0.5}
    with wa.apply(model, method="vsa", reorder="never", backend="reference", hardware="h100", block_size=16,
                  **params) as plain:
        alone = forward(3, 16, 24)
        assert plain.attention.latent == (3, 8, 12)
        forward(2, 16, 16)
        assert plain.attention.latent == (2, 8, 8)
    with wa.apply(model, method="vsa", reorder="always", backend="reference", hardware="h100", block_size=16,
                  **params) as aligned:
        assert torch.equal(forward(3, 16, 24), alone)
    assert all(c.reordered for c in aligned.attention.calls)
    assert not model._forward_pre_hooks  # removed with the processors


# --- on the GPU ----------------------------------------------------------------------------------------------------

def test_a_sweep_cell_of_a_token_ordered_method_times_its_mask_on_q_k_v_in_that_order():
    """The sweep's inputs pair the mask with Q/K/V gathered into the method's order, so a timed cell runs the
    method's own attention, not its mask over the tokens in another order."""
    from wavealign import inputs
    from wavealign.records import InputSpec

    wl = workloads.preset("wan2.1-1.3b", 5, "480p")  # latent (2, 30, 52): 3,120 tokens
    spec = InputSpec(workload="tiny", method="vsa", seq_len_tokens=wl.seq_len, num_heads=1, head_dim=wl.head_dim,
                     model=wl.model, resolution="480p", frames=5, heads=[3], generator=workloads.DEFAULT_GENERATOR)
    cpu = torch.device("cpu")
    mask, qkv = inputs.build(inputs.InputRequest(spec, 128, cpu, with_qkv=True))
    q, k, v = inputs._workload_qkv(spec, cpu)
    built = masks.build_ordered("vsa", q, k, v, 128, latent=wl.latent)
    assert torch.equal(mask, built.mask[0])
    assert all(torch.equal(got, want) for got, want in zip(qkv, (built.q, built.k, built.v), strict=True))
    assert not torch.equal(qkv[0], q)


WAN14B_401 = (101, 45, 80)  # Wan2.1-14B 720p, 401 frames: 363,600 tokens, 2,841 blocks of 128


@pytest.mark.gpu
def test_vsa_builds_a_live_layer_of_363600_tokens_by_40_heads_on_the_gpu():
    """The live layer's size fits, keeps k blocks per row, and its head chunks give each head what it gives alone."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 40, 363_600, 128, generator=gen, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    mask = masks.build_ordered("vsa", q, k, v, 128, latent=WAN14B_401).mask
    extra_gib = (torch.cuda.max_memory_allocated() - before) / 2**30
    assert mask.shape == (1, 40, 2841, 2841)
    assert (mask.sum(-1) == math.ceil(0.1 * 2841)).all()
    assert extra_gib < 16  # Q/K/V gathered into the cube order (8.3 GiB) and ~1 GiB of scores at a time
    few = masks.build_ordered("vsa", q[:, 5:7], k[:, 5:7], v[:, 5:7], 128, latent=WAN14B_401).mask
    assert torch.equal(few, mask[:, 5:7])


@pytest.mark.gpu
def test_radial_on_the_gpu_is_the_cpus_mask_at_363600_tokens():
    on_gpu = masks.get("radial").for_shape(2, 2841, 2841, "cuda", block_size=128, latent=WAN14B_401)
    on_cpu = masks.get("radial").for_shape(1, 2841, 2841, block_size=128, latent=WAN14B_401)
    assert torch.equal(on_gpu.cpu()[1], on_cpu[0])
    assert 0 < float(on_cpu.float().mean()) < 1


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["vsa", "radial"])
def test_fa4_with_wavealign_gives_bitwise_each_video_methods_own_output(method):
    wl = workloads.preset("wan2.1-1.3b", 33, "480p")  # 9 x 30 x 52 = 14,040 tokens: edge cubes, a ragged block
    q, k, v = workloads.synthetic(wl, heads=[0, 3], layer=5, step=10, seed=2, device="cuda")
    runs = {reorder: BlockSparseAttention(method=method, backend="fa4", reorder=reorder, latent=wl.latent)
            for reorder in ("never", "always")}
    outputs = {reorder: [attend(q, k, v, layer=layer) for layer in range(2)] for reorder, attend in runs.items()}
    assert all(torch.equal(a, b) for a, b in zip(outputs["never"], outputs["always"], strict=True))
    assert runs["always"].calls[0].reordered and 0 < runs["always"].calls[0].density < 1
    assert [c.plan_reused for c in runs["always"].calls] == [False, method == "radial"]
