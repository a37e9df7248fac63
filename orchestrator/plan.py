"""What a sweep would do: its id, the grid, which cells are done and which run now, on which worker pool, and
the dry run's description with a time estimate from earlier results. A sweep of more than ``max_cells`` cells
is counted from its axes, never enumerated: it is refused, and its dry run gives only the count."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from orchestrator import dataset
from orchestrator.config import ConfigError
from orchestrator.grid import Grid, count_cells, expand, stable_hash
from wavealign import fingerprint, kernels
from wavealign.pipeline import placement
from wavealign.records import Cell

# keys that change what is measured; the rest (where, how, resume...) do not change a sweep's identity
_IDENTITY_KEYS = ("name", "grid", "extra_grids", "variants")


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
        return Counter(placement(c) for c in self.pending)


def check_size(cfg: DictConfig) -> int:
    """The sweep's cell count, from its axes; more than ``max_cells`` is a ``ConfigError`` (enumerating millions
    of cells takes minutes and gigabytes before the first one runs)."""
    count = count_cells(cfg)
    if count > cfg.max_cells:
        raise ConfigError(f"the sweep has {count} cells (its grids' axes multiplied), more than max_cells="
                          f"{cfg.max_cells}; expected at most max_cells: shrink the grid, or run it with "
                          f"max_cells={count}")
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
    """The dry run: grid size, cells per GPU type, filtered combinations, a time estimate from earlier results."""
    console.print(f"sweep {cfg.name} ({plan.sweep_id}): {len(plan.grid.cells)} cells, "
                  f"{plan.done_before} already done, {len(plan.pending)} to run")
    per_type = plan.grid.by_hardware()
    pending = Counter(c.hardware for c in plan.pending)
    simulated = Counter(c.hardware for c in plan.grid.cells if kernels.get(c.backend).simulated)
    for hw in sorted(per_type):
        note = f", {simulated[hw]} simulated on CPU workers" if simulated[hw] else ""
        console.print(f"  {hw:<6} {per_type[hw]:>6} cells  ({pending[hw]} to run{note})")
    if plan.grid.filtered:
        console.print(f"filtered combinations: {sum(plan.grid.filtered.values())}")
        for reason, count in plan.grid.filtered.most_common():
            console.print(f"  {count:>6}  {reason}")
    for key, (seconds, known, unknown) in sorted(estimate_seconds(plan.pending, cfg.run_root).items()):
        if known:
            console.print(f"  estimate {key} workers: {seconds / 60:.1f} worker-minutes for {known} cells like "
                          f"earlier ones (divide by the workers of that type)")
        if unknown:
            console.print(f"  estimate {key} workers: no earlier results for {unknown} cells")


def estimate_seconds(cells: list[Cell], run_root: str | Path) -> dict[str, tuple[float, int, int]]:
    """Per placement: (worker-seconds, cells estimated, cells without history), from the median wall time
    of earlier done cells of the same (hardware, backend, method)."""
    table = dataset.read(run_root, columns=["hardware", "backend", "method", "cell_wall_s", "mask_ms", "status"])
    history: dict[tuple, list[float]] = {}
    for r in table.to_pylist():
        if r["status"] == "done" and r["cell_wall_s"] is not None:
            history.setdefault((r["hardware"], r["backend"], r["method"]), []).append(r["cell_wall_s"])
    out: dict[str, tuple[float, int, int]] = {}
    for cell in cells:
        seconds, known, unknown = out.get(placement(cell), (0.0, 0, 0))
        times = history.get((cell.hardware, cell.backend, cell.method))
        out[placement(cell)] = ((seconds + statistics.median(times), known + 1, unknown) if times
                                else (seconds, known, unknown + 1))
    return out

