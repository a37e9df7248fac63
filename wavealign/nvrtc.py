"""CUDA C kernels compiled at first use by NVRTC (shipped with CUDA builds of torch), and launched from any thread.

A ``Program`` is the concatenation of one or more ``.cu`` files and the kernels to load from it; it is compiled once
per process and GPU. The project's two: the mask's row counts (``mask_bytes.cu``, for ``blockmask.row_nnz``) and
WaveAlign's Stage 1 (``reorderers/wavealign/stage1.cu``, after ``mask_bytes.cu``, whose 16-byte loads it shares).
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from pathlib import Path

import torch

MASK_BYTES = Path(__file__).with_name("mask_bytes.cu")


def usable(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` can take an NVRTC kernel path: a CUDA tensor on an sm_80+ GPU (int8 ``mma.sync``), with
    torch's NVRTC helpers present."""
    from torch.cuda import _utils

    return (tensor.is_cuda and torch.version.hip is None and hasattr(_utils, "_nvrtc_compile")
            and hasattr(_utils, "_cuda_load_module") and torch.cuda.get_device_capability(tensor.device)[0] >= 8)


@dataclass(frozen=True)
class Program:
    """The ``kernels`` of the CUDA C source made of ``files``, in order (a later file may use an earlier one's
    device functions)."""

    files: tuple[Path, ...]
    kernels: tuple[str, ...]

    def launch(self, name: str, device: torch.device, blocks: int, threads: int, *args) -> None:
        """Launch kernel ``name`` on ``device``'s current stream: ``blocks`` x ``threads``, with ``args``."""
        with torch.cuda.device(device):
            _make_context_current(device.index)
            _compiled(self, device.index)[name](grid=(blocks, 1, 1), block=(threads, 1, 1), args=list(args))


@functools.lru_cache(maxsize=8)
def _compiled(program: Program, device_index: int) -> dict:
    """``program``'s kernels, compiled by NVRTC for the GPU ``device_index`` once per process."""
    from torch.cuda._utils import _cuda_load_module, _nvrtc_compile

    source = "\n".join(path.read_text() for path in program.files)
    with torch.cuda.device(device_index):
        binary, _ = _nvrtc_compile(source, program.kernels[0])
        return _cuda_load_module(binary, list(program.kernels))


def _make_context_current(device_index: int) -> None:
    """Make the GPU's primary context current on this thread, as torch's own calls do lazily: a driver-API launch
    from a thread that has not touched CUDA yet (a Ray worker's second thread), or whose current context is another
    GPU's, would otherwise fail with "invalid device context"."""
    from torch.cuda._utils import _get_gpu_runtime_library

    lib = _get_gpu_runtime_library()
    current, current_device = ctypes.c_void_p(), ctypes.c_int(-1)
    if (lib.cuCtxGetCurrent(ctypes.byref(current)) == 0 and current.value
            and lib.cuCtxGetDevice(ctypes.byref(current_device)) == 0 and current_device.value == device_index):
        return
    device, context = ctypes.c_int(), ctypes.c_void_p()
    for result in (lib.cuDeviceGet(ctypes.byref(device), device_index),
                   lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), lib.cuCtxSetCurrent(context)):
        if result != 0:
            raise RuntimeError(f"CUDA driver error {result} making GPU {device_index}'s context current")
