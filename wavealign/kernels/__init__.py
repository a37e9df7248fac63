"""Attention backends behind one plan/run interface, keyed by name (a sweep's ``grid.backend``).

    launch = kernels.get("fa4").plan(mask, order, LaunchShape.of(q, k, block_size=128))  # once per mask
    out = launch.run(q, k, v)                                                          # many times

``mask`` is a bool block mask (H, MB, NB) or (B, H, MB, NB) (or its kv-index form); ``order`` a
``launch_order.RowOrder`` or None. A launch runs query blocks in ``order.perm`` launch order and returns the
output in the original order, so a reorder never changes the result. Planning (format conversion,
scheduling metadata, the permuted mask) happens once, in ``plan``; ``run`` is what a user's step pays.

A backend module declares every fact the rest of the project needs about it, and nothing else lists them:
the GPUs it runs on and its resident CTAs per SM on each (hence its wave), how its rows walk their K/V
lists, the kernel names Nsight Compute should profile, and the execution facts the L2 simulator models.
Adding a backend is one module that calls ``register``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Protocol

import torch

from wavealign import hardware as hardware_registry
from wavealign.blockmask import check_int
from wavealign.launch_order.row_order import check_launch_order
from wavealign.records import LaunchGeometry
from wavealign.registry import Registry

KV_WALKS = ("forward", "reverse")
HEAD_ORDERS = ("sequential", "parallel")
# "streaming": a grid of one CTA per query tile, each SM taking the next tile when it frees (FA4's SM90
# SingleTileScheduler, the Triton and FlexAttention grids); "static-persistent": one CTA per SM, CTA c running tiles
# c, c + G, c + 2G, ... of the launch queue whatever they cost (FA4's SM100 StaticPersistentTileScheduler)
SCHEDULERS = ("streaming", "static-persistent")


def check_qkv_tensors(**tensors: Any) -> None:
    """Attention inputs (``q=..., k=..., v=...``) must be floating tensors of one dtype on one device that holds
    data: an integer q would run in integer arithmetic (the reference rounds every output to 0), a kernel reads all
    three with one dtype from one device, and a ``meta`` tensor is a shape without data (every kernel failed on it
    with a traceback of its own)."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a floating torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise ValueError(f"{name} must have a floating dtype (bfloat16, float16 or float32), got {t.dtype}")
    names = "/".join(tensors)
    if len({t.dtype for t in tensors.values()}) > 1:
        got = ", ".join(f"{name} {t.dtype}" for name, t in tensors.items())
        raise ValueError(f"{names} must share one dtype, got {got}")
    if len({t.device for t in tensors.values()}) > 1:
        got = ", ".join(f"{name} on {t.device}" for name, t in tensors.items())
        raise ValueError(f"{names} must be on one device, got {got}")
    for name, t in tensors.items():
        if t.is_meta:
            raise ValueError(f"{name} is on the meta device (a shape without data); expected a tensor on cpu or "
                             "cuda")


@dataclass(frozen=True)
class LaunchShape:
    """What a launch is planned for: Q/K/V sizes, the mask's block size, and where it runs.

    ``hardware`` (a ``wavealign.hardware`` id) and ``wave_size`` matter where a GPU is modelled (the ``simulated``
    measurer); kernels read the device and dtype.
    """

    batch: int
    heads: int
    q_len: int
    kv_len: int
    head_dim: int
    block_size: int
    dtype: torch.dtype = torch.bfloat16
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    hardware: str | None = None
    wave_size: int | None = None

    @classmethod
    def of(cls, q: torch.Tensor, k: torch.Tensor, block_size: int = 128, *, v: torch.Tensor | None = None,
           **target: Any) -> LaunchShape:
        """The shape of q (B, H, N, D) against k (B, H, N_kv, D) (and v, checked with them when given);
        ``target`` sets hardware / wave_size."""
        check_qkv_tensors(q=q, k=k, **({} if v is None else {"v": v}))
        block_size = check_int("block_size", block_size, lo=1)
        if q.dim() != 4 or k.dim() != 4:
            raise ValueError(f"q and k must be (B, H, N, D), got {tuple(q.shape)} and {tuple(k.shape)}")
        if q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
            raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must share B, H and D")
        return cls(batch=q.shape[0], heads=q.shape[1], q_len=q.shape[2], kv_len=k.shape[2], head_dim=q.shape[3],
                   block_size=block_size, dtype=q.dtype, device=q.device, **target)

    @property
    def q_blocks(self) -> int:
        return -(-self.q_len // self.block_size)

    @property
    def kv_blocks(self) -> int:
        return -(-self.kv_len // self.block_size)

    def check_qkv(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Fail when q/k/v are not the tensors this launch was planned for."""
        check_qkv_tensors(q=q, k=k, v=v)
        want_q = (self.batch, self.heads, self.q_len, self.head_dim)
        want_kv = (self.batch, self.heads, self.kv_len, self.head_dim)
        if tuple(q.shape) != want_q or tuple(k.shape) != want_kv or tuple(v.shape) != want_kv:
            raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} differ from the planned "
                             f"q {want_q} and k/v {want_kv}")


class Launch(Protocol):
    """A planned launch: ``run`` computes attention of q/k/v (B, H, N, D) under the planned mask and order."""

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True)
class ExecutionFacts:
    """How a backend runs a block mask, as the L2 simulator (``wavealign.sim``) models it."""

    # one query tile per CTA; one K/V tile per inner-loop step (the mask's block size in a sweep)
    block_m: int
    block_n: int
    # fraction of the SM's dense bf16 peak the inner MMA loop reaches (round figures: FA3/FA4 ~75% of the
    # H100 peak dense, Triton-based kernels ~50-60%), to be calibrated by ``python lab/validate_sim.py``
    mma_efficiency: float
    # per K/V block cost outside the MMAs: index load, softmax bookkeeping, pipeline bubble
    block_overhead_s: float
    # the order in which one query row walks its K/V list (FA4 walks it from the last block down)
    kv_walk: str = "forward"
    # "sequential": every query block of head 0 launches before head 1 (FA4's SingleTileScheduler, the
    # FlexAttention and Triton grids, FlashInfer's work list); "parallel": slot p of every head before p + 1
    head_order: str = "sequential"
    element_bytes: int = 2  # bf16 Q/K/V
    # query tiles of block_m rows one CTA runs against each K/V tile it loads (FA4 on SM100: 2), so one sparse query
    # block (a launch row) spans q_stage x block_m tokens: the mask's rows are coarsened to it (``wavealign.sim``)
    q_stage: int = 1
    scheduler: str = "streaming"  # one of SCHEDULERS
    # the share of the shorter of compute and HBM time the kernel's pipeline leaves exposed: 0 is the roofline
    # max(compute, memory), 1 their sum (``wavealign.sim``'s kernel time)
    exposed_memory_fraction: float = 0.0

    def __post_init__(self) -> None:
        if self.kv_walk not in KV_WALKS:
            raise ValueError(f"kv_walk={self.kv_walk!r}; expected one of {KV_WALKS}")
        if self.head_order not in HEAD_ORDERS:
            raise ValueError(f"head_order={self.head_order!r}; expected one of {HEAD_ORDERS}")
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler={self.scheduler!r}; expected one of {SCHEDULERS}")
        check_int("q_stage", self.q_stage, lo=1)
        if not 0.0 <= self.exposed_memory_fraction <= 1.0:
            raise ValueError(f"exposed_memory_fraction={self.exposed_memory_fraction!r}; expected a number in [0, 1]")

    @property
    def q_rows(self) -> int:
        """Query tokens of one launch row: ``q_stage`` tiles of ``block_m``."""
        return self.q_stage * self.block_m

    def kv_block_bytes(self, head_dim: int) -> int:
        """Bytes one inner step reads: a K tile and a V tile of ``block_n`` tokens."""
        return 2 * self.block_n * head_dim * self.element_bytes

    def q_block_bytes(self, head_dim: int) -> int:
        """Bytes of one launch row's queries (``q_rows`` tokens), read once per row."""
        return self.q_rows * head_dim * self.element_bytes

    def with_block_size(self, block_size: int | None) -> ExecutionFacts:
        """These facts with tiles of the mask's block size (unchanged for None; ``q_stage`` kept)."""
        if block_size is None:
            return self
        block_size = check_int("block_size", block_size, lo=1)
        return replace(self, block_m=block_size, block_n=block_size)


def _always() -> bool:
    return True


def _checked_plan(plan: Callable[..., Launch], name: str, needs_gpu: bool) -> Callable[..., Launch]:
    """``plan`` taking its order through ``check_launch_order`` (``launch_order.row_order``) and, for a backend that
    needs a GPU, refusing q/k/v off a CUDA device: wherever a launch is planned, an order that is not a ``RowOrder``
    over the launch's (H, MB) is refused before any work, and so is a GPU kernel asked to run on the CPU (``flex`` would
    compile for minutes there before failing)."""
    if getattr(plan, "checks_order", False):
        return plan

    @functools.wraps(plan)
    def checked(mask, order, shape: LaunchShape, *args: Any, **options: Any) -> Launch:
        order = check_launch_order(order, shape.heads, shape.q_blocks)
        if needs_gpu and shape.device.type != "cuda":
            raise ValueError(f"backend {name!r} runs on a CUDA GPU; q/k/v are on {shape.device}: move them to "
                             f"cuda, or use a backend that runs on the CPU ({_cpu_backends()})")
        return plan(mask, order, shape, *args, **options)

    checked.checks_order = True  # type: ignore[attr-defined]
    return checked


def _cpu_backends() -> list[str]:
    return [n for n in REGISTRY.names() if not REGISTRY.get(n).needs_gpu]


@dataclass(frozen=True)
class Backend:
    """One attention implementation, its planner and the facts the sweep and the simulator need about it."""

    name: str
    plan: Callable[..., Launch]  # plan(mask, order, shape, **options) -> Launch
    description: str
    # resident CTAs per SM on each GPU it supports (Nsight Compute's occupancy limit), hence its wave
    ctas_per_sm: Mapping[str, int]
    # how it runs a block mask, for the simulator (None: a backend nothing can model, so never measured simulated)
    execution: ExecutionFacts | None = None
    # the facts on the GPUs where it runs a mask otherwise (FA4's SM100 kernel on b200), by hardware id: read through
    # ``execution_on``
    execution_by_hardware: Mapping[str, ExecutionFacts] = field(default_factory=dict)
    # a regular expression matching its attention kernels' names under Nsight Compute ("" profiles every kernel)
    ncu_kernels: str = ""
    is_available: Callable[[], bool] = _always
    # True when it needs a GPU to run (the sweep does not place it on CPU workers: ``wavealign.placement``)
    needs_gpu: bool = True
    # True when it computes every block (``sdpa``): it takes only method ``dense``'s mask (``takes``), so
    # ``wavealign.placement`` refuses its cells with a sparse method
    dense_only: bool = False
    # the launch options a sweep may set (``grid.backend_params``) and their defaults; None: the planner's keyword
    # parameters that have a default (``keyword_defaults``)
    params: Mapping[str, Any] | None = None
    # check_options(options, block_size) raises ValueError naming a launch option ``plan`` would refuse; the sweep
    # runs it when it validates the config, before any cell is built (None: the planner's signature is the check)
    check_options: Callable[[Mapping[str, Any], int], None] | None = None
    # the types of params whose default says none (``registry.param_types``)
    types: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "plan", _checked_plan(self.plan, self.name, self.needs_gpu))
        object.__setattr__(self, "ctas_per_sm", MappingProxyType(dict(self.ctas_per_sm)))
        object.__setattr__(self, "execution_by_hardware", MappingProxyType(dict(self.execution_by_hardware)))
        if stray := sorted(set(self.execution_by_hardware) - set(self.ctas_per_sm)):
            raise ValueError(f"backend {self.name!r}: execution_by_hardware names hardware {stray} it does not run on; "
                             f"expected ids from its ctas_per_sm {sorted(self.ctas_per_sm)}")
        params = keyword_defaults(self.plan) if self.params is None else self.params
        object.__setattr__(self, "params", MappingProxyType(dict(params)))
        unknown = sorted(set(self.ctas_per_sm) - set(hardware_registry.names()))
        if unknown:
            raise ValueError(f"backend {self.name!r}: ctas_per_sm names unknown hardware {unknown}; expected ids "
                             f"from {hardware_registry.names()}")

    @property
    def supported_hardware(self) -> tuple[str, ...]:
        """The GPU ids it runs on: those it declares CTAs per SM for."""
        return tuple(sorted(self.ctas_per_sm))

    def supports(self, hardware: str) -> bool:
        """Whether this backend runs on (so can be simulated for) the GPU type ``hardware`` (an id: ``"a40"``)."""
        return hardware in self.ctas_per_sm

    def execution_on(self, hardware: str | hardware_registry.Hardware) -> ExecutionFacts | None:
        """How it runs a block mask on ``hardware`` (an id or a described GPU): that GPU's own facts where it declares
        them, else ``execution``."""
        return self.execution_by_hardware.get(hardware_registry.get(hardware).name, self.execution)

    def takes(self, method: str) -> bool:
        """Whether it computes the masks of mask method ``method``: a ``dense_only`` backend takes ``dense``'s."""
        return not self.dense_only or method == "dense"

    def geometry(self, hardware: str | None, block_size: int, wave_size: int | None = None) -> LaunchGeometry:
        """The geometry of this backend's launches on ``hardware`` (a ``wavealign.hardware`` id; None: none known)
        in blocks of ``block_size``: its wave is ``wave_size`` when given, else ``self.wave_size(hardware)``. The one
        place a wave size defaults."""
        if wave_size is None:
            if hardware is None:
                raise ValueError(f"backend {self.name!r}: wave_size=None needs a GPU to take the wave from; pass "
                                 "hardware='h200' (any wavealign.hardware id) or a wave_size")
            wave_size = self.wave_size(hardware)
        name = None if hardware is None else hardware_registry.get(hardware).name
        return LaunchGeometry(profile_hardware=name, block_size=int(block_size), wave_size=int(wave_size))

    def wave_size(self, hardware: str | hardware_registry.Hardware) -> int:
        """Rows that run at once on ``hardware``: its SMs x this backend's resident CTAs per SM (the paper's wave)."""
        hw = hardware_registry.get(hardware)
        if hw.name not in self.ctas_per_sm:
            raise ValueError(f"backend {self.name!r} declares no CTAs per SM for hardware {hw.name!r}; it runs on "
                             f"{list(self.supported_hardware)}")
        return hw.sm_count * self.ctas_per_sm[hw.name]

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask, order=None, block_size: int = 128,
                 **options: Any) -> torch.Tensor:
        """Plan and run once (a mask used for one step); plan yourself to run one mask many times."""
        return self.plan(mask, order, LaunchShape.of(q, k, block_size, v=v), **options).run(q, k, v)


def keyword_defaults(plan: Callable[..., Launch]) -> dict[str, Any]:
    """A planner's options and their defaults: its parameters after (mask, order, shape) that have a default."""
    return {p.name: p.default for p in list(inspect.signature(plan).parameters.values())[3:]
            if p.default is not inspect.Parameter.empty and p.kind is not inspect.Parameter.VAR_KEYWORD}


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


ALL_HARDWARE: Mapping[str, int] = MappingProxyType({name: 1 for name in hardware_registry.names()})
"""``ctas_per_sm`` of a backend whose occupancy is not a fact of the GPU (the CPU reference, dense SDPA)."""
