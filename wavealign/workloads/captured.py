"""Real Q/K/V captured from a model, stored as ``safetensors`` so a user can sweep over their own tensors.

File layout (format ``wavealign-qkv/1``), one file per (layer, denoising step) attention call:

- tensors ``q``, ``k``, ``v``: the same shape (B, H, N, D) = (batch, heads, tokens, head_dim), the same
  floating dtype, *after* q/k RMSNorm and RoPE, tokens in frame-major (t, h, w) order;
- string metadata: ``format`` = ``wavealign-qkv/1``, ``layout`` = ``BHND``, ``model``, ``layer``, ``step``,
  and ``grid`` = ``"T,H,W"``, the latent token grid with T * H * W == N.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from wavealign import bounded

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


def _check(shapes: dict[str, tuple[int, ...]], dtypes: dict[str, torch.dtype], grid: tuple[int, ...],
           where: str) -> None:
    """q, k and v of one (B, H, N, D) shape with no empty axis and one floating dtype, and ``grid`` a (T, H, W)
    of N tokens: what a file must declare (``read_header``) and what ``save_captured`` writes."""
    for name in ("q", "k", "v"):
        if len(shapes[name]) != 4:
            raise ValueError(f"{where}: {name} must be (B, H, N, D) (layout BHND), got shape {shapes[name]}")
        if min(shapes[name]) < 1:
            raise ValueError(f"{where}: {name} has an empty axis, shape {shapes[name]}; expected every size >= 1")
        if not dtypes[name].is_floating_point:
            raise ValueError(f"{where}: {name} must be a floating tensor, got {dtypes[name]}")
    if not shapes["q"] == shapes["k"] == shapes["v"]:
        raise ValueError(f"{where}: q, k, v must have the same shape, got {shapes['q']}, {shapes['k']}, "
                         f"{shapes['v']}")
    if not dtypes["q"] == dtypes["k"] == dtypes["v"]:
        raise ValueError(f"{where}: q, k, v must have the same dtype, got {dtypes['q']}, {dtypes['k']}, "
                         f"{dtypes['v']}")
    if len(grid) != 3 or min(grid) < 1 or grid[0] * grid[1] * grid[2] != shapes["q"][2]:
        raise ValueError(f"{where}: grid must be 3 positive sizes (T, H, W) with T*H*W == N = {shapes['q'][2]}, "
                         f"got {grid}")


def save_captured(path: str | Path, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, model: str, layer: int,
                  step: int, grid: tuple[int, int, int]) -> Path:
    """Write one attention call in the ``wavealign-qkv/1`` layout; returns the path."""
    tensors = {"q": q, "k": k, "v": v}
    _check({n: tuple(t.shape) for n, t in tensors.items()}, {n: t.dtype for n, t in tensors.items()}, tuple(grid),
           "save_captured")
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
    """The shape and metadata of a ``wavealign-qkv/1`` file, from its header alone (the tensors stay on disk):
    format and layout, tensors q, k, v of one (B, H, N, D) shape with no empty axis and one floating dtype, each
    stored as exactly its bytes within the file, and a (T, H, W) grid of N tokens. Anything else is a
    ``ValueError`` naming the file, before any tensor is read."""
    path = Path(path)
    tensors, meta = _safetensors_header(path)
    if meta.get("format") != FORMAT or meta.get("layout") != "BHND":
        raise ValueError(f"{path}: metadata format/layout must be {FORMAT!r}/'BHND', got "
                         f"{meta.get('format')!r}/{meta.get('layout')!r}")
    if set(tensors) != {"q", "k", "v"}:
        raise ValueError(f"{path}: tensors q, k, v expected, got {sorted(tensors)}")
    try:
        model, layer, step = meta["model"], int(meta["layer"]), int(meta["step"])
        grid = tuple(int(g) for g in meta["grid"].split(","))
    except (KeyError, ValueError) as err:
        raise ValueError(f"{path}: metadata needs model, layer, step and grid 'T,H,W', got {meta}") from err
    _check({n: shape for n, (_, shape) in tensors.items()}, {n: dtype for n, (dtype, _) in tensors.items()}, grid,
           str(path))
    return CapturedHeader(shape=tensors["q"][1], model=model, layer=layer, step=step, grid=grid)  # type: ignore


# safetensors' dtype names (https://github.com/huggingface/safetensors, "Format")
_DTYPES = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "I32": torch.int32,
           "I64": torch.int64, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "F16": torch.float16,
           "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}
# a wavealign-qkv/1 header names three tensors and a few metadata strings (a few hundred bytes); safetensors itself
# accepts 100 MB, which a crafted file would fill with JSON for the parser to chew on
_MAX_HEADER_BYTES = 2**20


def _safetensors_header(path: Path) -> tuple[dict[str, tuple[torch.dtype, tuple[int, ...]]], dict[str, str]]:
    """The tensors (dtype, shape) and metadata a safetensors file declares, from its header alone: 8 bytes giving
    the length of a JSON header, then the JSON (the format's own layout), each tensor's byte range checked to be
    exactly its shape's bytes and to lie inside the file."""
    expected = f"expected a {FORMAT} safetensors file (wavealign capture)"
    if not path.is_file():
        raise ValueError(f"path must be an existing safetensors file, got {str(path)!r}")
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 2 <= length <= min(_MAX_HEADER_BYTES, size - 8):
            raise ValueError(f"{path} is not a safetensors file of a capture (no header length in [2, "
                             f"{_MAX_HEADER_BYTES:,}] bytes inside the file); {expected}")
        try:  # bounded: a header nested 100,000 deep is a RecursionError to Python's own parser
            header = bounded.load_json(fh.read(length), "its header", _MAX_HEADER_BYTES)
        except ValueError as exc:
            raise ValueError(f"{path} is not a safetensors file ({exc}); {expected}") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path} is not a safetensors file (its header is not a JSON object); {expected}")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ValueError(f"{path}: safetensors metadata must map names to strings, got {meta!r}")
    tensors = {}
    for name, entry in header.items():
        try:
            dtype, shape, (start, end) = _DTYPES[entry["dtype"]], tuple(entry["shape"]), entry["data_offsets"]
            if not all(isinstance(d, int) and d >= 0 for d in (*shape, start, end)):
                raise ValueError
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: tensor {name!r} has a malformed header entry {entry!r}; {expected}") from None
        if end - start != math.prod(shape) * dtype.itemsize or 8 + length + end > size:
            raise ValueError(f"{path}: tensor {name!r} {shape} {entry['dtype']} is stored as bytes {start}-{end} of "
                             f"a {size - 8 - length}-byte data section; expected {math.prod(shape) * dtype.itemsize} "
                             "bytes inside it")
        tensors[name] = (dtype, shape)
    return tensors, meta


def load_captured(path: str | Path, heads: list[int] | None = None,
                  device: str | torch.device = "cpu") -> CapturedQKV:
    """Read a ``wavealign-qkv/1`` file (optionally a subset of ``heads``), its header checked first
    (``read_header``)."""
    path = Path(path)
    header = read_header(path)
    if heads is not None and (not heads or min(heads) < 0 or max(heads) >= header.shape[1]):
        raise ValueError(f"heads must be a non-empty subset of [0, {header.shape[1]}), got {heads}")
    with safe_open(str(path), framework="pt", device="cpu") as f:
        tensors = {n: f.get_tensor(n) for n in ("q", "k", "v")}
    if heads is not None:
        tensors = {n: t[:, heads] for n, t in tensors.items()}
    q, k, v = (tensors[n].to(device) for n in ("q", "k", "v"))
    return CapturedQKV(q=q, k=k, v=v, model=header.model, layer=header.layer, step=header.step, grid=header.grid)
