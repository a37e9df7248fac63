"""WaveAlign as a vLLM-Omni diffusion attention backend: ``--diffusion-attention-backend WAVEALIGN``.

    pip install 'wavealign[vllm-omni]'         # declares register() under vllm-omni's plugin entry point
    WAVEALIGN_VLLM_OMNI='{"method": "xattention", "backend": "fa4", "reorder": "adaptive"}' \\
        vllm serve Wan-AI/Wan2.1-T2V-14B-Diffusers --omni --diffusion-attention-backend WAVEALIGN

vLLM-Omni loads the plugins of its ``vllm_omni.general_plugins`` entry-point group in every diffusion worker before
the model is built; ``register`` adds the ``WAVEALIGN`` member to its backend enum. The backend's impl runs each
self-attention call (q, k, v as (B, S, H, D), ``qkv_layout="BSND"``) through ``BlockSparseAttention``: the method's
mask from the live Q/K, the skip policy, the reorder, the kernel, the output back in the original order. A call it
cannot serve block-sparse (an attention mask, joint text tokens, a non-video prefix, cross-attention, fewer K/V
heads, a causal mask, a scale other than 1/sqrt(D)) goes to PyTorch's SDPA. The settings come from the JSON in
``WAVEALIGN_VLLM_OMNI`` (keys of ``BlockSparseAttention``), read when a layer is built, since vLLM-Omni's typed
attention config has no place for another backend's options.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import fields
from typing import Any

import torch

from wavealign.integrations.attention import BlockSparseAttention

NAME = "WAVEALIGN"
SETTINGS_ENV = "WAVEALIGN_VLLM_OMNI"
# what the backend takes from SETTINGS_ENV: BlockSparseAttention's own arguments, less its call log
SETTINGS = tuple(f.name for f in fields(BlockSparseAttention) if f.init and f.name != "calls")
# a server runs for days: each layer keeps the records of its latest calls only
KEPT_CALLS = 1000

try:
    from vllm_omni.diffusion.attention.backends.abstract import AttentionBackend, AttentionImpl, AttentionMetadata
except ImportError as exc:
    raise ImportError("wavealign.integrations.vllm_omni needs vLLM-Omni: pip install 'wavealign[vllm-omni]'") \
        from exc


def settings(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """``BlockSparseAttention``'s arguments from ``SETTINGS_ENV`` (empty: its defaults); an unknown key or a value
    that is not JSON is a ValueError naming it."""
    raw = (os.environ if environ is None else environ).get(SETTINGS_ENV, "").strip()
    if not raw:
        return {}
    try:
        given = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{SETTINGS_ENV} must hold a JSON object, got {raw!r}: {exc}") from None
    if not isinstance(given, dict):
        raise ValueError(f"{SETTINGS_ENV} must hold a JSON object of {SETTINGS}, got {raw!r}")
    if unknown := sorted(set(given) - set(SETTINGS)):
        raise ValueError(f"{SETTINGS_ENV} has unknown key(s) {unknown}; expected some of {SETTINGS}")
    return given


class WaveAlignImpl(AttentionImpl):
    """One attention layer: self-attention through ``BlockSparseAttention`` (checked when the layer is built)."""

    def __init__(self, num_heads: int, head_size: int, softmax_scale: float, causal: bool = False,
                 num_kv_heads: int | None = None, prefix: str = "", qkv_layout: str | None = None,
                 backend_kwargs: dict[str, Any] | None = None, **extra_impl_args: Any) -> None:
        if qkv_layout not in (None, "BSND"):
            raise ValueError(f"the {NAME} backend takes q, k, v as BSND (batch, sequence, heads, dim), got "
                             f"qkv_layout={qkv_layout!r}")
        self.num_heads, self.head_size, self.softmax_scale = num_heads, head_size, softmax_scale
        self.causal, self.prefix = causal, prefix
        # the layer's index in its model ("blocks.20.attn1" -> 20) keys the layer's tuned per-head configs
        self.layer = int(next(iter(re.findall(r"\d+", prefix)), 0))
        self.attention = BlockSparseAttention(**settings())

    def _block_sparse(self, query: torch.Tensor, key: torch.Tensor, meta: AttentionMetadata | None) -> bool:
        """Whether this call is plain video self-attention the block-sparse path computes exactly."""
        if self.causal or query.shape != key.shape:
            return False
        if not math.isclose(self.softmax_scale, self.head_size ** -0.5, rel_tol=1e-6):  # the kernels' 1/sqrt(D)
            return False
        if meta is None:
            return True
        layout = meta.video_layout
        return (meta.attn_mask is None and meta.joint_query is None and meta.joint_key is None
                and not meta.full_attn_spans and not meta.query_ranges
                and (layout is None or not (layout.prefix_len or layout.video_spans
                                            or (layout.used_len not in (None, query.shape[1])))))

    def forward_cuda(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attn_metadata: AttentionMetadata | None = None) -> torch.Tensor:
        """(B, S, H, D) in, (B, S, H, D) out."""
        q, k, v = (x.transpose(1, 2) for x in (query, key, value))
        if not self._block_sparse(query, key, attn_metadata):
            mask = None if attn_metadata is None else attn_metadata.attn_mask
            if mask is not None and mask.dim() == 2:  # (B, S_kv) keep-mask over keys
                mask = mask.bool()[:, None, None, :]
            out = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=self.causal, scale=self.softmax_scale,
                enable_gqa=q.shape[1] != k.shape[1])
        else:
            out = self.attention(q, k, v, layer=self.layer)
            del self.attention.calls[:-KEPT_CALLS]
        return out.transpose(1, 2)


class WaveAlignBackend(AttentionBackend):
    """vLLM-Omni's view of the backend: its name, impl class and head sizes."""

    @staticmethod
    def get_name() -> str:
        return NAME

    @staticmethod
    def get_impl_cls() -> type[WaveAlignImpl]:
        return WaveAlignImpl

    @staticmethod
    def get_metadata_cls() -> type[AttentionMetadata]:
        return AttentionMetadata

    @staticmethod
    def get_builder_cls():
        return None

    @staticmethod
    def get_supported_head_sizes() -> list[int]:
        return [64, 128]  # what the block-sparse kernels take (the triton backend: 64 and 128)


def register() -> None:
    """Add ``WAVEALIGN`` to vLLM-Omni's diffusion attention backends (its plugin entry point calls this in every
    worker; a second call is a no-op)."""
    import aenum
    from vllm_omni.diffusion.attention.backends.registry import DiffusionAttentionBackendEnum

    if NAME not in DiffusionAttentionBackendEnum.__members__:
        aenum.extend_enum(DiffusionAttentionBackendEnum, NAME, f"{__name__}.{WaveAlignBackend.__name__}")
