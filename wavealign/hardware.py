"""Descriptions of the GPUs WaveAlign targets: the facts the skip model, the simulator and the sweep need.

Each entry is the one place its GPU's figures are written; a sweep's ``grid.hardware`` names entries by id. Adding a
GPU type is one entry here plus one ``ctas_per_sm`` line in each backend that runs on it (``wavealign.kernels``).
Figures are vendor datasheet values unless a ``measured`` note says otherwise; ``sources`` cites where each came
from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MiB = 1 << 20


@dataclass(frozen=True)
class Hardware:
    """One GPU model. Its wave for a backend (SMs x that backend's resident CTAs per SM) is the backend's
    fact: ``wavealign.kernels.get(backend).wave_size(hardware)``."""

    name: str
    display_name: str
    ray_accelerator_type: str
    compute_capability: tuple[int, int]
    sm_count: int
    l2_bytes: int
    hbm_bytes_per_s: float
    peak_bf16_flops: float
    default_block_size: int
    default_backend: str  # the backend a user of this GPU reaches for first (the paper's, where it has one)
    # L2 partitions, each caching for the SMs of the GPCs attached to it (A100/H100 whitepapers: two; H200 is the
    # same GH100 die; B200 is two dies, each with half the L2). Against the paper's Table I two partitions
    # predict the originals' L2 hit well, a unified L2 twice too high (benchmarks/results/sim-paper).
    l2_partitions: int = 1
    device_name_patterns: tuple[str, ...] = ()  # regular expressions, matched case-insensitively
    sources: tuple[str, ...] = ()

    @property
    def ridge_flops_per_byte(self) -> float:
        """Operational intensity where the bf16 compute roof meets the HBM roof."""
        return self.peak_bf16_flops / self.hbm_bytes_per_s


_ENTRIES = (
    Hardware(
        name="h100",
        display_name="NVIDIA H100 SXM5 80GB",
        ray_accelerator_type="H100",
        compute_capability=(9, 0),
        sm_count=132,
        l2_bytes=50 * MiB,
        hbm_bytes_per_s=3.35e12,
        peak_bf16_flops=989.4e12,
        default_block_size=128,
        default_backend="fa4",
        l2_partitions=2,
        # the SXM part only: H100 PCIe (114 SMs) and H100 NVL differ
        device_name_patterns=(r"\bH100 80GB HBM3\b", r"\bH100 SXM"),
        sources=(
            "NVIDIA H100 Tensor Core GPU datasheet (SXM5: 132 SMs, 3.35 TB/s, 989 TFLOP/s dense BF16)",
            "NVIDIA Hopper architecture whitepaper (50 MB L2)",
            "WaveAlign paper, Sec. V: FA4 128x128 tiles, 1 CTA/SM, wave 132",
        ),
    ),
    Hardware(
        name="h200",
        display_name="NVIDIA H200 SXM 141GB",
        ray_accelerator_type="H200",
        compute_capability=(9, 0),
        sm_count=132,
        l2_bytes=60 * MiB,
        hbm_bytes_per_s=4.8e12,
        peak_bf16_flops=989.4e12,
        default_block_size=128,
        default_backend="triton",
        l2_partitions=2,
        device_name_patterns=(r"(?<![A-Z])H200\b",),  # not GH200
        sources=(
            "NVIDIA H200 datasheet (141 GB HBM3e, 4.8 TB/s; compute as H100 SXM)",
            "torch.cuda.get_device_properties on the project's H200: 132 SMs, L2 60 MiB",
            "ncu launch__occupancy_limit_* on the H200, 2026-11-29: 1 CTA/SM for triton (228 regs x 256 threads) "
            "and flex (169-198 regs); benchmarks/results/kernels-h200/TUNING.md",
            "the same on the H200 for FA4 (1 CTA/SM, 168 regs) and FlashInfer's FA2 paged prefill (2 CTAs/SM, "
            "255 regs); benchmarks/results/fa4-flashinfer/h200-ncu-364k",
        ),
    ),
    Hardware(
        name="a40",
        display_name="NVIDIA A40 48GB",
        ray_accelerator_type="A40",
        compute_capability=(8, 6),
        sm_count=84,
        l2_bytes=6 * MiB,
        hbm_bytes_per_s=696e9,
        peak_bf16_flops=149.7e12,
        default_block_size=64,
        default_backend="flashinfer",
        device_name_patterns=(r"\bA40\b",),  # not RTX A4000
        sources=(
            "NVIDIA A40 datasheet (84 SMs, 696 GB/s GDDR6, 149.7 TFLOP/s dense BF16)",
            "NVIDIA GA102 whitepaper (6 MB L2)",
            "WaveAlign paper, Sec. V: FlashInfer 64x64 tiles, 2 CTAs/SM, wave 168",
        ),
    ),
    Hardware(
        name="a100",
        display_name="NVIDIA A100 SXM4 80GB",
        ray_accelerator_type="A100",
        compute_capability=(8, 0),
        sm_count=108,
        l2_bytes=40 * MiB,
        hbm_bytes_per_s=2.039e12,
        peak_bf16_flops=312e12,
        default_block_size=128,
        default_backend="triton",
        l2_partitions=2,
        device_name_patterns=(r"\bA100\b",),
        sources=("NVIDIA A100 datasheet (80GB SXM: 2,039 GB/s, 312 TFLOP/s BF16)",
                 "NVIDIA Ampere GA100 whitepaper (108 SMs, 40 MB L2)"),
    ),
    Hardware(
        name="b200",
        display_name="NVIDIA B200 180GB",
        ray_accelerator_type="B200",
        compute_capability=(10, 0),
        sm_count=148,
        l2_bytes=126 * MiB,
        hbm_bytes_per_s=8.0e12,
        peak_bf16_flops=2250e12,
        default_block_size=128,
        default_backend="fa4",
        l2_partitions=2,
        device_name_patterns=(r"(?<![A-Z])B200\b",),  # not GB200
        sources=("NVIDIA DGX B200 / HGX B200 datasheet (8 TB/s HBM3e, 2.25 PFLOP/s dense BF16 per GPU)",
                 "NVIDIA Blackwell Tuning Guide (CUDA documentation): compute capability 10.0, L2 126 MB",
                 "Chips and Cheese, 'Nvidia's B200: Keeping the CUDA Juggernaut Rolling': two dies, 74 SMs enabled "
                 "each (148), clocks near the H100 SXM5's; B200 reports of 1965 MHz max SM clock"),
    ),
)

REGISTRY: dict[str, Hardware] = {hw.name: hw for hw in _ENTRIES}


def names() -> list[str]:
    """The hardware ids, as a sweep's ``grid.hardware`` names them."""
    return sorted(REGISTRY)


def get(name: str | Hardware) -> Hardware:
    """Look a GPU up by id (``"h100"``); a ``Hardware`` passes through."""
    if isinstance(name, Hardware):
        return name
    try:
        return REGISTRY[name.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown hardware {name!r}; expected one of {names()}") from None


def from_device_name(device_name: str) -> Hardware | None:
    """Map a CUDA device name (``torch.cuda.get_device_name()``) to its description, if known."""
    for hw in _ENTRIES:
        if any(re.search(p, device_name, re.IGNORECASE) for p in hw.device_name_patterns):
            return hw
    return None


def detect(device: int | None = None) -> Hardware | None:
    """The description of the current CUDA device, or None without CUDA or for an unknown GPU."""
    import torch

    if not torch.cuda.is_available():
        return None
    hw = from_device_name(torch.cuda.get_device_name(device))
    # a cut-down part under a matching name (fewer SMs) would get the wrong wave and L2: treat it as unknown
    if hw is not None and torch.cuda.get_device_properties(device).multi_processor_count != hw.sm_count:
        return None
    return hw
