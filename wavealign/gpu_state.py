"""The GPU's state around a timing: SM and memory clocks, power, temperature and why the clocks are held down, read
through NVML (ctypes on ``libnvidia-ml.so.1``, which ships with the driver: no new dependency). Clocks are only read,
never set.

Why: a kernel timed while the GPU slows for power or heat is not comparable with one timed at full clock, so the
timer drops such rounds (``wavealign.instruments.timing.time_rounds``) and every cell records the state before and
after (``record``). The reasons are NVML's clocks-event bitmask (``nvmlDeviceGetCurrentClocksEventReasons``, "GPU
clocks event reasons" in the NVML API reference, docs.nvidia.com/deploy/nvml-api; older drivers name it
``nvmlDeviceGetCurrentClocksThrottleReasons``, same bits). NVBench does the same job differently
(NVIDIA/nvbench, ``nvbench/detail/measure_cold.cu``): it measures the SM clock over each trial and discards the
trial, then pauses, when that clock falls below a threshold of the default clock; here NVML names the cause, so a
GPU held at a user's locked clocks is not mistaken for a throttled one.

A torch CUDA device is matched to its NVML handle by PCI bus id, never by index: ``CUDA_VISIBLE_DEVICES`` renumbers
CUDA devices but not NVML's. ``read`` never raises: no NVML, a CPU device or any NVML error gives ``None``."""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import torch

from wavealign.records import CellResult

# nvmlClocksEventReason* bits (nvml.h); the names as nvidia-smi -q -d PERFORMANCE writes them, in snake case
REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clock",
}
# reasons that leave a rep trustworthy: the clocks where the user or an idle GPU put them, and the software power cap,
# which is how a loaded GPU boosts normally (an H200 running FA4 at 40 heads sits at its 700 W cap, sw_power_cap
# active, through every round: benchmarks/results/paired-h200/); thermal and hardware slowdowns are not
BENIGN = frozenset({"gpu_idle", "applications_clocks_setting", "display_clock", "sw_power_cap"})

_NVML_CLOCK_SM, _NVML_CLOCK_MEM = 1, 2  # nvmlClockType_t
_NVML_TEMPERATURE_GPU = 0  # nvmlTemperatureSensors_t


@dataclass(frozen=True)
class GpuState:
    """One NVML reading of a GPU. ``clocks_locked``: the clocks are held by a setting (application clocks, or
    clocks locked with ``nvidia-smi -lgc``), i.e. NVML reports ``applications_clocks_setting`` among the reasons."""

    sm_clock_mhz: float
    mem_clock_mhz: float
    power_w: float
    temperature_c: float
    throttle_reasons: tuple[str, ...]

    @classmethod
    def from_nvml(cls, sm_clock_mhz: float, mem_clock_mhz: float, power_w: float, temperature_c: float,
                  reasons_mask: int) -> GpuState:
        """A state from NVML's figures and its clocks-event bitmask, decoded into reason names."""
        return cls(sm_clock_mhz=sm_clock_mhz, mem_clock_mhz=mem_clock_mhz, power_w=power_w,
                   temperature_c=temperature_c, throttle_reasons=reason_names(reasons_mask))

    @property
    def clocks_locked(self) -> bool:
        return "applications_clocks_setting" in self.throttle_reasons

    @property
    def throttled(self) -> bool:
        """Slowed for heat, by a hardware slowdown or power brake, or held for sync boost: a rep timed now is not
        trustworthy (the software power cap is a loaded GPU's normal state, ``BENIGN``)."""
        return any(reason not in BENIGN for reason in self.throttle_reasons)


def reason_names(mask: int) -> tuple[str, ...]:
    """The names of the reasons set in an NVML clocks-event bitmask, lowest bit first (unknown bits left out)."""
    return tuple(name for bit, name in REASONS.items() if mask & bit)


class _NvmlError(Exception):
    pass


_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_loaded = False  # tried once per process; a failed load is not retried
_handles: dict[str, ctypes.c_void_p] = {}


def _nvml() -> ctypes.CDLL:
    """NVML, loaded and initialised once per process (under a lock: timing may run in threads)."""
    global _library, _loaded
    with _lock:
        if not _loaded:
            _loaded = True
            try:
                library = ctypes.CDLL("libnvidia-ml.so.1")
                if library.nvmlInit_v2() == 0:
                    _library = library
            except (OSError, AttributeError):
                pass
    if _library is None:
        raise _NvmlError("NVML is not available")
    return _library


def _call(library: ctypes.CDLL, name: str, *args: object) -> None:
    code = getattr(library, name)(*args)
    if code != 0:
        raise _NvmlError(f"{name} returned {code}")


def pci_bus_id(device: torch.device) -> str:
    """The CUDA device's PCI bus id as NVML takes it, ``DDDD:BB:DD.0`` in hex."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return f"{props.pci_domain_id:04X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"


def _handle(library: ctypes.CDLL, bus_id: str) -> ctypes.c_void_p:
    with _lock:
        if bus_id not in _handles:
            handle = ctypes.c_void_p()
            _call(library, "nvmlDeviceGetHandleByPciBusId_v2", bus_id.encode(), ctypes.byref(handle))
            _handles[bus_id] = handle
        return _handles[bus_id]


def _reasons_mask(library: ctypes.CDLL, handle: ctypes.c_void_p) -> int:
    mask = ctypes.c_ulonglong()
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        if hasattr(library, name):
            _call(library, name, handle, ctypes.byref(mask))
            return mask.value
    raise _NvmlError("this NVML has no clocks-event reasons")


def read(device: torch.device) -> GpuState | None:
    """The GPU's state now, or ``None`` on a CPU device, without NVML, or on any NVML error (a measurement never
    fails for want of it)."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    try:
        library = _nvml()
        handle = _handle(library, pci_bus_id(device))
        sm, mem, power_mw, temperature = (ctypes.c_uint() for _ in range(4))
        _call(library, "nvmlDeviceGetClockInfo", handle, _NVML_CLOCK_SM, ctypes.byref(sm))
        _call(library, "nvmlDeviceGetClockInfo", handle, _NVML_CLOCK_MEM, ctypes.byref(mem))
        _call(library, "nvmlDeviceGetPowerUsage", handle, ctypes.byref(power_mw))
        _call(library, "nvmlDeviceGetTemperature", handle, _NVML_TEMPERATURE_GPU, ctypes.byref(temperature))
        mask = _reasons_mask(library, handle)
    except (_NvmlError, AttributeError, RuntimeError, AssertionError):
        # AttributeError: a torch without pci_* properties; RuntimeError/AssertionError: torch.cuda unusable
        return None
    return GpuState.from_nvml(float(sm.value), float(mem.value), power_mw.value / 1000.0, float(temperature.value),
                              mask)


def record(result: CellResult, before: GpuState | None, after: GpuState | None) -> None:
    """Write the states into a ``CellResult``'s ``gpu_*_before``/``gpu_*_after`` fields; a ``None`` state leaves its
    fields NaN/None. ``gpu_clocks_locked``: either reading saw locked clocks."""
    for when, state in (("before", before), ("after", after)):
        if state is None:
            continue
        setattr(result, f"gpu_sm_clock_mhz_{when}", state.sm_clock_mhz)
        setattr(result, f"gpu_mem_clock_mhz_{when}", state.mem_clock_mhz)
        setattr(result, f"gpu_power_w_{when}", state.power_w)
        setattr(result, f"gpu_temperature_c_{when}", state.temperature_c)
        setattr(result, f"gpu_throttle_{when}", ",".join(state.throttle_reasons))
    states = [state for state in (before, after) if state is not None]
    if states:
        result.gpu_clocks_locked = any(state.clocks_locked for state in states)
