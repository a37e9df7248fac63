"""Where a cell can run, and where it runs: the one owner of that question, asked by the sweep's config validation and
grid (which cells exist), its dispatcher (which worker pool takes a cell), the worker (on which device) and the
integrations (whether a backend runs on this GPU).

A cell runs ``backend`` on ``hardware`` (a GPU type, or ``cpu``), measured by a measurer (``wavealign.measurers``).
The facts come from their owners: a backend declares the GPUs it runs on, whether it needs one and whether it takes
sparse masks (``wavealign.kernels``); a measurer whether it models a GPU from a CPU worker (``simulated``).
"""

from __future__ import annotations

import math

import torch

from wavealign import kernels, measurers
from wavealign.blockmask import check_fits
from wavealign.records import CPU, Cell

# The pool of CPU workers that run the cells a measurer models from a CPU (simulated): their figures do not depend on
# the worker's load, so there are as many as the CPUs allow. Cells timed on a CPU (hardware ``cpu``) have the pool
# ``cpu`` and its one worker (``POOL_WORKERS``): two timing at once on one machine would each time the other's load.
SIMULATOR = "simulator"
CPU_POOLS = (CPU, SIMULATOR)
POOL_WORKERS = {CPU: 1}  # the most workers a pool gets (a GPU type: one per GPU; the simulator: one per free CPU)
# ... and it starts timing once the simulator's cells are all done, so that no CPU-bound cell runs beside it
WAITS_FOR = {CPU: (SIMULATOR,)}


def hardware_refused(hardware: str, backend: str, measure: str) -> str | None:
    """Why ``backend`` measured by ``measure`` cannot run on (or be modelled for) ``hardware``, or None if it can."""
    kernel, measurer = kernels.get(backend), measurers.get(measure)
    if measurer.models_gpu:
        if hardware == CPU:
            return f"measure {measure} models a GPU type; hardware cpu has none"
        if kernel.execution is None:
            return f"backend {backend} declares no execution facts for measure {measure} to model"
    elif hardware == CPU:
        return f"backend {backend} needs a GPU; hardware cpu" if kernel.needs_gpu else None
    if not kernel.supports(hardware):
        return f"backend {backend} does not run on {hardware} (supports {list(kernel.supported_hardware)})"
    return None


def refused_everywhere(backend: str, hardware: list[str], measures: list[str]) -> str | None:
    """Why ``backend`` runs on none of ``hardware`` with any of ``measures`` (each reason once, in order), or None
    where it runs somewhere (the combinations that cannot are filtered when a grid expands)."""
    reasons = [hardware_refused(hw, backend, measure) for measure in measures for hw in hardware]
    return None if None in reasons else "; ".join(dict.fromkeys(reasons))  # type: ignore[arg-type]


def method_refused(backend: str, method: str) -> str | None:
    """Why ``backend`` cannot compute the masks of mask method ``method`` (a dense-only backend and a sparse method),
    or None if it can."""
    if kernels.get(backend).takes(method):
        return None
    return f"backend {backend} computes dense attention only; method {method} is sparse"


def why_not(hardware: str, backend: str, measure: str, method: str | None = None) -> str | None:
    """``hardware_refused``, then (given a method) ``method_refused``: why no such cell can run, or None."""
    return hardware_refused(hardware, backend, measure) or (None if method is None else method_refused(backend, method))


def pool(cell: Cell) -> str:
    """The worker pool a cell runs in: ``simulator`` for a measurer that models the cell's GPU from a CPU worker;
    ``cpu`` for a cell timed on a CPU; else its GPU type."""
    if measurers.get(cell.measurer.measure).models_gpu:
        return SIMULATOR
    return CPU if cell.hardware == CPU else cell.hardware


def device(cell: Cell) -> torch.device:
    """The torch device a cell runs on in this process: the worker's GPU; or its CPU, for a cell of the ``cpu`` pool
    and for a backend that needs no GPU on a worker without CUDA. A modelled (simulated) cell builds its mask on a GPU
    when this process sees one (a sweep's CPU workers see none: Ray hides the GPUs from them), else on the CPU. A GPU
    backend on a worker without CUDA is an error."""
    if pool(cell) in CPU_POOLS:
        models_gpu = measurers.get(cell.measurer.measure).models_gpu
        return torch.device("cuda" if models_gpu and torch.cuda.is_available() else "cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    if not kernels.get(cell.attention.backend).needs_gpu:
        return torch.device("cpu")
    raise RuntimeError(f"cell {cell.cell_id} runs backend {cell.attention.backend!r} on hardware {cell.hardware!r}, "
                       "but this worker has no CUDA GPU")


def check_cell_fits(what: str, heads: int, tokens: int, head_dim: int, block_size: int) -> None:
    """A cell of ``heads`` x ``tokens`` x ``head_dim`` with ``block_size``-token blocks fits in this machine's memory,
    where a sweep on its embedded Ray runs it: at least its Q, K and V (2 bytes a number, as on a GPU) and its bool
    block mask; else a ValueError naming ``what`` (``blockmask.check_fits``). A workload of 1e8 heads or a block size
    of 1 (a 530 GB mask at 364K tokens) is refused before it runs, not by a worker's out-of-memory kill."""
    blocks = math.ceil(tokens / block_size)
    check_fits(f"{what} ({heads} heads x {tokens:,} tokens x {head_dim}, block_size {block_size})",
               3 * 2 * heads * tokens * head_dim + heads * blocks * blocks)
