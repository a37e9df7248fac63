"""WaveAlign in a diffusers Wan transformer: block-sparse, reordered self-attention on every ``attn1``
(``apply``), or the live Q/K/V of chosen layers and steps written to files a sweep reads (``capture``).

    from wavealign.integrations import diffusers as wa
    installed = wa.apply(pipe.transformer, method="xattention", backend="fa4", reorder="adaptive")
    video = pipe(prompt, ...)            # self-attention now runs mask -> skip -> reorder -> kernel -> restore
    installed.attention.calls            # per call: density, reordered or not and why, mask and plan ms
    installed.remove()                   # the stock processors back

The latent video a method reads (``radial``, ``vsa``: ``latent=(T, H, W)`` in tokens) is taken from each forward's
``hidden_states`` (its latent frames, height and width over the transformer's patch size) unless ``apply`` is given
one.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import torch

from wavealign.integrations.attention import BlockSparseAttention
from wavealign.workloads.captured import save_captured

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


# a processor's handler sees one self-attention call's q, k, v as (B, H, N, D) and returns its output in that
# layout, or None to let diffusers' own attention compute it
Handler = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], "torch.Tensor | None"]


def processor_class() -> type:
    """``WanAttnProcessor`` whose self-attention calls go to a handler (WaveAlign's attention, or a capture)."""
    wan = _wan_module()

    class WaveAlignWanAttnProcessor(wan.WanAttnProcessor):
        """The stock Wan processor with its self-attention calls handed to ``handler``."""

        def __init__(self, handler: Handler) -> None:
            super().__init__()
            self.handler = handler

        def __call__(self, attn: Any, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            with _dispatch_routed(lambda stock: functools.partial(self._attend, stock)):
                return super().__call__(attn, hidden_states, *args, **kwargs)

        def _attend(self, stock: Callable[..., torch.Tensor], query: torch.Tensor, key: torch.Tensor,
                    value: torch.Tensor, attn_mask: Any = None, **kwargs: Any) -> torch.Tensor:
            if attn_mask is None and key.shape[1] == query.shape[1]:
                # diffusers passes (B, S, H, D); the kernels take (B, H, S, D)
                out = self.handler(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2))
                if out is not None:
                    return out.transpose(1, 2)
            return stock(query, key, value, attn_mask=attn_mask, **kwargs)

    return WaveAlignWanAttnProcessor


def token_grid(transformer: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[int, int, int]:
    """The latent token grid (T, H, W) of one forward of a Wan ``transformer`` called with ``args``, ``kwargs``: its
    ``hidden_states`` (B, C, F, H, W) over the patch size, the tokens its self-attention sees, frame-major."""
    latents = kwargs.get("hidden_states", args[0] if args else None)
    patch = transformer.config.patch_size
    return tuple(int(n) // int(p) for n, p in zip(latents.shape[2:], patch, strict=True))  # type: ignore[return-value]


class _Removable:
    """What ``apply`` and ``capture`` return: ``remove()`` puts the transformer's original processors back (and drops
    a forward hook, where one was installed), also on leaving a ``with`` block. Subclasses hold ``transformer``,
    ``_original`` and ``_hook``."""

    transformer: Any
    _original: dict[str, Any]
    _hook: Any

    def remove(self) -> None:
        self.transformer.set_attn_processor(dict(self._original))  # set_attn_processor empties the dict it gets
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def _install(transformer: Any, original: dict[str, Any], layers: list[str],
             processor_for: Callable[[str], Any]) -> None:
    """Give each self-attention processor name in ``layers`` ``processor_for(name)``; keep every other processor."""
    transformer.set_attn_processor({name: processor_for(name) if name in layers else proc
                                    for name, proc in original.items()})


@dataclass
class Installed(_Removable):
    """WaveAlign installed on a transformer: ``attention`` (its calls recorded) and the layers it runs in."""

    transformer: Any
    attention: BlockSparseAttention
    layers: list[str]
    _original: dict[str, Any]
    _hook: Any = None


def apply(transformer: Any, method: str = "xattention", backend: str = "fa4", reorder: str = "adaptive", *,
          block_size: int = 128, hardware: str | None = None, wave_size: int | None = None,
          reorderer: str = "wavealign", latent: tuple[int, int, int] | None = None, reuse_static_plans: bool = True,
          background_choice: bool = True, **method_params: Any) -> Installed:
    """Install WaveAlign on every self-attention layer (``attn1``) of a diffusers Wan ``transformer``.

    ``method`` and ``method_params`` pick the mask (``wavealign.masks``), ``backend`` the kernel
    (``wavealign.kernels``), ``reorder`` "always", "never", "adaptive" (the skip profile of ``hardware`` decides
    per call) or "auto" (the order chooser picks each layer's exact order for the backend and ``hardware`` from its
    first call, kept for that layer and shape across the steps: ``launch_order.choose``; on a host thread of its own,
    the layer running the original order until its pick lands, unless ``background_choice`` is off, when the first
    call waits for it). A method tuned per head
    (SpargeAttn, MInference) tunes each (layer, head) on its first call and reuses
    the config after (``installed.attention.tuned_configs``; ``tuned_config=FILE`` also keeps them in a file).
    ``latent`` (T, H, W) in tokens fixes the latent video; by default each forward's is read from its
    ``hidden_states`` (``token_grid``). A static method's plan is kept per shape and latent (``reuse_static_plans``,
    ``BlockSparseAttention``). Arguments are checked here, before any forward pass."""
    original, layers = _self_attention_layers(transformer)
    attention = BlockSparseAttention(method=method, backend=backend, reorder=reorder, block_size=block_size,
                                     hardware=hardware, wave_size=wave_size, reorderer=reorderer,
                                     method_params=dict(method_params), model=type(transformer).__name__,
                                     latent=latent, reuse_static_plans=reuse_static_plans,
                                     background_choice=background_choice)
    make = processor_class()
    # one processor per layer, each telling the attention which layer calls it (tuned configs are per layer)
    _install(transformer, original, layers,
             lambda name: make(functools.partial(attention, layer=layers.index(name))))
    hook = None
    if latent is None:
        def take_latent(module: Any, args: tuple, kwargs: dict[str, Any]) -> None:
            attention.latent = token_grid(module, args, kwargs)

        hook = transformer.register_forward_pre_hook(take_latent, with_kwargs=True)
    return Installed(transformer=transformer, attention=attention, layers=layers, _original=original, _hook=hook)


def _self_attention_layers(transformer: Any) -> tuple[dict[str, Any], list[str]]:
    """The transformer's processors and, of those, the self-attention ones (in block order); errors name what is
    wrong with ``transformer``."""
    if not hasattr(transformer, "attn_processors") or not hasattr(transformer, "set_attn_processor"):
        raise ValueError(f"transformer must be a diffusers model with attention processors (e.g. "
                         f"WanTransformer3DModel), got {type(transformer).__name__}")
    original = dict(transformer.attn_processors)
    layers = [name for name in original if name.endswith(SELF_ATTENTION)]
    if not layers:
        raise ValueError(f"transformer {type(transformer).__name__} has no self-attention processors named "
                         f"'*{SELF_ATTENTION}'; its processors are {sorted(original)[:4]}...")
    if any(hasattr(original[name], "handler") for name in layers):  # a WaveAlignWanAttnProcessor's
        raise ValueError(f"transformer {type(transformer).__name__} already has WaveAlign (or a capture) installed; "
                         "expected a transformer with its own processors: remove() the first before applying again")
    return original, layers


@dataclass
class Capture(_Removable):
    """Q/K/V of self-attention ``layers`` at denoising ``steps``, written while installed as ``wavealign-qkv/1``
    files (``wavealign.workloads.captured``) in ``out_dir``: one per (layer, step), the first forward of a step (the
    conditional one under classifier-free guidance). ``remove()`` (or leaving a ``with`` block) uninstalls it."""

    transformer: Any
    out_dir: Path
    layers: list[int]
    steps: list[int]
    model: str
    files: list[Path] = field(default_factory=list)
    step: int = -1  # the denoising step of the current forward: counts distinct timesteps
    _timestep: torch.Tensor | None = None
    _grid: tuple[int, int, int] = (0, 0, 0)
    _original: dict[str, Any] = field(default_factory=dict)
    _hook: Any = None

    def _on_forward(self, module: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        """Before each transformer forward: the step (a new timestep starts one) and the latent token grid."""
        timestep = kwargs.get("timestep", args[1] if len(args) > 1 else None)
        timestep = torch.as_tensor(timestep).detach().cpu()
        if self._timestep is None or not torch.equal(timestep, self._timestep):
            self.step, self._timestep = self.step + 1, timestep
        self._grid = token_grid(module, args, kwargs)

    def handler(self, layer: int) -> Handler:
        """What the processor of ``layer`` does with a call: write it when its (layer, step) is wanted, then let
        diffusers compute attention as usual."""
        def record(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
            path = self.out_dir / f"{self.model}-layer{layer:02d}-step{self.step:03d}.safetensors"
            if layer in self.layers and self.step in self.steps and path not in self.files:
                save_captured(path, q, k, v, model=self.model, layer=layer, step=self.step, grid=self._grid)
                self.files.append(path)
            return None
        return record

def capture(transformer: Any, out_dir: str | Path, *, layers: list[int], steps: list[int],
            model: str = "wan2.1-14b") -> Capture:
    """Install a capture of self-attention ``layers`` (block indices) at denoising ``steps`` (0 = the first) on a
    diffusers Wan ``transformer``; run the pipeline, then read ``Capture.files``."""
    original, names = _self_attention_layers(transformer)
    count = len(names)
    if not layers or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < count for i in layers):
        raise ValueError(f"layers must be a non-empty list of block indices in [0, {count}), got {layers!r}")
    if not steps or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in steps):
        raise ValueError(f"steps must be a non-empty list of denoising steps >= 0, got {steps!r}")
    if not isinstance(model, str) or not model:
        raise ValueError(f"model must name the model the tensors come from, got {model!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    recorder = Capture(transformer=transformer, out_dir=out_dir, layers=sorted(set(layers)),
                       steps=sorted(set(steps)), model=model, _original=original)
    make = processor_class()
    _install(transformer, original, names, lambda name: make(recorder.handler(names.index(name))))
    recorder._hook = transformer.register_forward_pre_hook(recorder._on_forward, with_kwargs=True)
    return recorder
