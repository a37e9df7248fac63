"""A launch order of query blocks (``RowOrder``) and the check every launch takes it through
(``check_launch_order``): apart from planning one (``launch_order.plan``), so that the kernels, which check the orders
they are given, import this alone and not the planner and its chooser, which in turn ask the kernels."""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

import torch

from wavealign.blockmask import check_fits, check_int
from wavealign.launch_order.candidates import candidate_name
from wavealign.records import MAX_WAVE_SIZE, STAGES

# the orders made here (``plan``, ``from_perm``, ``identity``), by id: their permutations are known to be valid, so
# a launch takes them without a check that waits for the GPU; any other RowOrder (built by hand, or copied with
# ``dataclasses.replace``) is checked where a launch takes it (``check_launch_order``)
_CHECKED: weakref.WeakValueDictionary[int, RowOrder] = weakref.WeakValueDictionary()


@dataclass(frozen=True)
class RowOrder:
    """A launch order per head: slot ``p`` of head ``h`` runs query block ``perm[h, p]``.

    ``perm`` and ``inverse`` are int64 of shape (H, MB), or (B, H, MB) for a batched mask with B > 1.
    """

    perm: torch.Tensor
    inverse: torch.Tensor
    wave_size: int
    stages: str
    reorderer: str = "wavealign"  # the spatial step (wavealign.reorderers) when ``stages`` has one
    # the order's name among the chooser's candidates (``launch_order.candidates``), or ``stages[reorderer]``
    candidate: str = ""

    def __post_init__(self) -> None:
        if not self.candidate:
            object.__setattr__(self, "candidate", candidate_name(self.stages, self.reorderer))

    @property
    def num_q_blocks(self) -> int:
        return self.perm.shape[-1]

    @classmethod
    def from_perm(cls, perm: torch.Tensor, wave_size: int, stages: str, reorderer: str = "wavealign") -> RowOrder:
        """Wrap a permutation, computing its inverse; each row of ``perm`` (H, MB) or (B, H, MB) must be a
        permutation of range(MB), or the inverse would hold garbage, and ``stages`` one of ``STAGES``."""
        if stages not in STAGES:
            raise ValueError(f"stages must be one of {STAGES}, got {stages!r}")
        if not isinstance(reorderer, str) or not reorderer:
            raise ValueError(f"reorderer must name the spatial step (a wavealign.reorderers name), got {reorderer!r}")
        if not isinstance(perm, torch.Tensor) or perm.dim() not in (2, 3) or perm.shape[-1] == 0:
            got = f"shape {tuple(perm.shape)}" if isinstance(perm, torch.Tensor) else type(perm).__name__
            raise ValueError(f"perm must be a non-empty (H, MB) or (B, H, MB) integer tensor, got {got}")
        if perm.is_floating_point() or perm.is_complex() or perm.dtype == torch.bool:
            raise ValueError(f"perm must have an integer dtype, got {perm.dtype}")
        wave_size = check_int("wave_size", wave_size, lo=1, hi=MAX_WAVE_SIZE)
        mb = perm.shape[-1]
        if not bool((torch.sort(perm, dim=-1).values == torch.arange(mb, device=perm.device)).all()):
            raise ValueError(f"perm must hold a permutation of range(MB={mb}) in every row (last dim), got "
                             f"values in [{int(perm.min())}, {int(perm.max())}] with repeats or gaps")
        return cls._of(perm, wave_size, stages, reorderer)

    @classmethod
    def _of(cls, perm: torch.Tensor, wave_size: int, stages: str, reorderer: str = "wavealign",
            candidate: str = "") -> RowOrder:
        """``from_perm`` without its check, for permutations made here (no wait for the GPU)."""
        perm = perm.long()
        inverse = torch.empty_like(perm)
        inverse.scatter_(-1, perm, torch.arange(perm.shape[-1], device=perm.device).expand_as(perm))
        return cls(perm=perm, inverse=inverse, wave_size=wave_size, stages=stages, reorderer=reorderer,
                   candidate=candidate)._checked()

    def _checked(self) -> RowOrder:
        _CHECKED[id(self)] = self
        return self

    @property
    def is_checked(self) -> bool:
        """Whether this order was made here (``plan``, ``from_perm``, ``identity``), so its rows are permutations."""
        return _CHECKED.get(id(self)) is self

    @classmethod
    def identity(cls, *lead: int, device: str | torch.device = "cpu", wave_size: int = 132) -> RowOrder:
        """The original order for leading dims ``lead`` = (H, MB) or (B, H, MB), each a positive integer."""
        if len(lead) not in (2, 3):
            raise ValueError(f"lead must be (H, MB) or (B, H, MB), got {lead}")
        lead = tuple(check_int(f"lead[{i}]", size, lo=1) for i, size in enumerate(lead))
        wave_size = check_int("wave_size", wave_size, lo=1, hi=MAX_WAVE_SIZE)
        check_fits(f"RowOrder.identity{lead}", 2 * 8 * math.prod(lead), device)  # perm and inverse, int64
        perm = torch.arange(lead[-1], device=device).expand(*lead).contiguous()
        return cls(perm=perm, inverse=perm.clone(), wave_size=wave_size, stages="none",
                   reorderer="identity")._checked()


def check_launch_order(order: Any, heads: int, q_blocks: int) -> RowOrder | None:
    """``order`` for a launch over ``heads`` x ``q_blocks`` query blocks: None (the original order), a ``RowOrder``
    over exactly those (H, MB), or its permutation tensor, checked to be one (``RowOrder.from_perm``: zeros would
    run block 0 in every slot and leave the other rows unwritten, an index out of range would fail in the kernel);
    anything else is a ValueError naming it. Every backend's ``plan`` takes its order through this
    (``kernels.Backend``)."""
    if order is None:
        return None
    if isinstance(order, torch.Tensor):  # a permutation handed in as it is: how it was planned is not known
        order = RowOrder.from_perm(order, wave_size=1, stages="spatial", reorderer="given")
    if not isinstance(order, RowOrder):
        raise ValueError(f"order must be a launch_order.RowOrder, its permutation tensor or None, got "
                         f"{type(order).__name__}")
    if not isinstance(order.perm, torch.Tensor) or not isinstance(order.inverse, torch.Tensor):
        raise ValueError("order.perm and order.inverse must be integer tensors, got "
                         f"{type(order.perm).__name__} and {type(order.inverse).__name__}")
    if tuple(order.perm.shape[-2:]) != (heads, q_blocks) or order.inverse.shape != order.perm.shape:
        raise ValueError(f"order covers (H, MB) = {tuple(order.perm.shape[-2:])}; the launch has (H, MB) = "
                         f"{(heads, q_blocks)}")
    if not order.is_checked:  # built by hand: its perm must be a permutation and its inverse that of perm
        checked = RowOrder.from_perm(order.perm, order.wave_size, order.stages, order.reorderer)
        if not torch.equal(checked.inverse, order.inverse.to(checked.inverse.device).long()):
            raise ValueError("order.inverse must be the inverse permutation of order.perm (RowOrder.from_perm "
                             "computes it)")
        order = checked
    return order
