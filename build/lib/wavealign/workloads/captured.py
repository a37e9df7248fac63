"""Real Q/K/V captured from a model, stored as ``safetensors`` so a user can sweep over their own tensors.

File layout (format ``wavealign-qkv/1``), one file per (layer, denoising step) attention call:

- tensors ``q``, ``k``, ``v``: the same shape (B, H, N, D) = (batch, heads, tokens, head_dim), the same
  floating dtype, *after* q/k RMSNorm and RoPE, tokens in frame-major (t, h, w) order;
- string metadata: ``format`` = ``wavealign-qkv/1``, ``layout`` = ``BHND``, ``model``, ``layer``, ``step``,
  and ``grid`` = ``"T,H,W"``, the latent token grid with T * H * W == N.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

FORMAT = "wavealign-qkv/1"


@dataclass(frozen=True)
class CapturedQKV:
    """One captured attention call: q/k/v (B, H, N, D) and where it came from."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    model: str
    layer: int
    step: int
    grid: tuple[int, int, int]  # latent (t, h, w) token grid


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grid: tuple[int, int, int], where: str) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{where}: {name} must be (B, H, N, D) (layout BHND), got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise ValueError(f"{where}: {name} must be a floating tensor, got {t.dtype}")
    if not q.shape == k.shape == v.shape:
        raise ValueError(f"{where}: q, k, v must have the same shape, got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"{where}: q, k, v must have the same dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if len(grid) != 3 or min(grid) < 1 or grid[0] * grid[1] * grid[2] != q.shape[2]:
        raise ValueError(f"{where}: grid must be 3 positive sizes (T, H, W) with T*H*W == N = {q.shape[2]}, "
                         f"got {grid}")


def save_captured(path: str | Path, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, model: str, layer: int,
                  step: int, grid: tuple[int, int, int]) -> Path:
    """Write one attention call in the ``wavealign-qkv/1`` layout; returns the path."""
    _check(q, k, v, tuple(grid), "save_captured")
    meta = {"format": FORMAT, "layout": "BHND", "model": model, "layer": str(int(layer)), "step": str(int(step)),
            "grid": ",".join(str(int(g)) for g in grid)}
    path = Path(path)
    save_file({n: t.detach().contiguous().cpu() for n, t in (("q", q), ("k", k), ("v", v))}, str(path),
              metadata=meta)
    return path


@dataclass(frozen=True)
class CapturedHeader:
    """What a ``wavealign-qkv/1`` file holds, read without loading its tensors."""

    shape: tuple[int, int, int, int]  # (B, H, N, D)
    model: str
    layer: int
    step: int
    grid: tuple[int, int, int]


def read_header(path: str | Path) -> CapturedHeader:
    """The shape and metadata of a ``wavealign-qkv/1`` file (the tensors stay on disk)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path must be an existing safetensors file, got {str(path)!r}")
    with safe_open(str(path), framework="pt", device="cpu") as f:
        model, layer, step, grid = _metadata(f, path)
        shape = tuple(f.get_slice("q").get_shape())
    return CapturedHeader(shape=shape, model=model, layer=layer, step=step, grid=grid)  # type: ignore[arg-type]


def _metadata(f, path: Path) -> tuple[str, int, int, tuple[int, ...]]:
    """(model, layer, step, grid) of an open file, checking its format and layout and that it holds q, k, v."""
    meta = f.metadata() or {}
    if meta.get("format") != FORMAT or meta.get("layout") != "BHND":
        raise ValueError(f"{path}: metadata format/layout must be {FORMAT!r}/'BHND', got "
                         f"{meta.get('format')!r}/{meta.get('layout')!r}")
    missing = {"q", "k", "v"} - set(f.keys())
    if missing:
        raise ValueError(f"{path}: tensors q, k, v expected, missing {sorted(missing)}")
    try:
        return meta["model"], int(meta["layer"]), int(meta["step"]), tuple(int(g) for g in meta["grid"].split(","))
    except (KeyError, ValueError) as err:
        raise ValueError(f"{path}: metadata needs model, layer, step and grid 'T,H,W', got {meta}") from err


def load_captured(path: str | Path, heads: list[int] | None = None,
                  device: str | torch.device = "cpu") -> CapturedQKV:
    """Read a ``wavealign-qkv/1`` file (optionally a subset of ``heads``), checking its layout and shapes."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path must be an existing safetensors file, got {str(path)!r}")
    with safe_open(str(path), framework="pt", device="cpu") as f:
        model, layer, step, grid = _metadata(f, path)
        tensors = {n: f.get_tensor(n) for n in ("q", "k", "v")}
    _check(tensors["q"], tensors["k"], tensors["v"], grid, str(path))  # type: ignore[arg-type]
    if heads is not None:
        num_heads = tensors["q"].shape[1]
        if not heads or min(heads) < 0 or max(heads) >= num_heads:
            raise ValueError(f"heads must be a non-empty subset of [0, {num_heads}), got {heads}")
        tensors = {n: t[:, heads] for n, t in tensors.items()}
    q, k, v = (tensors[n].to(device) for n in ("q", "k", "v"))
    return CapturedQKV(q=q, k=k, v=v, model=model, layer=layer, step=step, grid=grid)  # type: ignore[arg-type]
