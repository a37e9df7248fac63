"""Calibrate-workload's head-by-head masks under candidate generator configs (which no sweep cell can name), built
by ``masks.build_for_heads`` as a sweep cell builds them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import torch

from wavealign import masks, workloads
from wavealign.workloads import HeadTypesConfig


def device_for(name: str | None) -> torch.device:
    """``--device``, or CUDA when present; asking for CUDA without it is an error naming the argument."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    chosen = torch.device(name)
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name} asked for CUDA, but torch {torch.__version__} sees no CUDA device")
    return chosen


def sync(on: torch.device) -> None:
    if on.type == "cuda":
        torch.cuda.synchronize(on)


def head_masks(wl: workloads.Workload, heads: list[int] | None, methods: list[str], *, layer: int, step: int,
               seed: int, block_size: int, device: torch.device, config: HeadTypesConfig | None = None,
               overrides: dict[str, dict[str, Any]] | None = None,
               ) -> Iterator[tuple[workloads.HeadSpec, str, torch.Tensor, float]]:
    """Yield ``(spec, method, mask (MB, NB), build_ms)`` head by head (``heads`` None: all): the masks a sweep
    cell of these heads builds, one head's Q/K/V in memory at a time. ``config`` is the generator (default:
    the calibrated cluster one); ``overrides`` change a method's params."""
    overrides = overrides or {}
    for spec, q, k, v in workloads.iter_heads(wl, heads, layer=layer, step=step, seed=seed, device=device,
                                              config=config):
        for method in methods:
            sync(device)
            start = time.perf_counter()
            try:
                mask = masks.build_for_heads(method, q, k, v, block_size, model=wl.model, layer=layer,
                                             heads=[spec.head], **overrides.get(method, {})).mask
            except (RuntimeError, ValueError) as err:
                raise RuntimeError(f"{method} failed on head {spec.head} ({spec.head_type}) of {wl.model} at "
                                   f"{wl.seq_len} tokens on {device}: {err}") from err
            sync(device)
            yield spec, method, mask[0, 0], (time.perf_counter() - start) * 1e3
        del q, k, v
