"""Dynamic block-sparse attention masks, one module per method that calls ``register``, keyed by name (a sweep's
``grid.method``).

    m = build("xattention", q, k, v, block_size=128, threshold=0.9)   # bool (B, H, MB, NB)
    get("xattention").params                                          # {"threshold": 0.9, "stride": 8, ...}
    get("xattention").resolve({"threshold": 2.0})                     # ValueError naming threshold and its range

q, k, v are (B, H, N, D); MB = NB = ceil(N / block_size). Methods work one head at a time and in chunks of
query rows, so 364K tokens fit on a GPU and 32K on a CPU. ``python -m wavealign.masks.<name>`` draws one.

A method that ignores Q/K (the controls ``random``, ``random-fixed-nnz``, ``planted``, ``dense``) registers
``from_shape(heads, q_blocks, kv_blocks, *, device, **params)`` instead, so a cell that only simulates its
mask never materialises Q/K; ``build`` on Q/K then draws the mask for q's shape.

Methods tuned per head (SpargeAttn, MInference) declare ``model``, ``layer`` and ``heads`` among their params
(``IDENTITY_PARAMS``) to key their per-head configs; ``build_for_heads`` fills them from the workload, so a
sweep cell, ``lab/mask_fidelity.py`` and ``lab/calibrate_workload.py`` build a head's mask the same way. Their
``tuned_config`` takes a ``TunedConfigs`` store: a live pipeline keeps one, so each head is tuned on its first build
only.

A method that reads token positions in the latent video (Radial's frame bands, VSA's cubes) declares ``latent``
(default None), filled the same way with the workload's (T, H, W) in tokens, flattened frame-major (token
``(t * H + h) * W + w``); where it is missing the method raises one ValueError saying so. Such a static method's
``from_shape`` also takes ``block_size``, to know which tokens each block holds.

A method that permutes the tokens before it builds its blocks (VSA's cubes, SVG2's clusters) registers
``token_order(q, k, *, block_size, **params) -> TokenOrder``; its ``build`` then takes q, k, v already in that
order and returns the mask of the permuted sequence. That mask does not pair with q, k, v in the original order, so
the entry points that return a bare mask (``build``, ``MaskMethod.__call__``, ``build_reference``) refuse such a
method, naming ``build_ordered``; ``build_ordered`` (any method) and ``build_for_heads`` return an ``OrderedBuild``:
the mask, q, k, v gathered into the order it lives in, and ``restore`` for the attention's output:

    built = build_ordered("vsa", q, k, v, block_size=128, latent=(T, H, W))
    out = built.restore(attention(built.q, built.k, built.v, built.mask))   # rows back in the original order
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from wavealign.masks._common import check_flag as check_flag  # the checks a method declares (re-exported)
from wavealign.masks._common import check_fraction as check_fraction
from wavealign.masks._common import check_latent as check_latent
from wavealign.masks._common import check_number as check_number
from wavealign.masks._common import one_of as one_of
from wavealign.masks._common import optional as optional
from wavealign.masks._token_order import TokenOrder as TokenOrder  # a method's own token order
from wavealign.masks._tuned import TunedConfigs as TunedConfigs  # per-head tuned configs kept across builds
from wavealign.registry import Registry


@dataclass(frozen=True)
class OrderedBuild:
    """A mask with the token order it lives in: ``order`` (None: the original) and q, k, v gathered into it (the
    inputs themselves when ``order`` is None)."""

    mask: torch.Tensor
    order: TokenOrder | None
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor

    def restore(self, out: torch.Tensor) -> torch.Tensor:
        """``out`` (B, H, N, D), the attention of ``q`` over ``k``, ``v`` under ``mask``, with its rows back in the
        original token order (bitwise copies; ``out`` itself when there is no order of the method's own)."""
        return out if self.order is None else self.order.scatter(out)


@dataclass(frozen=True)
class MaskMethod:
    """A mask method: ``build(q, k, v, block_size, **params)`` and its tunable params with their defaults;
    ``from_shape`` for a method that needs no Q/K; ``token_order`` for a method that builds its mask in a token
    order of its own. ``checks`` holds, per param, ``check(name, value)``, which returns the value as the builder
    takes it or raises a ValueError naming the param: every build and a sweep's config validation go through them,
    so a range is written once. ``reference`` is the method's plain torch build where ``build`` runs GPU kernels
    (``masks._kernels``) on a GPU: the CPU path, and what they are checked against."""

    name: str
    build: Callable[..., torch.Tensor]
    params: MappingProxyType
    description: str
    from_shape: Callable[..., torch.Tensor] | None = None
    checks: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    reference: Callable[..., torch.Tensor] | None = None
    token_order: Callable[..., TokenOrder] | None = None
    types: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))  # registry.param_types

    @property
    def needs_qk(self) -> bool:
        return self.from_shape is None

    @property
    def needs_latent(self) -> bool:
        """Whether it reads token positions in the latent video (``latent=(T, H, W)``, filled from the workload)."""
        return "latent" in self.params

    @property
    def tuned(self) -> bool:
        """Whether it tunes a config per (model, layer, head) (``tuned_config``: a ``TunedConfigs`` store or file)."""
        return "tuned_config" in self.params

    def resolve(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The defaults overridden by ``params``, each through its check; an unknown param is a ValueError."""
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            raise ValueError(f"{self.name} has no parameter(s) {unknown}; expected some of {sorted(self.params)}")
        merged = {**self.params, **params}
        return {key: self.checks[key](key, value) if key in self.checks else value for key, value in merged.items()}

    def build_ordered(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, *,
                      reference: bool = False, **params: Any) -> OrderedBuild:
        """The mask of q, k, v (B, H, N, D, original token order) with the order it lives in: for a token-ordered
        method, the order computed, q, k, v gathered into it and the mask built there; otherwise the mask as it is.
        ``reference`` builds by the method's plain torch code."""
        resolved = self.resolve(params)
        build = (self.reference or self.build) if reference else self.build
        if self.token_order is None:
            return OrderedBuild(build(q, k, v, block_size=block_size, **resolved), None, q, k, v)
        order = self.token_order(q, k, block_size=block_size, **resolved)
        q, k, v = order.gather(q, "q"), order.gather(k, "kv"), order.gather(v, "kv")
        return OrderedBuild(build(q, k, v, block_size=block_size, token_order=order, **resolved), order, q, k, v)

    def _refuse_bare_mask(self) -> None:
        """A ValueError for a method whose mask lives in its own token order: a bare mask would pair with q, k, v
        in the original order and so silently run another attention."""
        if self.token_order is not None:
            raise ValueError(f"method {self.name!r} builds its mask in a token order of its own, so a bare mask "
                             "does not pair with q, k, v as given; expected masks.build_ordered("
                             f"{self.name!r}, q, k, v, ...): the mask with q, k, v gathered into that order, and "
                             "restore(out) for the output")

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128,
                 **params: Any) -> torch.Tensor:
        """The mask of q, k, v in their own order; a method with a token order of its own refuses (above)."""
        self._refuse_bare_mask()
        return self.build_ordered(q, k, v, block_size, **params).mask

    def build_reference(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128,
                        **params: Any) -> torch.Tensor:
        """The mask by the method's plain torch code on any device (``build`` itself for a method without
        kernels): what the GPU kernels' masks are compared with; a method with a token order of its own refuses
        (``build_ordered(..., reference=True)``)."""
        self._refuse_bare_mask()
        return self.build_ordered(q, k, v, block_size, reference=True, **params).mask

    def for_shape(self, heads: int, q_blocks: int, kv_blocks: int, device: torch.device | str = "cpu", *,
                  block_size: int | None = None, **params: Any) -> torch.Tensor:
        """The (heads, q_blocks, kv_blocks) mask of a method that needs no Q/K; ``block_size`` (the tokens per
        block) for one that reads token positions (``needs_latent``), ignored by the others."""
        if self.from_shape is None:
            raise ValueError(f"method {self.name!r} builds its mask from Q/K; call it on q, k, v")
        if not self.needs_latent:
            return self.from_shape(heads, q_blocks, kv_blocks, device=device, **self.resolve(params))
        if block_size is None:
            raise ValueError(f"method {self.name!r} places its blocks on token positions: pass block_size=")
        return self.from_shape(heads, q_blocks, kv_blocks, device=device, block_size=block_size,
                               **self.resolve(params))


REGISTRY: Registry[MaskMethod] = Registry("mask method", __name__)


def _on_qkv_shape(from_shape: Callable[..., torch.Tensor], positional: bool) -> Callable[..., torch.Tensor]:
    """A ``build`` that draws ``from_shape``'s mask for q's (B, H, N) and k's N (``positional``: a method that
    reads token positions, given the block size)."""

    def build(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, **params) -> torch.Tensor:
        from wavealign.masks._common import check_qkv, num_blocks

        check_qkv(q, k, v, block_size, finite=False)  # the values are never read
        b, h, n, _ = q.shape
        mb, nb = num_blocks(n, block_size), num_blocks(k.shape[2], block_size)
        shape_args = {"block_size": block_size} if positional else {}
        return from_shape(b * h, mb, nb, device=q.device, **shape_args, **params).view(b, h, mb, nb)

    return build


def register(name: str, build: Callable[..., torch.Tensor] | None, params: dict[str, Any], description: str,
             from_shape: Callable[..., torch.Tensor] | None = None,
             checks: dict[str, Callable[[str, Any], Any]] | None = None,
             reference: Callable[..., torch.Tensor] | None = None,
             token_order: Callable[..., TokenOrder] | None = None, types: dict[str, Any] | None = None) -> MaskMethod:
    """File a method under ``name``; called once by the method's own module. A method that needs no Q/K
    gives ``from_shape`` and no ``build``; ``checks`` name params of ``params`` (a check across params, such as
    a minimum below a maximum, stays in the builder); ``reference`` is its torch build when ``build`` has GPU
    kernels; ``token_order`` the order a method builds its mask in (its ``build`` then takes q, k, v in that order
    and a ``token_order`` keyword); ``types`` the types of params whose default says none
    (``registry.param_types``)."""
    if (build is None) == (from_shape is None):
        raise ValueError(f"method {name!r} must give exactly one of build (from Q/K) or from_shape")
    if token_order is not None and build is None:
        raise ValueError(f"method {name!r} gives a token_order, which needs a build from Q/K, not from_shape")
    if unknown := sorted(set(checks or {}) - set(params)):
        raise ValueError(f"method {name!r} has checks for {unknown}, which are not among its params {sorted(params)}")
    method = MaskMethod(name, build or _on_qkv_shape(from_shape, positional="latent" in params),
                        MappingProxyType(dict(params)), description, from_shape, MappingProxyType(dict(checks or {})),
                        reference, token_order, MappingProxyType(dict(types or {})))
    if (build or from_shape).__module__ == "__main__":
        # ``python -m wavealign.masks.<name>``: the registry imports the module again under its real name
        return method
    return REGISTRY.register(name)(method)


def get(name: str) -> MaskMethod:
    """The method called ``name``; a ValueError lists the known names otherwise."""
    return REGISTRY.get(name)


def available() -> list[str]:
    """Every registered method name, sorted."""
    return REGISTRY.names()


def build(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128,
          **params: Any) -> torch.Tensor:
    """The bool block mask (B, H, MB, NB) of method ``name`` on q, k, v (B, H, N, D), in their order; a ValueError
    for a method that builds in a token order of its own (VSA, SVG2: ``build_ordered``)."""
    return get(name)(q, k, v, block_size=block_size, **params)


def build_ordered(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, *,
                  reference: bool = False, **params: Any) -> OrderedBuild:
    """Method ``name``'s mask on q, k, v (B, H, N, D, original order), with q, k, v in the order the mask lives in
    and ``restore`` for the output: every method, whether it has a token order of its own or not."""
    return get(name).build_ordered(q, k, v, block_size, reference=reference, **params)


# the workload identity a method declares among its params (per-head tuned configs, token positions), filled from
# the workload by ``build_for_heads``; a sweep never sets them
IDENTITY_PARAMS = ("model", "layer", "heads", "latent")


def identity_params(name: str, *, model: str | None, layer: int, heads: list[int],
                    latent: tuple[int, int, int] | None = None) -> dict[str, Any]:
    """The workload identity method ``name`` declares: of ``model``, ``layer``, ``heads`` and ``latent`` (T, H, W)
    in tokens, or None for a bare shape), those among its params."""
    declared = get(name).params
    identity = {"model": model or "", "layer": int(layer), "heads": list(heads),
                "latent": None if latent is None else tuple(latent)}
    return {key: value for key, value in identity.items() if key in declared}


def build_for_heads(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, *,
                    model: str | None, layer: int, heads: list[int], latent: tuple[int, int, int] | None = None,
                    **params: Any) -> OrderedBuild:
    """``build_ordered`` on heads ``heads`` of ``layer`` of ``model`` (a video of ``latent`` (T, H, W) tokens): the
    identity goes to methods that declare it (``identity_params``); ``params`` override the method's defaults."""
    identity = identity_params(name, model=model, layer=layer, heads=heads, latent=latent)
    return build_ordered(name, q, k, v, block_size, **{**identity, **params})
