"""The records of a measurement: a ``Cell`` (what to run, fully resolved), its ``CellResult`` (every figure,
units in the field names) and the ``Environment`` that produced it.

These dataclasses are the one definition of a row: the Parquet schema and the MLflow params, metrics and
tags are generated from their fields (``orchestrator.dataset``, ``orchestrator.tracking``),
so a new field is one line here.
"""

from __future__ import annotations

import functools
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

CPU = "cpu"  # the placement of cells that run on a worker's CPU instead of a GPU of a given type
ORIGINAL_VARIANT = "original"  # the variant every speedup of a group refers to
DEFAULT_REORDERER = "wavealign"  # WaveAlign's own Stage 1: the spatial step a variant uses unless told otherwise
NO_REORDERER = "identity"  # what a variant without a spatial stage records: its order never depends on one
# the launch-order stages a variant runs (wavealign.launch_order, wavealign.variants)
STAGES = ("none", "spatial", "temporal", "both")
SPATIAL_STAGES = ("spatial", "both")  # the stage sets that run a reorderer (Stage 1, or a baseline's)
TEMPORAL_STAGES = ("temporal", "both")  # the stage sets that run Stage 2
# torch.Generator.manual_seed's range, non-negative (an int64 column): the seeds of Stage 1's start block and masks
MAX_SEED = 2**63 - 1
# a wave beyond int32 is no GPU's, and Stage 2's sort key holds the bucket index above bit 31
MAX_WAVE_SIZE = 2**31 - 1


def order_name(variant: str, reorderer: str | None) -> str:
    """How tables name a row's launch order: its variant, plus the reorderer when that is not WaveAlign's own
    Stage 1 (``wavealign[minhash]``: MinHash grouping then Stage 2; ``spatial[minhash]``: MinHash grouping alone)."""
    if reorderer in (None, DEFAULT_REORDERER, NO_REORDERER) or reorderer != reorderer:  # None, NaN: before the field
        return variant
    return f"{variant}[{reorderer}]"


@dataclass(frozen=True)
class InputSpec:
    """What a cell's inputs are built from: its workload's shape and origin, and the mask method with its params.
    Cells with equal specs (and block size) get the same mask and Q/K/V (``wavealign.inputs``)."""

    workload: str
    method: str
    seq_len_tokens: int
    num_heads: int
    head_dim: int
    seed: int = 0
    seq_k: float | None = None  # the requested length in thousands of tokens (seq_len_tokens: the nearest valid)
    model: str | None = None  # a wavealign.workloads preset; None = a bare (seq_len, heads) shape
    captured: str | None = None  # a wavealign-qkv/1 file whose Q/K/V the cell runs on (heads: which of its heads)
    resolution: str | None = None
    frames: int | None = None
    heads: list[int] = field(default_factory=list)  # preset head indices
    layer: int = 0
    step: int = 0  # the generator's denoising step (attention sharpens as the video forms)
    # the synthetic generator that draws a model preset's Q/K/V (wavealign.workloads.GENERATORS); None for a captured
    # file or a bare shape
    generator: str | None = None
    method_params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LaunchGeometry:
    """The blocks and waves a launch is planned in: the GPU described (``profile_hardware``: the cell's hardware, or
    the GPU a CPU cell stands in for), the mask's block size, and the rows that run together (a wave)."""

    profile_hardware: str | None
    block_size: int
    wave_size: int


@dataclass(frozen=True)
class AttentionSpec:
    """The attention step a cell runs (``wavealign.attention.AttentionStep``): its variant (``wavealign.variants``,
    as ``Variant.columns`` records it: its name, ``stages`` and ``skip``), the spatial step's reorderer, the backend
    and the launch geometry."""

    variant: str
    stages: str  # launch_order.STAGES; "spatial" and "both" run ``reorderer``, "temporal" and "both" Stage 2
    skip: str  # variants.SKIP_MODES: "force" applies ``stages``; "policy" lets the skip policy fall back to "none"
    backend: str  # the kernel that runs (or whose launch is simulated)
    geometry: LaunchGeometry
    # the spatial step (wavealign.reorderers) and its params; NO_REORDERER when ``stages`` has none
    reorderer: str = DEFAULT_REORDERER
    reorderer_params: dict[str, Any] = field(default_factory=dict)
    backend_params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MeasurerSpec:
    """How a cell's launch is measured: the measurer (``wavealign.measurers``: timed, simulated, ncu), its params,
    and the repetitions after the warm-up calls."""

    measure: str = "timed"
    measure_params: dict[str, Any] = field(default_factory=dict)
    reps: int = 5
    warmup: int = 1


@dataclass(frozen=True)
class Cell:
    """One point of a sweep grid, resolved once at grid expansion into the parts the library takes: ``inputs``
    (``wavealign.inputs``), ``attention`` (``wavealign.attention.AttentionStep``), ``measurer``
    (``wavealign.measurers``) and where it runs (``hardware``, ``wavealign.placement``). The sweep's grid makes them
    (``orchestrator.grid``); a dataset row or ``cell_json`` is a cell's flat view (``flat``, ``from_flat``), one
    column per leaf field, read back by the jobs that re-run recorded cells."""

    cell_id: str
    group_id: str  # cells sharing workload, mask, hardware and backend: timed back to back
    hardware: str  # GPU type the cell runs on (or is simulated for); "cpu" = any worker's CPU
    inputs: InputSpec
    attention: AttentionSpec
    measurer: MeasurerSpec

    @classmethod
    def column_hints(cls) -> dict[str, Any]:
        """The type hint of each column of a cell's flat view (``flat``), in order: the dataset's cell columns."""
        return dict(_leaf_hints(cls))

    @classmethod
    def columns(cls) -> tuple[str, ...]:
        """The names of a cell's flat view (``flat``): the dataset's cell columns and the keys of ``cell_json``."""
        return tuple(cls.column_hints())

    def flat(self) -> dict[str, Any]:
        """The cell as one flat mapping, a key per column: what the dataset records and ids hash."""
        return _leaves(self)

    def replaced(self, **columns: Any) -> Cell:
        """This cell with some columns of its flat view changed (``dataclasses.replace`` over ``flat``)."""
        if unknown := sorted(set(columns) - set(self.columns())):
            raise ValueError(f"columns {unknown} are not a cell's; expected among {list(self.columns())}")
        return Cell.from_flat({**self.flat(), **columns})

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> Cell:
        """The cell a flat mapping (a dataset row, ``cell_json``) describes; keys that are not columns are ignored,
        and a leaf with a default may be missing."""
        return _from_leaves(cls, values)


@functools.cache
def _hints(record: type) -> dict[str, Any]:
    """A record's fields' type hints, resolved once: grid expansion makes a cell from its flat view per cell."""
    return typing.get_type_hints(record)


@functools.cache
def _leaf_hints(record: type) -> dict[str, Any]:
    """Each leaf field of a record of nested frozen records, by name, with its type hint."""
    hints = _hints(record)
    out: dict[str, Any] = {}
    for f in fields(record):
        out.update(_leaf_hints(hints[f.name]) if is_dataclass(hints[f.name]) else {f.name: hints[f.name]})
    return out


def _leaves(record: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(record):
        value = getattr(record, f.name)
        out.update(_leaves(value) if is_dataclass(value) else {f.name: value})
    return out


def _from_leaves(record: type, values: Mapping[str, Any]) -> Any:
    hints = _hints(record)
    kwargs: dict[str, Any] = {}
    for f in fields(record):
        hint = hints[f.name]
        if is_dataclass(hint):
            kwargs[f.name] = _from_leaves(hint, values)
        elif f.name in values:
            kwargs[f.name] = values[f.name]
    return record(**kwargs)


@dataclass
class Environment:
    """What ran a cell: GPU, driver, CUDA, torch, triton, host, Python and the code's git sha."""

    gpu_name: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    torch_version: str | None = None
    triton_version: str | None = None
    python_version: str | None = None
    host: str | None = None
    git_sha: str | None = None
    wavealign_version: str | None = None


@dataclass
class CellResult:
    """Every figure of one cell. Times in ms, sizes in bytes, ratios in percent where named ``_pct``."""

    cell_id: str
    group_id: str
    status: str  # "done" or "failed"
    error: str | None = None
    traceback: str | None = None
    simulated: bool = False  # its figures are a prediction (measure simulated), not a measurement
    device: str | None = None  # where the cell ran: "cpu" or a CUDA device name
    timer: str | None = None  # "cuda_events", "wall_clock" (CPU cells: perf_counter) or "simulated"
    reps_done: int = 0
    kernel_ms_median: float = math.nan  # launch.run: the kernel, plus Q gather / O scatter where the backend needs them
    kernel_ms_iqr: float = math.nan
    # the first call's wall time (compile/JIT + one run), kept apart; it is the first of the ``warmup`` calls
    first_call_ms: float = math.nan
    reorder_ms: float = math.nan  # launch_order.plan cost (0 when no reorder was applied); see reorder_cost
    # "measured" (timed where the kernel runs), or how a simulated cell's cost on its GPU was predicted
    reorder_cost: str | None = None
    # simulated cells: launch_order.plan timed on the host CPU, never added to a kernel
    host_reorder_ms: float = math.nan
    launch_plan_ms: float = math.nan  # backend.plan: the mask in the kernel's format, rows in launch order
    total_ms: float = math.nan  # reorder + kernel
    # every timed repetition's kernel ms, in the order taken; in a paired group (``paired``) rep i of every cell was
    # taken in the same round, one launch after the other
    kernel_ms_reps: list[float] = field(default_factory=list)
    paired: bool = False  # timed alternately with its group's other cells, rep by rep (metrics.paired_ratio)
    reps_throttled: int = 0  # rounds dropped because the GPU throttled while they ran (wavealign.gpu_state)
    # the speedups over the group's original variant and their intervals at metrics.LEVEL (metrics.paired_ratio of
    # the reps; NaN where no interval applies: a simulated cell, or one rep) and verdicts (metrics.verdict, with
    # ``verdict_tolerance``); the original variant's own row is 1 with no verdict
    speedup_vs_original: float = math.nan  # the original's kernel time / this one's
    speedup_ci_low: float = math.nan
    speedup_ci_high: float = math.nan
    net_speedup_vs_original: float = math.nan  # the original's kernel time / this one's total (reorder counted)
    net_speedup_ci_low: float = math.nan
    net_speedup_ci_high: float = math.nan
    speedup_outliers: int = 0  # reps' ratios outside Tukey's fences, left out of the speedup (metrics)
    verdict: str | None = None  # faster / slower / same / ambiguous, on speedup_vs_original
    net_verdict: str | None = None  # the same on net_speedup_vs_original
    verdict_tolerance: float = math.nan
    stages_applied: str | None = None
    reorder_applied: bool | None = None
    # the launch order applied, by name (launch_order.candidates: "original", "wavealign", "balanced", ...; a
    # reorderer that is no candidate as "stages[reorderer]"); for variant auto, the chooser's pick
    order_candidate: str | None = None
    chooser_ms: float = math.nan  # what choosing the order cost on the host (auto cells; beside reorder_ms, its plan)
    # in a group with an auto cell: the chooser's predicted kernel time of this row's order, and its rank (1 fastest)
    # among the candidates by predicted net time; every row: its rank among the group's rows by measured net time
    predicted_kernel_ms: float = math.nan
    predicted_rank: int | None = None
    measured_rank: int | None = None
    # the kernel time no exact order passes (sim.order_limit, in the time model) and the share of the headroom to it
    # this row's order took (metrics.headroom_captured), in a group with an auto cell
    order_limit_ms: float = math.nan
    headroom_captured: float = math.nan
    # a kernel whose query unit spans several mask blocks (FA4 on SM100): its units' work over its blocks' own
    # (launch_order.pairing.or_inflation), for the pairing the cell's order used
    or_inflation: float = math.nan
    # mask statistics and skip features (wavealign.skip.SkipFeatures), original order
    num_q_blocks: int | None = None
    num_kv_blocks: int | None = None
    density: float = math.nan
    nnz_mean: float = math.nan
    nnz_cv: float = math.nan
    adjacent_jaccard: float = math.nan
    wave_working_set_bytes: float = math.nan
    working_set_over_l2: float = math.nan
    reordered_wave_working_set_bytes: float = math.nan  # the same figure in the applied launch order
    skip_reorder: bool | None = None
    skip_reason: str | None = None
    skip_predicted_gain_ms: float = math.nan
    # simulator figures (measure simulated)
    l2_hit_pct: float = math.nan
    hbm_read_bytes: float = math.nan
    # Nsight Compute, when the cell asks (measure ncu): time, hit rate and throughputs of the backend's attention
    # kernels (every launch matching its ``ncu_kernels``, ratios duration-weighted); DRAM bytes summed over every
    # kernel of the call (gather/scatter too)
    ncu_l2_hit_pct: float = math.nan
    ncu_dram_read_bytes: float = math.nan
    ncu_dram_write_bytes: float = math.nan
    ncu_dram_throughput_pct: float = math.nan
    ncu_sm_throughput_pct: float = math.nan
    ncu_kernel_ms: float = math.nan
    ncu_kernels: int | None = None
    ncu_ctas_per_sm: int | None = None
    ncu_registers_per_thread: int | None = None
    ncu_unavailable: str | None = None  # why there are no counters, when asked for and none were read
    mask_ms: float = math.nan  # building workload + mask, shared by the group (in the background if prefetched)
    # whether the group's mask and Q/K/V were built ahead by a prefetch (ray.prefetch_inputs) while the worker's
    # previous group ran; also for the groups after it that reuse them
    inputs_prefetched: bool = False
    cell_wall_s: float = math.nan  # the cell's own work on the worker
    # the GPU's state before the cell's first timed rep and after its last (NVML: wavealign.gpu_state); NaN/None on
    # a CPU. Clocks are never changed here; ``gpu_clocks_locked`` records a user's locked (application) clocks
    gpu_sm_clock_mhz_before: float = math.nan
    gpu_sm_clock_mhz_after: float = math.nan
    gpu_mem_clock_mhz_before: float = math.nan
    gpu_mem_clock_mhz_after: float = math.nan
    gpu_power_w_before: float = math.nan
    gpu_power_w_after: float = math.nan
    gpu_temperature_c_before: float = math.nan
    gpu_temperature_c_after: float = math.nan
    gpu_throttle_before: str | None = None  # the active throttle reasons, comma-separated ("" when none)
    gpu_throttle_after: str | None = None
    gpu_clocks_locked: bool | None = None
    environment: Environment = field(default_factory=Environment)
