"""A cell's inputs: its (H, MB, NB) block mask and, when its measurer runs the kernel, Q/K/V; built from its
workload (a captured file, the synthetic generator, or a bare shape), and kept by a worker across its groups.

``InputCache`` is one worker's: the latest group's inputs are kept for the next group on the same inputs (another
backend's: the dispatcher sends them one after another), and ``prefetch`` builds the inputs of the group it runs next
in the background while the current one is timed (on a CUDA stream of its own on a GPU).
"""

from __future__ import annotations

import json
import math
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

from wavealign import masks, measurers, placement
from wavealign.attention import cell_latent
from wavealign.kernels import LaunchShape
from wavealign.records import Cell

# what decides a group's mask and Q/K/V (with its placement and whether its measurer needs Q/K/V)
INPUT_FIELDS = ("workload", "method", "method_params", "seed", "block_size", "seq_len_tokens", "num_heads",
                "head_dim", "model", "captured", "resolution", "frames", "heads", "layer", "step", "generator")
QKV = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def key(cell: Cell) -> str:
    """The identity of the inputs ``build`` makes for ``cell``: cells with equal keys get the same mask and Q/K/V
    (their backends, wave sizes, variants and repetitions may differ)."""
    return json.dumps({**{name: getattr(cell, name) for name in INPUT_FIELDS}, "placement": placement.pool(cell),
                       "qkv": measurers.get(cell.measure).needs_qkv}, sort_keys=True, default=str)


def build(cell: Cell, device: torch.device) -> tuple[torch.Tensor, QKV | None]:
    """The cell's (H, MB, NB) bool mask, and Q/K/V (B, H, N, D) when its measurer needs them (bf16 on a GPU, the
    paper's dtype; float32 on the CPU)."""
    method = masks.get(cell.method)
    needs_qkv = measurers.get(cell.measure).needs_qkv
    identity = {"model": cell.model, "layer": cell.layer, "heads": list(cell.heads) or list(range(cell.num_heads)),
                "latent": cell_latent(cell)}
    if method.needs_qk:
        if cell.model is None:
            raise ValueError(f"method {cell.method!r} builds its mask from a model's Q/K; workload {cell.workload!r} "
                             "is a bare shape")
        q, k, v = _workload_qkv(cell, device)
        # a token-ordered method's mask lives in its own token order: the kernel's time depends on the mask alone
        mask = masks.build_for_heads(cell.method, q, k, v, cell.block_size, **identity, **cell.method_params)
        qkv = (q, k, v) if needs_qkv else None
    else:
        blocks = math.ceil(cell.seq_len_tokens / cell.block_size)
        mask = method.for_shape(cell.num_heads, blocks, blocks, device=device, block_size=cell.block_size,
                                **masks.identity_params(cell.method, **identity), **cell.method_params)
        qkv = random_qkv(cell, device) if needs_qkv else None
    mask = mask.reshape(-1, *mask.shape[-2:]).to(device)
    if qkv is not None and device.type == "cuda":
        qkv = tuple(t.to(torch.bfloat16) for t in qkv)
    return mask, qkv


def _workload_qkv(cell: Cell, device: torch.device) -> QKV:
    """The model's Q/K/V: read from the cell's captured file, or drawn by the cell's synthetic generator."""
    from wavealign import workloads

    if cell.captured is not None:
        captured = workloads.load_captured(cell.captured, heads=list(cell.heads), device=device)
        return captured.q[:1], captured.k[:1], captured.v[:1]  # the first batch element (the conditional one)
    wl = workloads.preset(cell.model, frames=int(cell.frames), resolution=cell.resolution)
    return workloads.synthetic(wl, heads=list(cell.heads), layer=cell.layer, step=cell.step, seed=cell.seed,
                               device=device, config=workloads.generator(cell.generator))


def random_qkv(cell: Cell, device: torch.device) -> QKV:
    """Gaussian Q/K/V of the cell's shape: what a kernel computes on does not change its block schedule. Drawn on
    the cell's device, in the dtype it runs (bf16 on a GPU): at 364K tokens the three are 560M numbers, seconds of
    host time to draw and copy. A seed gives the same tensors on the same kind of device."""
    gen = torch.Generator(device=device).manual_seed(cell.seed)
    shape = (1, cell.num_heads, cell.seq_len_tokens, cell.head_dim)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return tuple(torch.randn(shape, generator=gen, device=device, dtype=dtype)  # type: ignore[return-value]
                 for _ in range(3))


def launch_shape(cell: Cell, qkv: QKV | None, device: torch.device) -> LaunchShape:
    """The shape a cell's launch is planned for, on the GPU it runs on or is simulated for."""
    dtype = qkv[0].dtype if qkv is not None else torch.bfloat16
    return LaunchShape(batch=1, heads=cell.num_heads, q_len=cell.seq_len_tokens, kv_len=cell.seq_len_tokens,
                       head_dim=cell.head_dim, block_size=cell.block_size, dtype=dtype, device=device,
                       hardware=cell.profile_hardware, wave_size=cell.wave_size)


@dataclass
class _Prefetch:
    """One group's inputs being built (or built) in the background: its ``inputs`` (mask, qkv, build ms) or the
    ``error`` that stopped it, once ``done`` is set."""

    key: str
    done: threading.Event = field(default_factory=threading.Event)
    inputs: tuple[torch.Tensor, Any, float] | None = None
    error: BaseException | None = None


class InputCache:
    """One worker's inputs across its groups: the set of its latest group (one at most, by ``key``) and one set
    being prefetched, shared between the timed group's thread and the prefetch's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, tuple[torch.Tensor, Any, float, bool]] = {}
        self._prefetched: _Prefetch | None = None
        self._building: str | None = None
        self._streams: dict[torch.device, torch.cuda.Stream] = {}

    def take(self, cell: Cell, device: torch.device) -> tuple[torch.Tensor, QKV | None, float, bool]:
        """The group's mask, Q/K/V, the ms it took to build them (recorded as the mask's cost even when reused), and
        whether a prefetch built them: kept from the previous group on the same inputs (with that group's flag),
        taken from ``prefetch`` (waiting for it if it is still building; its error, if it failed, is raised here, so
        the group fails as it would have building them itself), or built now.

        One set is kept at a time besides one prefetched set, and the kept one is dropped before the next is built
        or taken (a 364K x 40-head set is ~11 GB of GPU memory)."""
        wanted = key(cell)
        with self._lock:
            kept = self._kept.get(wanted)
            job = None
            if kept is None:
                self._kept.clear()
                if self._prefetched is not None and self._prefetched.key == wanted:
                    job, self._prefetched = self._prefetched, None
                self._building = wanted
        if kept is not None:
            return kept
        try:
            if job is not None:
                job.done.wait()
                if job.error is not None:
                    raise job.error
                mask, qkv, build_ms = job.inputs
                if device.type == "cuda":  # made on the prefetch stream, used and freed on this one
                    for t in (mask, *(qkv or ())):
                        t.record_stream(torch.cuda.current_stream(device))
            else:
                start = time.perf_counter()
                mask, qkv = build(cell, device)
                build_ms = (time.perf_counter() - start) * 1e3
            with self._lock:
                self._kept[wanted] = (mask, qkv, build_ms, job is not None)
        finally:
            with self._lock:
                self._building = None
        return mask, qkv, build_ms, job is not None

    def prefetch(self, cells: list[Cell]) -> bool:
        """Start building the inputs of the group ``cells`` in a background thread, on a CUDA stream of its own (the
        lowest priority) for a GPU cell, so that the group timed meanwhile keeps the default stream; ``take`` then
        takes them. Returns whether a build was started: not when the cache keeps or is building those inputs
        already. A prefetched set not taken yet is replaced (its build finishes first, so at most one prefetched set
        lives besides the kept one). Never raises: an error is raised by ``take``, where the group's cells are
        recorded failed with it."""
        try:
            wanted = key(cells[0])
        except Exception:  # take meets the same error when the group runs
            return False
        with self._lock:
            if wanted in self._kept or wanted == self._building or (
                    self._prefetched is not None and self._prefetched.key == wanted):
                return False
            previous, self._prefetched = self._prefetched, _Prefetch(wanted)
            job = self._prefetched
        threading.Thread(target=self._build_ahead, args=(job, cells[0], previous),
                         name=f"prefetch-{cells[0].group_id}", daemon=True).start()
        return True

    @property
    def prefetching(self) -> str | None:
        """The key of the set being prefetched (or prefetched and not taken yet), if any."""
        return None if self._prefetched is None else self._prefetched.key

    def _build_ahead(self, job: _Prefetch, cell: Cell, previous: _Prefetch | None) -> None:
        """``prefetch``'s thread: wait for the set it replaces to finish building (then drop it), build, and say
        done."""
        try:
            if previous is not None:
                previous.done.wait()
                previous.inputs = None
            device = placement.device(cell)
            start = time.perf_counter()
            if device.type == "cuda":
                stream = self._stream(device)
                with torch.cuda.stream(stream):
                    mask, qkv = build(cell, device)
                stream.synchronize()
            else:
                mask, qkv = build(cell, device)
            job.inputs = (mask, qkv, (time.perf_counter() - start) * 1e3)
        except BaseException as exc:  # kept for take to raise
            traceback.clear_frames(exc.__traceback__)  # its frames' locals (GPU tensors) go; their lines stay
            job.error = exc
        finally:
            job.done.set()

    def _stream(self, device: torch.device) -> torch.cuda.Stream:
        """The prefetch stream on ``device``, at CUDA's lowest priority (0; lower numbers run first)."""
        with self._lock:
            if device not in self._streams:
                self._streams[device] = torch.cuda.Stream(device=device, priority=0)
            return self._streams[device]

    def forget(self) -> None:
        """Drop the kept and the prefetched inputs (waiting for a prefetch still building)."""
        with self._lock:
            job, self._prefetched = self._prefetched, None
            self._kept.clear()
        if job is not None:
            job.done.wait()
