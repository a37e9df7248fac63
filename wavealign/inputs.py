"""A cell's inputs: its (H, MB, NB) block mask and, when its measurer runs the kernel, Q/K/V; built from its
``InputSpec`` (a captured file, the synthetic generator, or a bare shape), and kept by a worker across its groups.

``InputCache`` is one worker's: the latest group's inputs are kept for the next group on the same inputs (another
backend's: the dispatcher sends them one after another), and ``prefetch`` builds the inputs of the group it runs next
in the background while the current one is timed (on a CUDA stream of its own on a GPU).
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

from wavealign import masks, workloads
from wavealign.kernels import LaunchShape
from wavealign.records import InputSpec, LaunchGeometry

QKV = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class InputRequest:
    """The inputs one group needs: its ``spec``'s mask in blocks of ``block_size`` on ``device``, and Q/K/V when
    ``with_qkv`` (its measurer runs the kernel; a simulated cell needs the mask alone)."""

    spec: InputSpec
    block_size: int
    device: torch.device
    with_qkv: bool

    @property
    def key(self) -> str:
        """The identity of what ``build`` makes: requests with equal keys get the same mask and Q/K/V."""
        return key(self.spec, self.block_size, self.with_qkv, str(self.device))


def key(spec: InputSpec, block_size: int, with_qkv: bool, where: str) -> str:
    """The identity of a set of inputs: equal keys, the same mask and Q/K/V. ``where`` says where they live (a
    device, or a worker pool where the device is not known yet: the dispatcher's view of a worker's inputs)."""
    return json.dumps({**dataclasses.asdict(spec), "block_size": block_size, "qkv": with_qkv, "where": where},
                      sort_keys=True, default=str)


def build(request: InputRequest) -> tuple[torch.Tensor, QKV | None]:
    """The request's (H, MB, NB) bool mask, and Q/K/V (B, H, N, D) when it asks for them (bf16 on a GPU, the paper's
    dtype; float32 on the CPU)."""
    spec, block_size, device = request.spec, request.block_size, request.device
    method = masks.get(spec.method)
    identity = {"model": spec.model, "layer": spec.layer, "heads": list(spec.heads) or list(range(spec.num_heads)),
                "latent": latent(spec)}
    if method.needs_qk:
        if spec.model is None:
            raise ValueError(f"method {spec.method!r} builds its mask from a model's Q/K; workload {spec.workload!r} "
                             "is a bare shape")
        q, k, v = _workload_qkv(spec, device)
        # a token-ordered method's mask lives in its own token order (VSA, SVG2): Q/K/V in that order with it
        built = masks.build_for_heads(spec.method, q, k, v, block_size, **identity, **spec.method_params)
        mask = built.mask
        qkv = (built.q, built.k, built.v) if request.with_qkv else None
    else:
        blocks = math.ceil(spec.seq_len_tokens / block_size)
        mask = method.for_shape(spec.num_heads, blocks, blocks, device=device, block_size=block_size,
                                **masks.identity_params(spec.method, **identity), **spec.method_params)
        qkv = random_qkv(spec, device) if request.with_qkv else None
    mask = mask.reshape(-1, *mask.shape[-2:]).to(device)
    if qkv is not None and device.type == "cuda":
        qkv = tuple(t.to(torch.bfloat16) for t in qkv)
    return mask, qkv


def latent(spec: InputSpec) -> tuple[int, int, int] | None:
    """The latent (T, H, W) of the inputs' tokens: their captured file's grid, or their model preset's; None for a
    bare (seq_len, heads) shape."""
    if spec.captured is not None:
        return workloads.read_header(spec.captured).grid
    if spec.model is None:
        return None
    return workloads.preset(spec.model, frames=spec.frames, resolution=spec.resolution).latent


def _workload_qkv(spec: InputSpec, device: torch.device) -> QKV:
    """The model's Q/K/V: read from the captured file, or drawn by the synthetic generator."""
    if spec.captured is not None:
        captured = workloads.load_captured(spec.captured, heads=list(spec.heads), device=device)
        return captured.q[:1], captured.k[:1], captured.v[:1]  # the first batch element (the conditional one)
    wl = workloads.preset(spec.model, frames=int(spec.frames), resolution=spec.resolution)
    return workloads.synthetic(wl, heads=list(spec.heads), layer=spec.layer, step=spec.step, seed=spec.seed,
                               device=device, config=workloads.generator(spec.generator))


def random_qkv(spec: InputSpec, device: torch.device) -> QKV:
    """Gaussian Q/K/V of the inputs' shape: what a kernel computes on does not change its block schedule. Drawn on
    the device, in the dtype it runs (bf16 on a GPU): at 364K tokens the three are 560M numbers, seconds of host
    time to draw and copy. A seed gives the same tensors on the same kind of device."""
    gen = torch.Generator(device=device).manual_seed(spec.seed)
    shape = (1, spec.num_heads, spec.seq_len_tokens, spec.head_dim)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return tuple(torch.randn(shape, generator=gen, device=device, dtype=dtype)  # type: ignore[return-value]
                 for _ in range(3))


def launch_shape(spec: InputSpec, geometry: LaunchGeometry, qkv: QKV | None, device: torch.device) -> LaunchShape:
    """The shape a launch on these inputs is planned for, in ``geometry``, on the GPU it runs on or is simulated
    for."""
    dtype = qkv[0].dtype if qkv is not None else torch.bfloat16
    return LaunchShape(batch=1, heads=spec.num_heads, q_len=spec.seq_len_tokens, kv_len=spec.seq_len_tokens,
                       head_dim=spec.head_dim, block_size=geometry.block_size, dtype=dtype, device=device,
                       hardware=geometry.profile_hardware, wave_size=geometry.wave_size)


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

    def take(self, request: InputRequest) -> tuple[torch.Tensor, QKV | None, float, bool]:
        """The group's mask, Q/K/V, the ms it took to build them (recorded as the mask's cost even when reused), and
        whether a prefetch built them: kept from the previous group on the same inputs (with that group's flag),
        taken from ``prefetch`` (waiting for it if it is still building; its error, if it failed, is raised here, so
        the group fails as it would have building them itself), or built now.

        One set is kept at a time besides one prefetched set, and the kept one is dropped before the next is built
        or taken (a 364K x 40-head set is ~11 GB of GPU memory)."""
        wanted = request.key
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
                if request.device.type == "cuda":  # made on the prefetch stream, used and freed on this one
                    for t in (mask, *(qkv or ())):
                        t.record_stream(torch.cuda.current_stream(request.device))
            else:
                start = time.perf_counter()
                mask, qkv = build(request)
                build_ms = (time.perf_counter() - start) * 1e3
            with self._lock:
                self._kept[wanted] = (mask, qkv, build_ms, job is not None)
        finally:
            with self._lock:
                self._building = None
        return mask, qkv, build_ms, job is not None

    def prefetch(self, request: InputRequest, name: str) -> bool:
        """Start building the inputs ``request`` asks (the next group's, called ``name``) in a background thread, on
        a CUDA stream of its own (the lowest priority) on a GPU, so that the group timed meanwhile keeps the default
        stream; ``take`` then takes them. Returns whether a build was started: not when the cache keeps or is
        building those inputs already. A prefetched set not taken yet is replaced (its build finishes first, so at
        most one prefetched set lives besides the kept one). A build's error is raised by ``take``, where the group's
        cells are recorded failed with it."""
        wanted = request.key
        with self._lock:
            if wanted in self._kept or wanted == self._building or (
                    self._prefetched is not None and self._prefetched.key == wanted):
                return False
            previous, self._prefetched = self._prefetched, _Prefetch(wanted)
            job = self._prefetched
        threading.Thread(target=self._build_ahead, args=(job, request, previous), name=f"prefetch-{name}",
                         daemon=True).start()
        return True

    @property
    def prefetching(self) -> str | None:
        """The key of the set being prefetched (or prefetched and not taken yet), if any."""
        return None if self._prefetched is None else self._prefetched.key

    def _build_ahead(self, job: _Prefetch, request: InputRequest, previous: _Prefetch | None) -> None:
        """``prefetch``'s thread: wait for the set it replaces to finish building (then drop it), build, and say
        done."""
        try:
            if previous is not None:
                previous.done.wait()
                previous.inputs = None
            start = time.perf_counter()
            if request.device.type == "cuda":
                stream = self._stream(request.device)
                with torch.cuda.stream(stream):
                    mask, qkv = build(request)
                stream.synchronize()
            else:
                mask, qkv = build(request)
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
