"""The WAVEALIGN backend in vLLM-Omni's own classes (``pip install 'wavealign[vllm-omni]'``; skipped without it).

vLLM-Omni 0.30 needs vLLM 0.30 and torch 2.13 (6.5 GB with its dependencies), so CI does not install it; these tests
ran in a separate environment (README, "Use it in vllm-omni"). On a CPU, the impl's ``forward_cuda`` is called
directly: ``forward`` dispatches on the platform, and a CPU has none of vLLM-Omni's.
"""

import importlib.metadata
import json

import pytest
import torch

pytest.importorskip("vllm_omni")

from vllm_omni.diffusion.attention.backends.abstract import AttentionMetadata, VideoTokenLayout
from vllm_omni.diffusion.attention.backends.registry import DiffusionAttentionBackendEnum

from wavealign.integrations import vllm_omni as wa

HEADS, DIM, GRID = 2, 32, (4, 4, 4)  # 64 video tokens = 4 blocks of 16
VIDEO = AttentionMetadata(video_layout=VideoTokenLayout(prefix_len=0, latent_grid=GRID))


def impl(monkeypatch, dim=DIM, scale=None, causal=False, **settings):
    base = {"method": "xattention", "backend": "reference", "reorder": "always", "hardware": "h200",
            "block_size": 16, "method_params": {"threshold": 0.5}}
    monkeypatch.setenv(wa.SETTINGS_ENV, json.dumps({**base, **settings}))
    return wa.WaveAlignBackend.get_impl_cls()(num_heads=HEADS, head_size=dim, causal=causal, qkv_layout="BSND",
                                               softmax_scale=dim ** -0.5 if scale is None else scale)


def qkv(seed=0, dim=DIM, kv_heads=HEADS):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 64, HEADS, dim, generator=gen)
    return (q, *(torch.randn(1, 64, kv_heads, dim, generator=gen) for _ in range(2)))


def sdpa(q, k, v, mask=None, scale=None, **options):
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale,
                                                            **options).transpose(1, 2)


def test_vllm_omnis_plugin_loader_registers_the_backend():
    plugins = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="vllm_omni.general_plugins")}
    if plugins.get("wavealign") != "wavealign.integrations.vllm_omni:register":
        pytest.skip("wavealign is not installed as a distribution here (its entry point is in pyproject.toml)")
    from vllm_omni.plugins import load_omni_general_plugins

    load_omni_general_plugins()
    assert DiffusionAttentionBackendEnum["WAVEALIGN"].get_class() is wa.WaveAlignBackend
    wa.register()  # a second call (another worker's plugin load) changes nothing
    assert DiffusionAttentionBackendEnum["WAVEALIGN"].get_class() is wa.WaveAlignBackend


def test_video_self_attention_runs_block_sparse_and_the_reorder_changes_no_bit(monkeypatch):
    q, k, v = qkv()
    reordered, original = impl(monkeypatch), impl(monkeypatch, reorder="never")
    out = reordered.forward_cuda(q, k, v, VIDEO)
    assert out.shape == q.shape
    assert torch.equal(out, original.forward_cuda(q, k, v, VIDEO))
    assert [c.reordered for c in reordered.attention.calls] == [True]
    assert 0 < reordered.attention.calls[0].density < 1
    # an all-ones mask through the same path is dense attention
    dense = impl(monkeypatch, method="dense", method_params={})
    torch.testing.assert_close(dense.forward_cuda(q, k, v, VIDEO), sdpa(q, k, v), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("meta", [
    AttentionMetadata(attn_mask=torch.ones(1, 64, dtype=torch.bool).index_fill_(1, torch.arange(60, 64), False)),
    AttentionMetadata(video_layout=VideoTokenLayout(prefix_len=8, latent_grid=(2, 4, 7))),
], ids=["attn_mask", "text_prefix"])
def test_a_call_block_sparse_cannot_serve_goes_to_sdpa(monkeypatch, meta):
    q, k, v = qkv(1)
    layer = impl(monkeypatch)
    out = layer.forward_cuda(q, k, v, meta)
    mask = None if meta.attn_mask is None else meta.attn_mask[:, None, None, :]
    torch.testing.assert_close(out, sdpa(q, k, v, mask))
    assert layer.attention.calls == []


def test_vllm_omnis_own_wan_scale_takes_the_block_sparse_path(monkeypatch):
    """WanSelfAttention passes 1.0 / head_dim**0.5, one ulp from head_dim**-0.5 at 128."""
    layer = impl(monkeypatch, dim=128, scale=1.0 / (128 ** 0.5))
    layer.forward_cuda(*qkv(2, dim=128), VIDEO)
    assert [c.reordered for c in layer.attention.calls] == [True]


@pytest.mark.parametrize("case", ["causal", "other_scale", "fewer_kv_heads"])
def test_attention_block_sparse_does_not_compute_goes_to_sdpa(monkeypatch, case):
    q, k, v = qkv(3, kv_heads=1 if case == "fewer_kv_heads" else HEADS)
    scale = 0.5 if case == "other_scale" else None
    layer = impl(monkeypatch, causal=case == "causal", scale=scale)
    expected = sdpa(q, k, v, scale=scale, is_causal=case == "causal", enable_gqa=case == "fewer_kv_heads")
    torch.testing.assert_close(layer.forward_cuda(q, k, v, VIDEO), expected)
    assert layer.attention.calls == []


def test_a_layer_keeps_only_its_latest_call_records(monkeypatch):
    monkeypatch.setattr(wa, "KEPT_CALLS", 2)
    layer = impl(monkeypatch, reorder="never")
    for seed in range(3):
        layer.forward_cuda(*qkv(seed), VIDEO)
    assert len(layer.attention.calls) == 2


def test_bad_settings_and_layouts_are_refused_when_the_layer_is_built(monkeypatch):
    with pytest.raises(ValueError, match="qkv_layout"):
        wa.WaveAlignImpl(num_heads=HEADS, head_size=DIM, softmax_scale=DIM ** -0.5, qkv_layout="BHSD")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['methd'\]"):
        wa.settings({wa.SETTINGS_ENV: '{"methd": "xattention"}'})
    with pytest.raises(ValueError, match="must hold a JSON object"):
        wa.settings({wa.SETTINGS_ENV: "xattention"})
    with pytest.raises(ValueError, match="threshold"):
        impl(monkeypatch, method_params={"threshold": 2.0})
