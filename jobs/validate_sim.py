"""Compare the L2/HBM simulator with Nsight Compute measurements: L2 hit MAE, DRAM ratio, rankings.

``wavealign validate-sim MEASURED.csv --out DIR`` reads one row per measured launch (CSV, JSON list or
JSON lines) with the columns ``backend, stages, mask_kind, seq_len, heads, block_size, head_dim,
density, seed, l2_hit_pct, dram_read_bytes, kernel_ms`` (NCU: ``lts__t_sector_hit_rate.pct``,
``dram__bytes_read.sum``, ``gpu__time_duration.sum``) and optionally ``mask_file`` (a ``wavealign.sim.packed``
.npz, required for method masks), ``nnz_spread`` (random masks), ``prototypes`` and ``noise`` (planted
masks), ``wave_size`` and ``plan_seed`` (the reorder plan). It regenerates each cell's mask from
``wavealign.synthetic`` with the same seed, reorders it with ``reorder.plan``, simulates it on the
``--hardware`` profile (h200 by default) and writes ``validation.csv`` and ``validation.md`` to DIR.

Goals (issue 6): L2 hit MAE <= 5 points; DRAM bytes within +-15%; the variants' ranking preserved in every
group (a group is one mask and backend, its rows the stages).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import itertools
import json
import math
import platform
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from jobs._records import write_csv
from wavealign import hardware, reorder, sim, synthetic
from wavealign.sim import packed

REQUIRED = ("backend", "stages", "mask_kind", "seq_len", "heads", "block_size", "head_dim", "density", "seed",
            "l2_hit_pct", "dram_read_bytes", "kernel_ms")
# the sweep's variant names (conf/config.yaml) for the reorder stages
VARIANT_STAGES = {"original": "none", "spatial": "spatial", "temporal": "temporal", "wavealign": "both"}
STAGES = reorder.STAGES
L2_MAE_GOAL_PTS = 5.0
DRAM_RATIO_GOAL = 0.15


@dataclass(frozen=True)
class Cell:
    """One measured launch: what identifies its mask and order, and what NCU measured."""

    backend: str
    stages: str
    mask_kind: str
    seq_len: int
    heads: int
    block_size: int
    head_dim: int
    density: float
    seed: int
    l2_hit_pct: float
    dram_read_bytes: float
    kernel_ms: float
    mask_file: str = ""
    nnz_spread: float = 0.0
    # generator arguments the measured masks were made with; unset = wavealign.synthetic's own defaults
    mask_density: float | None = None  # the density asked of the generator (``density`` is the realised one)
    prototypes: int | None = None
    noise: float | None = None
    wave_size: int = 0  # 0: the hardware's wave for the backend
    plan_seed: int = 0

    def generator_kwargs(self, names: tuple[str, ...]) -> dict:
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    @property
    def group(self) -> tuple:
        """Everything but the stages: the rows of one group share one mask and backend."""
        return (self.backend, self.mask_kind, self.seq_len, self.heads, self.block_size, self.head_dim,
                self.density, self.seed, self.mask_file)


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


def read_cells(path: Path) -> list[Cell]:
    """Rows of a CSV, a JSON list or JSON lines, checked for the required columns."""
    text = path.read_text()
    if path.suffix == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
    elif text.lstrip().startswith("["):
        rows = json.loads(text)
    else:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"measurements {path} hold no rows")
    fields = {f.name: f for f in dataclasses.fields(Cell)}
    cells = []
    for i, row in enumerate(rows):
        missing = [c for c in REQUIRED if row.get(c) in (None, "")]
        if missing:
            raise ValueError(f"measurements {path} row {i} lacks columns {missing}; expected {list(REQUIRED)}")
        values = {k: _typed(fields[k].type, v) for k, v in row.items() if k in fields and v not in (None, "")}
        values["stages"] = VARIANT_STAGES.get(values["stages"], values["stages"])
        if values["stages"] not in STAGES:
            raise ValueError(f"row {i}: stages must be one of {STAGES} or {list(VARIANT_STAGES)}, "
                             f"got {row['stages']!r}")
        cells.append(Cell(**values))
    return cells


def _typed(annotation: str, value):
    kind = {"int": int, "float": float, "str": str}[annotation.removesuffix(" | None")]
    return kind(float(value)) if kind is int else kind(value)


def cell_mask(cell: Cell) -> torch.Tensor:
    """The cell's mask: its saved file, or regenerated from ``wavealign.synthetic`` with its seed."""
    if cell.mask_file:
        return packed.load(cell.mask_file)
    blocks = math.ceil(cell.seq_len / cell.block_size)
    density = cell.mask_density if cell.mask_density is not None else cell.density
    if cell.mask_kind == "random":
        return synthetic.random_mask(cell.heads, blocks, blocks, density, seed=cell.seed)
    if cell.mask_kind == "random-fixed-nnz":
        return synthetic.fixed_nnz_mask(cell.heads, blocks, blocks, density, nnz_spread=cell.nnz_spread,
                                        seed=cell.seed)
    if cell.mask_kind == "planted":
        return synthetic.planted_mask(cell.heads, blocks, blocks, density, seed=cell.seed,
                                      **cell.generator_kwargs(("prototypes", "noise")))
    raise ValueError(f"mask_kind {cell.mask_kind!r} is none of 'random', 'random-fixed-nnz' and "
                     "'planted', so its row needs a "
                     "mask_file column (a wavealign.sim.packed .npz)")


def validate(cells: list[Cell], hw: hardware.Hardware, l2_partitions: int | None = None,
             row_jitter: float = 0.0) -> list[ValidationRow]:
    """Simulate every cell (one mask per group, one plan per stages) and pair it with its measurement."""
    rows = []
    for _, group in itertools.groupby(sorted(cells, key=lambda c: repr(c.group)), key=lambda c: repr(c.group)):
        group = list(group)
        mask = cell_mask(group[0])
        for cell in group:
            wave = cell.wave_size or hw.wave_size(cell.backend)
            order = reorder.plan(mask, wave_size=wave, stages=cell.stages, seed=cell.plan_seed)
            r = sim.simulate(mask, order, hardware=hw, backend=cell.backend, head_dim=cell.head_dim,
                             block_size=cell.block_size, l2_partitions=l2_partitions, row_jitter=row_jitter)
            rows.append(ValidationRow(
                backend=cell.backend, mask_kind=cell.mask_kind, seq_len=cell.seq_len, heads=cell.heads,
                density=cell.density, seed=cell.seed, stages=cell.stages,
                l2_hit_pct_measured=cell.l2_hit_pct, l2_hit_pct_predicted=r.l2_hit_pct,
                l2_hit_abs_err_pts=abs(r.l2_hit_pct - cell.l2_hit_pct),
                dram_read_bytes_measured=cell.dram_read_bytes, dram_read_bytes_predicted=r.hbm_read_bytes,
                dram_ratio=r.hbm_read_bytes / cell.dram_read_bytes if cell.dram_read_bytes else math.nan,
                kernel_ms_measured=cell.kernel_ms, kernel_ms_predicted=r.kernel_time_s * 1e3))
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
    parser = argparse.ArgumentParser(prog="wavealign validate-sim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("measurements", type=Path, help="NCU table: .csv, .json (a list) or .jsonl")
    parser.add_argument("--out", type=Path, required=True, help="directory for validation.csv/.md")
    parser.add_argument("--hardware", default="h200", choices=hardware.names())
    parser.add_argument("--l2-partitions", type=int, default=None, choices=(1, 2),
                        help="default: the GPU's (wavealign.sim.L2_PARTITIONS)")
    parser.add_argument("--row-jitter", type=float, default=0.0)
    parser.add_argument("--rank-tol-pts", type=float, default=1.0,
                        help="measured L2 hit differences at most this large do not constrain the ranking")
    parser.add_argument("--mask-density", type=float, default=None,
                        help="density the masks were generated at, for tables that record only the realised one "
                             "(bench-kernels generates at its --density, 0.25 by default)")
    args = parser.parse_args(argv)
    cells = read_cells(args.measurements)
    if args.mask_density is not None:
        cells = [c if c.mask_density is not None else dataclasses.replace(c, mask_density=args.mask_density)
                 for c in cells]
    rows = validate(cells, hardware.get(args.hardware), args.l2_partitions, args.row_jitter)
    summary = summarize(rows, args.rank_tol_pts)
    partitions = args.l2_partitions or sim.L2_PARTITIONS.get(args.hardware, 1)
    settings = f"hardware={args.hardware} l2_partitions={partitions} row_jitter={args.row_jitter}"
    write_report(rows, summary, args.out, "wavealign validate-sim " + shlex.join(argv), settings)
    print(json.dumps({k: v for k, v in summary.items() if k != "groups"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
