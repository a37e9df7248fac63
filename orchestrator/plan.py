"""What a sweep would do: its id, the grid, which cells are done and which run now, on which worker pool, and
the dry run's description with a time estimate: from earlier results, else from a roofline of the GPU. A sweep of
more than ``max_cells`` cells is counted from its axes, never enumerated: it is refused, and its dry run gives only
the count."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from orchestrator import dataset
from orchestrator.config import ConfigError
from orchestrator.grid import Grid, count_cells, expand, stable_hash
from wavealign import fingerprint, hardware, kernels, measurers, metrics
from wavealign.blockmask import check_fits
from wavealign.placement import CPU_POOLS, pool
from wavealign.records import Cell

# keys that change what is measured; the rest (where, how, resume...) do not change a sweep's identity
_IDENTITY_KEYS = ("name", "grid", "extra_grids", "variants")
# the memory one cell takes while its sweep is planned (its Cell, ids, the plan's lists): 1.9 KB measured with
# tracemalloc on a 20,000-cell grid of a bare shape (2026-12-03); twice that as the bound, for a preset's fields
CELL_BYTES = 4096


def sweep_id(cfg: DictConfig) -> str:
    """Stable id of a sweep: its grids and variants and the code's fingerprint, not how or where it runs."""
    config = OmegaConf.to_container(cfg, resolve=True)
    return stable_hash({"config": {k: config[k] for k in _IDENTITY_KEYS},
                        "code_version": fingerprint.code_version()})


@dataclass
class SweepPlan:
    """What a sweep would do: the grid, which cells are already done, which run now."""

    sweep_id: str
    grid: Grid
    done_before: int
    pending: list[Cell]

    def pending_by_placement(self) -> Counter:
        return Counter(pool(c) for c in self.pending)


def check_size(cfg: DictConfig) -> int:
    """The sweep's cell count, from its axes; more than ``max_cells`` is a ``ConfigError`` (enumerating millions
    of cells takes minutes and gigabytes before the first one runs); so is one whose cells this machine cannot
    hold while it plans them (``CELL_BYTES`` each), whatever ``max_cells`` allows."""
    count = count_cells(cfg)
    if count > cfg.max_cells:
        raise ConfigError(f"the sweep has {count} cells (its grids' axes multiplied), more than max_cells="
                          f"{cfg.max_cells}; expected at most max_cells: shrink the grid, or run it with "
                          f"max_cells={count}")
    try:
        check_fits(f"the sweep's {count:,} cells (max_cells={cfg.max_cells})", count * CELL_BYTES)
    except ValueError as exc:
        raise ConfigError(f"{exc}; expected a grid this machine can plan: shrink it or split it into sweeps") from None
    return count


def make_plan(cfg: DictConfig) -> SweepPlan:
    """The grid, and the cells to run now: not done yet (unless ``force``), and among ``only_cells`` if given.
    A sweep larger than ``max_cells`` is refused (``check_size``) before any cell is made."""
    check_size(cfg)
    grid = expand(cfg)
    selected = grid.cells
    if cfg.only_cells:
        ids = {c.cell_id for c in grid.cells}
        unknown = sorted(set(cfg.only_cells) - ids)
        if unknown:
            raise ConfigError(f"only_cells has ids {unknown} that are not cells of this grid (a cell id hashes the "
                              "code's fingerprint too: a row recorded by other code has other ids)")
        selected = [c for c in grid.cells if c.cell_id in set(cfg.only_cells)]
    done = set() if cfg.force or not cfg.resume else dataset.done_cell_ids(cfg.run_root)
    pending = [c for c in selected if c.cell_id not in done]
    return SweepPlan(sweep_id=sweep_id(cfg), grid=grid, done_before=len(selected) - len(pending), pending=pending)


def dry_run(cfg: DictConfig, console: Console) -> None:
    """``--dry-run``: ``describe`` the plan; a sweep larger than ``max_cells`` is only counted, with a warning that
    a run would be refused."""
    count = count_cells(cfg)
    if count > cfg.max_cells:
        console.print(f"sweep {cfg.name} ({sweep_id(cfg)}): {count} cells, counted from the grids' axes")
        console.print(f"[yellow]warning: {count} cells is more than max_cells={cfg.max_cells}: not enumerated (no "
                      f"cells per GPU type, filtered combinations or estimate), and a run would be refused. Shrink "
                      f"the grid, or set max_cells={count} to run it.[/yellow]")
        return
    describe(make_plan(cfg), cfg, console)


def describe(plan: SweepPlan, cfg: DictConfig, console: Console) -> None:
    """The dry run: grid size, cells per GPU type, filtered combinations, and a time estimate per worker type:
    from earlier results where cells like these ran before, else from a roofline of the GPU (``model_seconds``)."""
    console.print(f"sweep {cfg.name} ({plan.sweep_id}): {len(plan.grid.cells)} cells, "
                  f"{plan.done_before} already done, {len(plan.pending)} to run")
    per_type = plan.grid.by_hardware()
    pending = Counter(c.hardware for c in plan.pending)
    simulated = Counter(c.hardware for c in plan.grid.cells if measurers.get(c.measurer.measure).models_gpu)
    for hw in sorted(per_type):
        note = f", {simulated[hw]} simulated on CPU workers" if simulated[hw] else ""
        console.print(f"  {hw:<6} {per_type[hw]:>6} cells  ({pending[hw]} to run{note})")
    if plan.grid.filtered:
        console.print(f"filtered combinations: {sum(plan.grid.filtered.values())}")
        for reason, count in plan.grid.filtered.most_common():
            console.print(f"  {count:>6}  {reason}")
    estimates = estimate_seconds(plan.pending, cfg.run_root)
    if estimates:
        console.print("time estimate, in worker-minutes (divide by the workers of that type):")
    for key, est in sorted(estimates.items()):
        if est.history_cells:
            console.print(f"  estimate {key} workers: {est.history_s / 60:.1f} worker-minutes for "
                          f"{est.history_cells} cells from earlier results (the median wall time of done cells "
                          f"of the same hardware, backend, measurer and method)")
        if est.model_cells:
            dense = (f"; {est.assumed_dense_cells} assumed dense, an upper bound: their method sets no density"
                     if est.assumed_dense_cells else "")
            console.print(f"  estimate {key} workers: {est.model_s / 60:.1f} worker-minutes for {est.model_cells} "
                          f"cells from the roofline model (none like them done before{dense})")
        if est.unestimated_cells:
            console.print(f"  estimate {key} workers: {est.unestimated_cells} cells not estimated: no earlier "
                          f"results, and no time model for CPU or simulated cells")
    if any(est.model_cells for est in estimates.values()):
        console.print(f"roofline model: attention FLOPs 4·N²·D·H·density at the GPU's peak bf16 x the backend's MMA "
                      f"efficiency, or Q/K/V/O bytes at its HBM bandwidth if slower; x max(warmup, 1) + reps runs, "
                      f"+ {CELL_OVERHEAD_S:g} s per cell")


@dataclass
class PlacementEstimate:
    """Worker-seconds of one placement's pending cells, by where each cell's figure comes from."""

    history_s: float = 0.0  # cells like ones done before: the median wall time of those
    history_cells: int = 0
    model_s: float = 0.0  # GPU cells without history: ``model_seconds``
    model_cells: int = 0
    assumed_dense_cells: int = 0  # model cells whose method sets no density, estimated dense (an upper bound)
    unestimated_cells: int = 0  # CPU and simulated cells without history


# Per cell, around its timed runs: launch plan, reorder plan, recording and its share of the group's mask build,
# 0.05-3.6 s per cell on the H200 (benchmarks/results/table1-fa4-h200, skip-profile-h200-methods: mask_ms)
CELL_OVERHEAD_S = 1.0


def cell_density(cell: Cell) -> float | None:
    """The fraction of blocks a cell's mask keeps, where its config fixes it (``density`` of the controls, 1 for
    ``dense``); None for methods whose density depends on the data."""
    if cell.inputs.method == "dense":
        return 1.0
    density = cell.inputs.method_params.get("density")
    return float(density) if isinstance(density, int | float) else None


def model_seconds(cell: Cell, density: float = 1.0) -> float | None:
    """A GPU cell's wall time on a worker from its GPU's description: the roofline of one launch (attention FLOPs,
    ``metrics.attention_flops``, at ``peak_bf16_flops`` x the backend's MMA efficiency, against Q/K/V/O read or
    written once at ``hbm_bytes_per_s``), run as many times as its measurer runs it (its ``runs`` hook), plus
    ``CELL_OVERHEAD_S``. None for CPU and simulated cells and backends without execution facts."""
    execution = kernels.get(cell.attention.backend).execution
    if pool(cell) in CPU_POOLS or execution is None:
        return None
    gpu, spec = hardware.get(cell.hardware), cell.inputs
    n, d, h = spec.seq_len_tokens, spec.head_dim, spec.num_heads
    compute_s = metrics.attention_flops(n, n, d, h, density) / (gpu.peak_bf16_flops * execution.mma_efficiency)
    memory_s = 4.0 * n * d * h * execution.element_bytes / gpu.hbm_bytes_per_s
    return max(compute_s, memory_s) * measurers.get(cell.measurer.measure).runs(cell.measurer) + CELL_OVERHEAD_S


def estimate_seconds(cells: list[Cell], run_root: str | Path) -> dict[str, PlacementEstimate]:
    """Per placement, the worker-seconds of ``cells``: the median wall time of earlier done cells of the same
    (hardware, backend, measurer, method) where there are some, else ``model_seconds`` for GPU cells; CPU and simulated
    cells without history are counted as not estimated."""
    table = dataset.read(run_root, columns=["hardware", "backend", "measure", "method", "cell_wall_s", "status"])
    history: dict[tuple, list[float]] = {}
    for r in table.to_pylist():
        if r["status"] == "done" and r["cell_wall_s"] is not None and not math.isnan(r["cell_wall_s"]):
            history.setdefault((r["hardware"], r["backend"], r["measure"], r["method"]), []).append(r["cell_wall_s"])
    out: dict[str, PlacementEstimate] = {}
    for cell in cells:
        est = out.setdefault(pool(cell), PlacementEstimate())
        times = history.get((cell.hardware, cell.attention.backend, cell.measurer.measure, cell.inputs.method))
        density = cell_density(cell)
        modelled = None if times else model_seconds(cell, 1.0 if density is None else density)
        if times:
            est.history_s += statistics.median(times)
            est.history_cells += 1
        elif modelled is not None:
            est.model_s += modelled
            est.model_cells += 1
            est.assumed_dense_cells += density is None
        else:
            est.unestimated_cells += 1
    return out
