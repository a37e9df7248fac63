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


def impl(monkeypatch, **settings):
    base = {"method": "xattention", "backend": "reference", "reorder": "always", "hardware": "h200",
            "block_size": 16, "method_params": {"threshold": 0.5}}
    monkeypatch.setenv(wa.SETTINGS_ENV, json.dumps({**base, **settings}))
    return wa.WaveAlignBackend.get_impl_cls()(num_heads=HEADS, head_size=DIM, softmax_scale=DIM ** -0.5,
                                               qkv_layout="BSND")


def qkv(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, 64, HEADS, DIM, generator=gen) for _ in range(3))


def sdpa(q, k, v, mask=None):
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2)


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


def test_bad_settings_and_layouts_are_refused_when_the_layer_is_built(monkeypatch):
    with pytest.raises(ValueError, match="qkv_layout"):
        wa.WaveAlignImpl(num_heads=HEADS, head_size=DIM, softmax_scale=DIM ** -0.5, qkv_layout="BHSD")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['methd'\]"):
        wa.settings({wa.SETTINGS_ENV: '{"methd": "xattention"}'})
    with pytest.raises(ValueError, match="must hold a JSON object"):
        wa.settings({wa.SETTINGS_ENV: "xattention"})
    with pytest.raises(ValueError, match="threshold"):
        impl(monkeypatch, method_params={"threshold": 2.0})
