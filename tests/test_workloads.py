"""Specification of wavealign.workloads: presets, RoPE, the synthetic generator and the captured loader."""

from __future__ import annotations

import importlib

import pytest
import torch
from safetensors.torch import save_file

from wavealign import workloads
from wavealign.workloads.clusters import GEN_CHUNK_TOKENS
from wavealign.workloads.rope import apply_rope, positions

# the generator module (the package exports its function ``synthetic`` under the same name)
synthetic_module = importlib.import_module("wavealign.workloads.clusters")
SMALL = ("wan2.1-1.3b", 9, "480p")  # 3 latent frames x 30 x 52 = 4680 tokens


def only(head_type: str, **kw) -> workloads.GeneratorConfig:
    return workloads.GeneratorConfig(mix_first_layer={head_type: 1.0}, mix_last_layer={head_type: 1.0}, **kw)


def test_wan14b_preset_at_401_frames_720p_has_363600_tokens_and_40_heads_of_128():
    wl = workloads.preset("wan2.1-14b", frames=401, resolution="720p")
    assert (wl.seq_len, wl.heads, wl.head_dim, wl.layers) == (363600, 40, 128, 40)
    assert (wl.latent_frames, wl.grid_height, wl.grid_width, wl.tokens_per_frame) == (101, 45, 80, 3600)


@pytest.mark.parametrize(("model", "frames", "resolution", "tokens"), [
    ("wan2.1-14b", 161, "720p", 147600), ("wan2.1-14b", 481, "720p", 435600),
    ("wan2.1-1.3b", 121, "720p", 111600), ("wan2.1-1.3b", 241, "720p", 219600),
    ("ltx-2.3", 601, "1216x1920", 173280), ("ltx-2.3", 1401, "1216x1920", 401280),
])
def test_presets_reproduce_the_papers_token_ranges(model, frames, resolution, tokens):
    assert workloads.preset(model, frames, resolution).seq_len == tokens


def test_wan13b_has_12_heads_and_30_layers_and_ltx_32_heads_and_48_layers():
    assert (workloads.preset(*SMALL).heads, workloads.preset(*SMALL).layers) == (12, 30)
    ltx = workloads.preset("ltx-2.3", 9, "1216x1920")
    assert (ltx.heads, ltx.head_dim, ltx.layers, ltx.tokens_per_frame) == (32, 128, 48, 38 * 60)


def test_wan_rope_splits_head_dim_128_into_44_42_42():
    assert workloads.preset(*SMALL).rope.channels == (44, 42, 42)


@pytest.mark.parametrize(("args", "word"), [
    (("wan2.2", 9, "480p"), "model"), (("wan2.1-14b", 9, "1080p"), "resolution"),
    (("wan2.1-14b", 10, "720p"), "frames"), (("ltx-2.3", 13, "1216x1920"), "frames"),
])
def test_preset_rejects_unknown_model_resolution_and_bad_frame_counts(args, word):
    with pytest.raises(ValueError, match=word):
        workloads.preset(*args)


def test_positions_are_frame_major_t_h_w_of_the_preset_grid():
    wl = workloads.preset(*SMALL)
    pos = positions(wl)
    t, h, w = 2, 7, 11
    assert pos[t * wl.tokens_per_frame + h * wl.grid_width + w].tolist() == [t, h, w]
    assert pos[-1].tolist() == [wl.latent_frames - 1, wl.grid_height - 1, wl.grid_width - 1]
    assert torch.equal(positions(wl, 100, 200), pos[100:200])


def test_rope_scores_depend_only_on_relative_position():
    wl = workloads.preset(*SMALL)
    x, y = torch.randn(2, 1, 128, generator=torch.Generator().manual_seed(0))
    p, r = torch.tensor([[1, 5, 9]]), torch.tensor([[0, 2, 30]])
    shift = torch.tensor([[1, 3, 4]])
    a = (apply_rope(x, p, wl.rope) * apply_rope(y, r, wl.rope)).sum()
    b = (apply_rope(x, p + shift, wl.rope) * apply_rope(y, r + shift, wl.rope)).sum()
    assert torch.allclose(a, b, atol=1e-4)


def test_synthetic_gives_one_batch_of_the_chosen_heads():
    wl = workloads.preset(*SMALL)
    q, k, v = workloads.synthetic(wl, heads=[0, 3], seed=0)
    for t in (q, k, v):
        assert t.shape == (1, 2, wl.seq_len, 128) and t.dtype == torch.float32
    q3, _, _ = workloads.synthetic(wl, heads=[3], seed=0)
    assert torch.equal(q[:, 1:], q3)


def test_synthetic_is_deterministic_by_seed():
    wl = workloads.preset(*SMALL)
    a = workloads.synthetic(wl, heads=[1], seed=5)
    b = workloads.synthetic(wl, heads=[1], seed=5)
    c = workloads.synthetic(wl, heads=[1], seed=6)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], c[0])


def test_synthetic_holds_the_heads_iter_heads_yields_one_by_one():
    """``synthetic`` writes every head into one allocation; head for head it is what ``iter_heads`` yields, over
    more than one generator chunk of tokens."""
    wl = workloads.preset("wan2.1-1.3b", 61, "480p")
    assert wl.seq_len > GEN_CHUNK_TOKENS
    together = workloads.synthetic(wl, heads=[4, 1], layer=3, step=7, seed=2)
    for i, (_, *one) in enumerate(workloads.iter_heads(wl, [4, 1], layer=3, step=7, seed=2)):
        assert all(torch.equal(t[:, i:i + 1], o) for t, o in zip(together, one, strict=True))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_head_computed_in_spans_of_chunks_equals_it_computed_chunk_by_chunk(device, monkeypatch):
    """The generator draws noise per fixed chunk and computes the rest over spans of chunks; every step is per
    token, so spans of one chunk give the same tensors, bit for bit (a span boundary falls inside the sequence)."""
    wl = workloads.preset("wan2.1-1.3b", 61, "480p")  # 24,960 tokens: two chunks
    monkeypatch.setattr(synthetic_module, "SPAN_CHUNKS", {device: 2})
    spans = workloads.synthetic(wl, heads=[2, 5], layer=1, step=3, seed=4, device=device)
    monkeypatch.setattr(synthetic_module, "SPAN_CHUNKS", {device: 1})
    chunks = workloads.synthetic(wl, heads=[2, 5], layer=1, step=3, seed=4, device=device)
    assert all(torch.equal(a, b) for a, b in zip(spans, chunks, strict=True))


def test_keys_are_rms_normalised_and_queries_scaled_by_the_head_sharpness():
    wl = workloads.preset(*SMALL)
    (spec, q, k, _), = workloads.iter_heads(wl, [2], config=workloads.generator("clusters"))
    assert torch.allclose(k.pow(2).mean(-1), torch.ones(()), atol=1e-3)
    assert torch.allclose(q.pow(2).mean(-1).sqrt(), torch.tensor(spec.sharpness), rtol=1e-3)


def test_head_types_follow_the_layer_mix_from_first_to_last_layer():
    wl = workloads.preset(*SMALL)
    cfg = workloads.GeneratorConfig(mix_first_layer={"spatial": 1.0}, mix_last_layer={"semantic": 1.0})
    assert set(workloads.head_types(wl, 0, config=cfg)) == {"spatial"}
    assert set(workloads.head_types(wl, wl.layers - 1, config=cfg)) == {"semantic"}
    middle = workloads.head_types(wl, (wl.layers - 1) // 2, config=cfg)
    assert 0 < middle.count("spatial") < wl.heads


def test_heads_sharpen_over_denoising_steps():
    wl = workloads.preset(*SMALL)
    early = workloads.head_specs(wl, [0], step=0)[0].sharpness
    late = workloads.head_specs(wl, [0], step=49)[0].sharpness
    assert late > early


def _mask(head_type: str, block_size: int = 64) -> tuple[torch.Tensor, int]:
    """The XAttention mask (as float) of one head of the given type, and the blocks per latent frame."""
    from wavealign import masks

    wl = workloads.preset("wan2.1-1.3b", 17, "480p")
    (_, q, k, v), = workloads.iter_heads(wl, [0], config=only(head_type))
    mask = masks.build("xattention", q, k, v, block_size=block_size, keep_first_block=False, keep_diagonal=False)
    return mask[0, 0].float(), wl.tokens_per_frame // block_size


def test_spatial_heads_give_a_band_of_nearby_frames():
    mask, frame_blocks = _mask("spatial")
    r = torch.arange(mask.shape[0])
    near = (r.unsqueeze(1) - r.unsqueeze(0)).abs() <= frame_blocks
    assert float(mask[near].mean()) > 2 * float(mask[~near].mean())


def test_temporal_heads_give_stripes_one_frame_apart():
    mask, frame_blocks = _mask("temporal")
    nb = mask.shape[0]
    offset = torch.arange(nb).unsqueeze(0) - torch.arange(nb).unsqueeze(1)
    on_stripe = torch.zeros_like(mask, dtype=torch.bool)
    for f in range(1, 4):  # the same (h, w) one, two, three frames later
        on_stripe |= (offset - f * frame_blocks).abs() <= 1
    off_stripe = torch.zeros_like(on_stripe)
    for f in range(1, 4):  # half a frame away from those
        off_stripe |= (offset - f * frame_blocks - frame_blocks // 2).abs() <= 1
    assert float(mask[on_stripe].mean()) > 3 * float(mask[off_stripe].mean())


def test_sink_heads_select_frame_zero_more_than_other_frames():
    mask, frame_blocks = _mask("sink")
    assert float(mask[frame_blocks:, :frame_blocks].mean()) > 2 * float(mask[frame_blocks:, frame_blocks:].mean())


def test_captured_round_trip_keeps_tensors_and_metadata(tmp_path):
    q, k, v = torch.randn(3, 1, 2, 24, 8).unbind(0)
    path = workloads.save_captured(tmp_path / "l3s7.safetensors", q, k, v, model="wan2.1-14b", layer=3, step=7,
                                   grid=(2, 3, 4))
    got = workloads.load_captured(path)
    assert torch.equal(got.q, q) and torch.equal(got.k, k) and torch.equal(got.v, v)
    assert (got.model, got.layer, got.step, got.grid) == ("wan2.1-14b", 3, 7, (2, 3, 4))
    assert torch.equal(workloads.load_captured(path, heads=[1]).k, k[:, 1:])


def test_captured_loader_rejects_a_wrong_layout(tmp_path):
    path = tmp_path / "bad.safetensors"
    q, k, v = torch.randn(3, 2, 24, 8).unbind(0)  # (H, N, D): no batch axis
    meta = {"format": workloads.FORMAT, "layout": "BHND", "model": "m", "layer": "0", "step": "0", "grid": "2,3,4"}
    save_file({"q": q, "k": k.clone(), "v": v.clone()}, str(path), metadata=meta)
    with pytest.raises(ValueError, match=r"q must be \(B, H, N, D\)"):
        workloads.load_captured(path)


def test_captured_loader_rejects_a_grid_that_does_not_match_the_tokens(tmp_path):
    q = torch.randn(1, 2, 24, 8)
    with pytest.raises(ValueError, match="grid"):
        workloads.save_captured(tmp_path / "x.safetensors", q, q, q, model="m", layer=0, step=0, grid=(2, 3, 5))


def test_captured_loader_rejects_files_without_the_format_tag(tmp_path):
    path = tmp_path / "plain.safetensors"
    save_file({"q": torch.zeros(1, 1, 4, 2)}, str(path))
    with pytest.raises(ValueError, match="format"):
        workloads.load_captured(path)
