"""Compare the L2/HBM simulator with Nsight Compute measurements: L2 hit MAE, DRAM ratio, rankings.

    python lab/validate_sim.py RESULTS --out DIR [--hardware h200] [--l2-partitions 1|2] [--row-jitter X]

``RESULTS`` is a sweep's ``run_root`` (its Parquet rows with Nsight Compute counters, ``grid.measure=[ncu]``) or a
table of one row per measured launch (CSV, JSON list or JSON lines) with the columns ``backend, stages,
mask_kind, seq_len, heads, block_size, head_dim, density, seed, l2_hit_pct, dram_read_bytes, kernel_ms`` and
optionally ``mask_file`` (a ``wavealign.masks.npz`` .npz, for method masks), ``mask_density`` (the density asked
of the generator), ``nnz_spread``, ``prototypes``, ``noise``, ``wave_size`` and ``plan_seed``.

Each measured cell becomes the same cell measured ``simulated`` (the measured backend's launch predicted), run
through ``wavealign.pipeline.run_group``: the sweep's own mask, reorder and simulator path. Writes
``validation.csv`` and ``validation.md`` to DIR.

Goals (issue 6): L2 hit MAE <= 5 points; DRAM bytes within +-15%; the variants' ranking preserved in every
group (a group is one mask and backend, its rows the stages).
"""

from __future__ import annotations

import csv
import datetime
import inspect
import itertools
import json
import math
import platform
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import argument_parser, run_study, write_csv

from jobs.arguments import output_folder
from wavealign import hardware
from wavealign.records import Cell

REQUIRED = ("backend", "stages", "mask_kind", "seq_len", "heads", "block_size", "head_dim", "density", "seed",
            "l2_hit_pct", "dram_read_bytes", "kernel_ms")
L2_MAE_GOAL_PTS = 5.0
DRAM_RATIO_GOAL = 0.15
# generator arguments a legacy row may carry, by mask kind (the method's own params)
_GENERATOR_COLUMNS = {"random": (), "random-fixed-nnz": ("nnz_spread",), "planted": ("prototypes", "noise")}


@dataclass(frozen=True)
class Measured:
    """What Nsight Compute measured of one launch, and the cell that launch ran."""

    cell: Cell
    label: str  # how the tables name its mask (mask kind or method)
    l2_hit_pct: float
    dram_read_bytes: float
    kernel_ms: float


@dataclass(frozen=True)
class ValidationRow:
    """A measured cell beside its prediction."""

    backend: str
    mask_kind: str
    seq_len: int
    heads: int
    density: float
    seed: int
    stages: str
    l2_hit_pct_measured: float
    l2_hit_pct_predicted: float
    l2_hit_abs_err_pts: float
    dram_read_bytes_measured: float
    dram_read_bytes_predicted: float
    dram_ratio: float  # predicted / measured
    kernel_ms_measured: float
    kernel_ms_predicted: float


def _table_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a CSV, JSON or JSON-lines table, read through ``wavealign.bounded`` (a crafted file's size or
    nesting is refused before it is parsed)."""
    from wavealign import bounded

    text = bounded.read_text(path, "measurements")
    if path.suffix == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
    elif text.lstrip().startswith("["):
        rows = bounded.load_json(text, f"measurements {path}")
    else:
        rows = [bounded.load_json(line, f"measurements {path} line {i + 1}")
                for i, line in enumerate(text.splitlines()) if line.strip()]
    if not rows:
        raise ValueError(f"measurements {path} hold no rows")
    return rows


def _number(row: dict[str, Any], key: str, kind: type = float) -> Any:
    """The row's ``key`` as a ``kind`` (None where empty); a ``ValueError`` naming the column where it is no number."""
    value = row.get(key)
    if value in (None, ""):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"column {key}={value!r}: expected a number") from None
    return kind(number)


# a table row's launch shape, checked before any simulation: (lowest, highest) of each size (the sweep's own bounds:
# 2^22 tokens, ~11x the paper's 364K)
SHAPE_BOUNDS = {"seq_len": (1, 2 ** 22), "heads": (1, 1024), "block_size": (16, 1024), "head_dim": (1, 1024)}


def _shape(row: dict[str, Any], i: int, path: Path) -> dict[str, int]:
    """The row's launch shape (``SHAPE_BOUNDS``), each a whole number in its bounds, else a ``ValueError`` naming the
    row, the column and the value (a seq_len of -5 was a traceback from the mask's constructor)."""
    shape = {}
    for key, (lo, hi) in SHAPE_BOUNDS.items():
        value = _number(row, key)
        if value is None or not (lo <= value <= hi) or value != int(value):
            raise ValueError(f"measurements {path} row {i}: {key}={row.get(key)!r}; expected a whole number in "
                             f"[{lo}, {hi}]")
        shape[key] = int(value)
    return shape


def check_table(path: Path) -> None:
    """Every row of a legacy NCU table has the ``REQUIRED`` columns and a launch shape in bounds (``_shape``); a
    ``ValueError`` naming the first row that does not. Reads the table only: no torch."""
    for i, row in enumerate(_table_rows(path)):
        missing = [c for c in REQUIRED if row.get(c) in (None, "")]
        if missing:
            raise ValueError(f"measurements {path} row {i} lacks columns {missing}; expected {list(REQUIRED)}")
        _shape(row, i, path)


def from_table(path: Path, hw: str, mask_density: float | None = None) -> list[Measured]:
    """The measured cells of a legacy NCU table (see the module docstring), in its rows' order: each row's cell is
    built as a sweep builds it (``config.load`` and ``grid.expand``), one sweep per mask and launch, its variants
    the forced ones that run the rows' stages."""
    from wavealign import launch_order, masks, variants

    # legacy tables name the stages by the sweep's forced variants' names
    variant_stages = {name: v.stages for name, v in variants.VARIANTS.items() if v.skip == "force"}
    launches: dict[tuple, list[tuple[int, str, dict[str, Any]]]] = {}
    for i, row in enumerate(_table_rows(path)):
        missing = [c for c in REQUIRED if row.get(c) in (None, "")]
        if missing:
            raise ValueError(f"measurements {path} row {i} lacks columns {missing}; expected {list(REQUIRED)}")
        shape = _shape(row, i, path)
        stages = variant_stages.get(row["stages"], row["stages"])
        if stages not in launch_order.STAGES:
            raise ValueError(f"row {i}: stages must be one of {launch_order.STAGES} or {list(variant_stages)}, "
                             f"got {row['stages']!r}")
        kind = row["mask_kind"]
        if row.get("mask_file"):
            method, params = "file", {"path": row["mask_file"]}
        elif kind in _GENERATOR_COLUMNS:
            density = _number(row, "mask_density") or mask_density or _number(row, "density")
            # a table's masks came from the generator with its own defaults (bench-kernels), not the method's
            generator = inspect.signature(masks.get(kind).from_shape).parameters
            params = {k: p.default for k, p in generator.items()
                      if k in masks.get(kind).params and p.default is not inspect.Parameter.empty}
            params.update({k: _number(row, k) for k in _GENERATOR_COLUMNS[kind] if _number(row, k) is not None})
            params.update(density=density, seed=_number(row, "seed", int))
            method = kind
        else:
            raise ValueError(f"row {i}: mask_kind {kind!r} is none of {sorted(_GENERATOR_COLUMNS)}, so it needs a "
                             "mask_file column (a wavealign.masks.npz .npz)")
        launch = (row["backend"].split(":")[0],  # a bench-kernels label may carry call options after a colon
                  method, json.dumps(params, sort_keys=True), shape["seq_len"], shape["heads"], shape["head_dim"],
                  shape["block_size"], _number(row, "wave_size", int), _number(row, "plan_seed", int) or 0)
        launches.setdefault(launch, []).append((i, stages, row))
    measured: dict[int, Measured] = {}
    with tempfile.TemporaryDirectory(prefix="wavealign-validate-") as conf:
        for launch, rows in launches.items():
            cells = {c.attention.stages: c for c in _sweep_cells(Path(conf), hw, *launch, {s for _, s, _ in rows})}
            for i, stages, row in rows:
                measured[i] = Measured(cells[stages], row["mask_kind"], _number(row, "l2_hit_pct"),
                                       _number(row, "dram_read_bytes"), _number(row, "kernel_ms"))
    return [measured[i] for i in sorted(measured)]


def _sweep_cells(conf: Path, hw: str, backend: str, method: str, params: str, seq_len: int, heads: int,
                 head_dim: int, block_size: int, wave_size: int | None, seed: int, stages: set[str]) -> list[Cell]:
    """The cells of a one-launch sweep on ``hw``: the mask ``method`` with ``params`` (JSON) on a bare shape of
    ``heads`` x ``seq_len`` tokens x ``head_dim`` (a workload written under ``conf``), one forced variant per
    stage set."""
    from orchestrator import config, grid
    from wavealign import variants

    workload = f"table-{heads}h-{head_dim}"
    (conf / "workload").mkdir(exist_ok=True)
    (conf / "workload" / f"{workload}.yaml").write_text(
        f"name: {workload}\nnum_heads: {heads}\nhead_dim: {head_dim}\n")
    cfg = config.load([
        "~sweep", f"conf_dirs=[{conf}]", f"grid.hardware=[{hw}]", f"grid.backend=[{backend}]",
        f"grid.method=[{method}]", f"grid.workload=[{workload}]", f"grid.seq_k=[{seq_len / 1000!r}]",
        f"grid.block_size={block_size}", f"grid.variant=[{','.join(variants.forced(s) for s in sorted(stages))}]",
        f"grid.wave_size=[{'null' if wave_size is None else wave_size}]", f"grid.seed=[{seed}]",
        *(f"+grid.method_params.{method}.{key}={json.dumps(value)}" for key, value in json.loads(params).items())])
    return grid.expand(cfg).cells


def from_run_root(run_root: Path) -> list[Measured]:
    """The measured cells of a sweep: done GPU rows with Nsight Compute counters, newest per cell."""
    from analysis.load import load
    from wavealign import variants

    frame = load(run_root)
    measured = []
    for _, row in frame.iterrows():
        if row["status"] != "done" or row["simulated"] or math.isnan(row["ncu_l2_hit_pct"] or math.nan):
            continue
        # the recorded cell, its variant the forced one that runs the stages it applied (an adaptive cell's verdict)
        applied = row["stages_applied"]
        cell = Cell.from_flat(json.loads(row["cell_json"])).replaced(
            variant=variants.forced(applied), stages=applied, skip="force")
        measured.append(Measured(cell, cell.inputs.method, float(row["ncu_l2_hit_pct"]),
                                 float(row["ncu_dram_read_bytes"]), float(row["ncu_kernel_ms"])))
    if not measured:
        raise ValueError(f"{run_root} holds no done GPU cell with Nsight Compute counters (run a sweep with "
                         "grid.measure=[ncu])")
    return measured


def as_simulated(m: Measured, l2_partitions: int | None, row_jitter: float) -> Cell:
    """The measured cell, measured ``simulated``: the launch of the backend that ran it, predicted."""
    options = {"l2_partitions": l2_partitions, "row_jitter": row_jitter}
    return m.cell.replaced(measure="simulated", measure_params=options, reps=1, warmup=0)


def validate(measured: list[Measured], l2_partitions: int | None = None,
             row_jitter: float = 0.0) -> list[ValidationRow]:
    """Simulate every measured cell through the pipeline (one mask per group) and pair it with its measurement."""
    from wavealign import pipeline

    rows = []
    key = lambda m: m.cell.group_id  # noqa: E731
    for _, group in itertools.groupby(sorted(measured, key=key), key=key):
        group = list(group)
        cells = [as_simulated(m, l2_partitions, row_jitter) for m in group]
        for m, r in zip(group, pipeline.run_group(cells), strict=True):
            if r.status != "done":
                raise RuntimeError(f"simulating {m.cell.cell_id} failed: {r.error}\n{r.traceback}")
            dram = r.hbm_read_bytes
            spec = m.cell.inputs
            rows.append(ValidationRow(
                backend=m.cell.attention.backend, mask_kind=m.label, seq_len=spec.seq_len_tokens,
                heads=spec.num_heads, density=r.density, seed=int(spec.method_params.get("seed", spec.seed) or 0),
                stages=m.cell.attention.stages, l2_hit_pct_measured=m.l2_hit_pct, l2_hit_pct_predicted=r.l2_hit_pct,
                l2_hit_abs_err_pts=abs(r.l2_hit_pct - m.l2_hit_pct), dram_read_bytes_measured=m.dram_read_bytes,
                dram_read_bytes_predicted=dram,
                dram_ratio=dram / m.dram_read_bytes if m.dram_read_bytes else math.nan,
                kernel_ms_measured=m.kernel_ms, kernel_ms_predicted=r.kernel_ms_median))
    return rows


def ranking_preserved(measured: list[float], predicted: list[float], tol: float) -> bool:
    """Every pair the measurement separates by more than ``tol`` is ordered the same way by the prediction."""
    for (m1, p1), (m2, p2) in itertools.combinations(zip(measured, predicted, strict=True), 2):
        if abs(m1 - m2) > tol and (m1 - m2) * (p1 - p2) <= 0:
            return False
    return True


def summarize(rows: list[ValidationRow], rank_tol_pts: float = 1.0) -> dict:
    """MAE of L2 hit, DRAM ratio spread, and per-group ranking verdicts (L2 hit, and DRAM bytes)."""
    key = lambda r: (r.backend, r.mask_kind, r.seq_len, r.heads, r.density, r.seed)  # noqa: E731
    groups = {}
    for k, members in itertools.groupby(sorted(rows, key=key), key=key):
        members = list(members)
        groups["/".join(map(str, k))] = {
            "l2_rank_preserved": ranking_preserved([m.l2_hit_pct_measured for m in members],
                                                   [m.l2_hit_pct_predicted for m in members], rank_tol_pts),
            "dram_rank_preserved": ranking_preserved(
                [m.dram_read_bytes_measured for m in members], [m.dram_read_bytes_predicted for m in members],
                0.01 * max(m.dram_read_bytes_measured for m in members)),
        }
    ratios = [r.dram_ratio for r in rows]
    within = sum(abs(x - 1.0) <= DRAM_RATIO_GOAL for x in ratios)
    mae = sum(r.l2_hit_abs_err_pts for r in rows) / len(rows)
    return {
        "cells": len(rows),
        "l2_hit_mae_pts": mae,
        "l2_hit_mae_goal_met": mae <= L2_MAE_GOAL_PTS,
        "dram_ratio_min": min(ratios), "dram_ratio_max": max(ratios),
        "dram_within_15pct": f"{within}/{len(rows)}",
        "dram_goal_met": within == len(rows),
        "groups": groups,
        "ranking_goal_met": all(g["l2_rank_preserved"] for g in groups.values()),
    }


def write_report(rows: list[ValidationRow], summary: dict, out: Path, command: str, settings: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "validation.csv", ValidationRow, rows)
    lines = [
        "# Simulator vs Nsight Compute", "",
        f"- command: `{command}`",
        f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}; machine: {platform.node()} "
        f"({platform.processor() or platform.machine()})",
        f"- simulator settings: {settings}", "",
        f"**L2 hit MAE: {summary['l2_hit_mae_pts']:.2f} points** (goal <= {L2_MAE_GOAL_PTS:g}: "
        f"{'met' if summary['l2_hit_mae_goal_met'] else 'missed'}); "
        f"**DRAM predicted/measured: {summary['dram_ratio_min']:.3f}-{summary['dram_ratio_max']:.3f}**, "
        f"{summary['dram_within_15pct']} within +-15% ({'met' if summary['dram_goal_met'] else 'missed'}); "
        f"**rankings preserved: {'all groups' if summary['ranking_goal_met'] else 'not in every group'}**.", "",
        "| backend | mask | seq_len | heads | density | seed | stages | L2 hit % meas | L2 hit % pred | err pts "
        "| DRAM GB meas | DRAM GB pred | ratio | ms meas | ms pred |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {r.backend} | {r.mask_kind} | {r.seq_len} | {r.heads} | {r.density:g} | {r.seed} | {r.stages} "
              f"| {r.l2_hit_pct_measured:.1f} | {r.l2_hit_pct_predicted:.1f} | {r.l2_hit_abs_err_pts:.1f} "
              f"| {r.dram_read_bytes_measured / 1e9:.2f} | {r.dram_read_bytes_predicted / 1e9:.2f} "
              f"| {r.dram_ratio:.3f} | {r.kernel_ms_measured:.3f} | {r.kernel_ms_predicted:.3f} |" for r in rows]
    lines += ["", "| group (backend/mask/seq_len/heads/density/seed) | L2 ranking kept | DRAM ranking kept |",
              "|---|---|---|"]
    lines += [f"| {g} | {v['l2_rank_preserved']} | {v['dram_rank_preserved']} |"
              for g, v in summary["groups"].items()]
    (out / "validation.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    parser = argument_parser("validate_sim", __doc__)
    parser.add_argument("measurements", type=Path,
                        help="a sweep's run_root (Parquet with NCU counters), or an NCU table: .csv, .json or .jsonl")
    parser.add_argument("--out", type=Path, required=True, help="directory for validation.csv/.md")
    parser.add_argument("--hardware", default="h200", choices=hardware.names(),
                        help="the GPU a table's rows were measured on (a sweep's rows name their own)")
    parser.add_argument("--l2-partitions", type=int, default=None, choices=(1, 2),
                        help="default: the GPU's (wavealign.hardware: l2_partitions)")
    parser.add_argument("--row-jitter", type=float, default=0.0)
    parser.add_argument("--rank-tol-pts", type=float, default=1.0,
                        help="measured L2 hit differences at most this large do not constrain the ranking")
    parser.add_argument("--mask-density", type=float, default=None,
                        help="density a table's masks were generated at, for tables that record only the realised "
                             "one (bench-kernels generated at 0.25)")
    args = parser.parse_args(argv)
    if not args.measurements.exists():
        parser.error(f"measurements {args.measurements} does not exist")
    output_folder("--out", args.out)
    if not args.measurements.is_dir():
        check_table(args.measurements)  # before torch loads: a row's mistake answers in a second
    measured = (from_run_root(args.measurements) if args.measurements.is_dir()
                else from_table(args.measurements, args.hardware, args.mask_density))
    rows = validate(measured, args.l2_partitions, args.row_jitter)
    summary = summarize(rows, args.rank_tol_pts)
    partitions = args.l2_partitions or hardware.get(args.hardware).l2_partitions
    settings = f"hardware={args.hardware} l2_partitions={partitions} row_jitter={args.row_jitter}"
    write_report(rows, summary, args.out, "python lab/validate_sim.py " + shlex.join(argv), settings)
    print(json.dumps({k: v for k, v in summary.items() if k != "groups"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(run_study("validate_sim", main))
