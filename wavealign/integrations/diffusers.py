"""WaveAlign in a diffusers Wan transformer: block-sparse, reordered self-attention on every ``attn1``.

    from wavealign.integrations import diffusers as wa
    installed = wa.apply(pipe.transformer, method="xattention", backend="fa4", reorder="adaptive")
    video = pipe(prompt, ...)            # self-attention now runs mask -> skip -> reorder -> kernel -> restore
    installed.attention.calls            # per call: density, reordered or not and why, mask and plan ms
    installed.remove()                   # the stock processors back

How it hooks in: diffusers' Wan processor computes Q/K/V (projections, RMSNorm, RoPE) and hands them to its
module's ``dispatch_attention_fn``. The installed processor is the stock ``WanAttnProcessor`` with that one call
routed, for the duration of its own call, to ``BlockSparseAttention``; everything around attention stays
diffusers' own code. A call with an attention mask, or whose K/V length differs from Q's (cross-attention, the
image context of I2V), goes to the stock function. Cross-attention processors (``attn2``) are not touched.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from wavealign.integrations.attention import BlockSparseAttention

SELF_ATTENTION = ".attn1.processor"  # Wan blocks name self-attention attn1 and cross-attention attn2


def _wan_module() -> Any:
    try:
        from diffusers.models.transformers import transformer_wan
    except ImportError as exc:
        raise ImportError("wavealign.integrations.diffusers needs diffusers: pip install 'wavealign[diffusers]'") \
            from exc
    return transformer_wan


@contextlib.contextmanager
def _dispatch_routed(route: Callable[[Callable[..., torch.Tensor]], Callable[..., torch.Tensor]]) -> Iterator[None]:
    """Within the block, Wan's processors call ``route(stock)`` instead of ``dispatch_attention_fn`` (``stock``)."""
    wan = _wan_module()
    stock = wan.dispatch_attention_fn
    wan.dispatch_attention_fn = route(stock)
    try:
        yield
    finally:
        wan.dispatch_attention_fn = stock


def processor_class() -> type:
    """``WanAttnProcessor`` with its attention dispatch routed to a ``BlockSparseAttention``."""
    wan = _wan_module()

    class WaveAlignWanAttnProcessor(wan.WanAttnProcessor):
        """The stock Wan processor whose self-attention runs through WaveAlign."""

        def __init__(self, attention: BlockSparseAttention) -> None:
            super().__init__()
            self.attention = attention

        def __call__(self, attn: Any, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            with _dispatch_routed(lambda stock: functools.partial(self._attend, stock)):
                return super().__call__(attn, hidden_states, *args, **kwargs)

        def _attend(self, stock: Callable[..., torch.Tensor], query: torch.Tensor, key: torch.Tensor,
                    value: torch.Tensor, attn_mask: Any = None, **kwargs: Any) -> torch.Tensor:
            if attn_mask is not None or key.shape[1] != query.shape[1]:
                return stock(query, key, value, attn_mask=attn_mask, **kwargs)
            # diffusers passes (B, S, H, D); the kernels take (B, H, S, D)
            out = self.attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2))
            return out.transpose(1, 2)

    return WaveAlignWanAttnProcessor


@dataclass
class Installed:
    """WaveAlign installed on a transformer: ``attention`` (its calls recorded), the layers it runs in, and
    ``remove()`` to put the original processors back (also on leaving a ``with`` block)."""

    transformer: Any
    attention: BlockSparseAttention
    layers: list[str]
    _original: dict[str, Any]

    def remove(self) -> None:
        self.transformer.set_attn_processor(dict(self._original))  # set_attn_processor empties the dict it gets

    def __enter__(self) -> Installed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def apply(transformer: Any, method: str = "xattention", backend: str = "fa4", reorder: str = "adaptive", *,
          block_size: int = 128, hardware: str | None = None, wave_size: int | None = None,
          reorderer: str = "wavealign", **method_params: Any) -> Installed:
    """Install WaveAlign on every self-attention layer (``attn1``) of a diffusers Wan ``transformer``.

    ``method`` and ``method_params`` pick the mask (``wavealign.masks``), ``backend`` the kernel
    (``wavealign.kernels``), ``reorder`` "always", "never" or "adaptive" (the skip profile of ``hardware`` decides
    per call). Arguments are checked here, before any forward pass."""
    if not hasattr(transformer, "attn_processors") or not hasattr(transformer, "set_attn_processor"):
        raise ValueError(f"transformer must be a diffusers model with attention processors (e.g. "
                         f"WanTransformer3DModel), got {type(transformer).__name__}")
    original = dict(transformer.attn_processors)
    layers = [name for name in original if name.endswith(SELF_ATTENTION)]
    if not layers:
        raise ValueError(f"transformer {type(transformer).__name__} has no self-attention processors named "
                         f"'*{SELF_ATTENTION}'; its processors are {sorted(original)[:4]}...")
    attention = BlockSparseAttention(method=method, backend=backend, reorder=reorder, block_size=block_size,
                                     hardware=hardware, wave_size=wave_size, reorderer=reorderer,
                                     method_params=dict(method_params))
    processor = processor_class()(attention)
    transformer.set_attn_processor({name: processor if name in layers else proc for name, proc in original.items()})
    return Installed(transformer=transformer, attention=attention, layers=layers, _original=original)
