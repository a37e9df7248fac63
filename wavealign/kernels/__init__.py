"""Block-sparse attention backends behind one signature, keyed by name (mirrored by ``conf/backend/``).

A backend is called as ``backend(q, k, v, mask, order=None, block_size=128) -> out`` with q/k/v of
shape (B, H, N, D) and a bool block mask (H, MB, NB) or (B, H, MB, NB). ``order`` is a
``reorder.RowOrder``: the backend runs query blocks in ``order.perm`` launch order and returns the
output in the original order, so a reorder never changes the result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from wavealign.registry import Registry


def _always() -> bool:
    return True


@dataclass(frozen=True)
class Backend:
    """One attention implementation and the facts the sweep and the simulator need about it."""

    name: str
    run: Callable[..., torch.Tensor]
    description: str
    is_available: Callable[[], bool] = _always
    # True when the kernel reads order.perm itself (no gather of Q, no scatter of O)
    in_kernel_permutation: bool = False
    # hardware ids it can run on; None means any
    supported_hardware: tuple[str, ...] | None = None
    # the order in which one query row walks its K/V list ("forward" or "reverse", e.g. FA4)
    kv_walk: str = "forward"

    def __call__(self, q, k, v, mask, order=None, block_size: int = 128, **options) -> torch.Tensor:
        return self.run(q, k, v, mask, order=order, block_size=block_size, **options)

    def supports(self, hardware: str) -> bool:
        """Whether this backend can run on the GPU type ``hardware`` (an id such as ``"a40"``)."""
        return self.supported_hardware is None or hardware in self.supported_hardware


REGISTRY: Registry[Backend] = Registry("backend", __name__)


def register(backend: Backend) -> Backend:
    """File a backend under its name; called once by the backend's own module."""
    return REGISTRY.register(backend.name)(backend)


def get(name: str) -> Backend:
    """The backend called ``name``; a ValueError lists the known names otherwise."""
    return REGISTRY.get(name)


def names() -> list[str]:
    """Every registered backend, usable here or not."""
    return REGISTRY.names()


def available() -> list[str]:
    """The backends that can run on this machine (e.g. GPU-only ones are absent without CUDA)."""
    return [n for n in REGISTRY.names() if REGISTRY.get(n).is_available()]
