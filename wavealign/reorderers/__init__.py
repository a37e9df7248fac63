"""Row reorderers, one module per technique, keyed by name (a sweep's ``grid.reorderer``).

A reorderer groups a head's query rows so that rows touching similar K/V blocks run in the same wave: it is the
spatial step of a launch order, WaveAlign's Stage 1 or one of the techniques the paper compares it with (Table II).
``launch_order.plan(mask, reorderer=name, stages=...)`` composes it with Stage 2: ``stages="spatial"`` is the grouping
alone, ``"both"`` the grouping followed by Stage 2 (a baseline "+S2"), ``"temporal"`` Stage 2 on the original order.

    launch_order.plan(mask, wave_size=132, reorderer="minhash", stages="both", num_perm=64)   # MinHash+S2
    get("hypergraph").params                                                            # {"epsilon": 0.03, ...}

Each module registers ``group(mask, *, wave_size, seed, **params) -> order``: ``mask`` is bool (G, MB, NB), one
head per leading index, ``order`` int64 (G, MB), a permutation of range(MB) per head (slot p runs row order[p]).
A reorderer that orders blocks by where their tokens lie (``curve``) declares ``STEP_PARAMS`` among its params: the
attention step (``wavealign.attention.AttentionStep.plan_order``) fills them, so a sweep never sets them.
Each ``register`` call also gives the ``label`` and ``color`` that tables and figures show the reorderer by.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from wavealign.registry import Registry, resolve_params


@dataclass(frozen=True)
class Reorderer:
    """A grouping technique: ``group``, its params with their defaults and a check for each (``check(name, value)``
    returns the value as ``group`` takes it or raises naming it), and where the technique comes from."""

    name: str
    group: Callable[..., torch.Tensor]
    params: Mapping[str, Any]
    checks: Mapping[str, Callable[[str, Any], Any]]
    description: str
    reference: str
    label: str  # how tables and figures name it (Table II: "MinHash")
    staged_label: str  # how they name it followed by Stage 2 (Table II: "MinHash+S2")
    color: str | None  # its colour in figures (a matplotlib colour); None: one fixed by its name
    # a compiled host library with no JIT times its first call; torch code is timed after a warm-up call
    needs_warmup: bool = True
    # its CUDA path never waits for the GPU, so a plan on a CUDA mask can be captured as one CUDA graph
    cuda_graph: bool = False
    # the types of params whose default says none (``registry.param_types``)
    types: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def resolve(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The defaults overridden by ``params``, each checked; an unknown name is an error listing the known."""
        return resolve_params(f"reorderer {self.name!r}", self.params, self.checks, params)


REGISTRY: Registry[Reorderer] = Registry("reorderer", __name__)

# facts of the step, not choices of a sweep: the latent (T, H, W) of the tokens, frame-major, and the query block size
STEP_PARAMS = ("latent", "block_size")


def register(name: str, group: Callable[..., torch.Tensor], params: dict[str, Any], description: str,
             reference: str, checks: dict[str, Callable[[str, Any], Any]] | None = None,
             needs_warmup: bool = True, cuda_graph: bool = False, label: str | None = None,
             staged_label: str | None = None, color: str | None = None, types: dict[str, Any] | None = None
             ) -> Reorderer:
    """File a reorderer under ``name`` (``label``, ``staged_label`` and ``color``: how tables and figures show it,
    alone and followed by Stage 2, default its name, that name + "+S2", and a colour fixed by its name; ``types``:
    the types of params whose default says none); called once by its own module."""
    checks = dict(checks or {})
    missing = sorted(set(params) - set(checks))
    if missing:
        raise ValueError(f"reorderer {name!r} gives no check for parameter(s) {missing}")
    label = label or name
    entry = Reorderer(name, group, MappingProxyType(dict(params)), MappingProxyType(checks), description, reference,
                      label, staged_label or f"{label}+S2", color, needs_warmup, cuda_graph,
                      MappingProxyType(dict(types or {})))
    return REGISTRY.register(name)(entry)


def get(name: str) -> Reorderer:
    """The reorderer called ``name``; a ValueError lists the known names otherwise."""
    return REGISTRY.get(name)


def names() -> list[str]:
    """Every registered reorderer, sorted."""
    return REGISTRY.names()


def blocks_per_wave(mb: int, wave_size: int) -> int:
    """How many wave-sized groups ``mb`` rows make: the k of a partition or a clustering into waves."""
    return -(-mb // wave_size)


def order_by_group(labels: torch.Tensor, within: torch.Tensor | None = None,
                   last: torch.Tensor | None = None) -> torch.Tensor:
    """Rows laid out group by group, groups by their first row. ``labels`` (G, MB) int64 in [0, MB) names each row's
    group; ``within`` (G, MB), a permutation per head, is the order rows keep inside a group (default: original);
    ``last`` (G, MB) bool, indexed by label, sends those groups after all others (still by first row)."""
    g, mb = labels.shape
    rows = torch.arange(mb, device=labels.device).expand(g, mb)
    first = torch.full_like(labels, mb).scatter_reduce(-1, labels, rows, reduce="amin", include_self=True)
    if last is not None:
        first = first + mb * last.long()
    order = rows if within is None else within
    group_first = torch.gather(first, -1, torch.gather(labels, -1, order))
    return torch.gather(order, -1, torch.sort(group_first, dim=-1, stable=True).indices)


def heads_per_chunk(mask: torch.Tensor, bytes_per_entry: int, budget_bytes: int = 1 << 28) -> int:
    """How many heads of ``mask`` (G, MB, NB) to process at once so a temporary of ``bytes_per_entry`` per mask
    entry stays within ``budget_bytes``: bounds memory, not the result."""
    return max(1, budget_bytes // max(1, bytes_per_entry * mask[0].numel()))


def cpu_generator(seed: int) -> torch.Generator:
    """Random draws come from the CPU, so a seed gives the same numbers on every device."""
    return torch.Generator().manual_seed(seed)
