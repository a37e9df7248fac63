"""The paper's tables from a results frame: NCU characterisation per method (Table I) and the reorderer
comparison (Table II). Each returns a DataFrame; one lacking its inputs holds a single ``note`` column.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.paper import DENSITY_TOLERANCE_PTS, L2_RATIO_TOLERANCE, L2_TOLERANCE_PTS
from analysis.plotting import (
    NO_CELLS,
    STAGE_LABELS,
    done_cells,
    is_baseline,
    is_simulated,
    missing_columns,
    missing_note,
    relative_to_original,
    row_variants,
)
from wavealign import metrics, reorderers
from wavealign.records import DEFAULT_REORDERER, NO_REORDERER, SPATIAL_STAGES, TEMPORAL_STAGES, order_name

GROUP_KEYS = ["hardware", "backend", "method"]


def _note_table(text: str) -> pd.DataFrame:
    return pd.DataFrame({"note": [text]})


def _hbm_sol(cells: pd.DataFrame) -> pd.Series:
    """HBM speed-of-light %: Nsight Compute's DRAM throughput where measured (NaN otherwise)."""
    if "ncu_dram_throughput_pct" in cells:
        return cells["ncu_dram_throughput_pct"]
    return pd.Series(float("nan"), index=cells.index)


def _l2_hit(cells: pd.DataFrame) -> pd.Series:
    """Per cell: Nsight Compute's L2 hit rate where measured, else the dataset's (simulated) one."""
    present = [c for c in ("ncu_l2_hit_pct", "l2_hit_pct") if c in cells]
    if not present:
        return pd.Series(float("nan"), index=cells.index)
    return cells[present[0]].combine_first(cells[present[-1]])


def ncu_characterisation(frame: pd.DataFrame) -> pd.DataFrame:
    """Table I: per hardware, backend and method, in the original order: mean density, HBM SOL %, L2 hit %."""
    if missing := missing_columns(frame, (*GROUP_KEYS, "stages", "density")):
        return _note_table(missing_note(missing))
    cells = done_cells(frame)
    cells = cells[is_baseline(cells)]
    if cells.empty:
        return _note_table("no finished original-order cells")
    cells = cells.assign(simulated=is_simulated(cells), hbm_sol_pct=_hbm_sol(cells), l2_hit_pct=_l2_hit(cells))
    table = cells.groupby([*GROUP_KEYS, "simulated"]).agg(
        cells=("density", "size"), density_pct=("density", lambda d: 100 * d.mean()),
        hbm_sol_pct=("hbm_sol_pct", "mean"), l2_hit_pct=("l2_hit_pct", "mean"))
    return table.reset_index()


# the tolerances a workload is judged by against the paper's Table I (the jobs' one copy)
L2_RATIO_TOLERANCE_PCT = 100 * L2_RATIO_TOLERANCE
CONTROLS = ("random", "dense")  # the rows a workload's methods are read against; they depend on no workload


def table1_against_paper(frame: pd.DataFrame, paper_density: dict[str, float],
                         paper_l2_hit_pct: dict[str, float]) -> pd.DataFrame:
    """Table I per workload, beside the paper's (``paper_density``: fractions per method; ``paper_l2_hit_pct``: per
    method and for ``random`` and ``dense``): per (workload, method) in the original order its density, kernel ms
    original and after WaveAlign (S1+S2), reorder ms, kernel and net speedup, Nsight Compute's L2 hit in both
    orders, that hit over the iid random control's (the control's cell nearest in density, original order) against
    the paper's same ratio, and what misses: density beyond 3 points, L2 hit beyond 5 points, the ratio beyond 15%.
    The controls' own rows (random, dense) follow, once each."""
    needed = ("workload", "method", "stages", "density", "kernel_ms_median", "group_id")
    if missing := missing_columns(frame, needed):
        return _note_table(missing_note(missing))
    cells = done_cells(frame)
    if cells.empty:
        return _note_table(NO_CELLS)
    for column in ("ncu_l2_hit_pct", "reorder_ms", "speedup_vs_original", "net_speedup_vs_original", "generator"):
        if column not in cells:
            cells = cells.assign(**{column: float("nan")})
    launch = row_variants(cells)
    original = cells[is_baseline(cells)]
    reordered = cells[launch.map(lambda v: v.spatial and v.temporal).astype(bool)].set_index("group_id")
    controls = original[(original["method"] == "random") & original["ncu_l2_hit_pct"].notna()]
    rows = []
    for _, o in original.sort_values(["workload", "method"]).iterrows():
        w = reordered.loc[o["group_id"]] if o["group_id"] in reordered.index else None
        if isinstance(w, pd.DataFrame):
            w = w.iloc[-1]
        row = {"workload": o["workload"], "generator": o["generator"], "method": o["method"],
               "density_pct": 100 * o["density"], "paper_density_pct": 100 * paper_density.get(o["method"], math.nan),
               "original_kernel_ms": o["kernel_ms_median"],
               "wavealign_kernel_ms": math.nan if w is None else w["kernel_ms_median"],
               "reorder_ms": math.nan if w is None else w["reorder_ms"],
               "kernel_speedup": math.nan if w is None else w["speedup_vs_original"],
               "net_speedup": math.nan if w is None else w["net_speedup_vs_original"],
               "ncu_l2_hit_original_pct": o["ncu_l2_hit_pct"],
               "ncu_l2_hit_wavealign_pct": math.nan if w is None else w["ncu_l2_hit_pct"],
               "paper_l2_hit_pct": paper_l2_hit_pct.get(o["method"], math.nan)}
        control = controls.iloc[(controls["density"] - o["density"]).abs().argsort()[:1]] if len(controls) else None
        row["l2_over_random"] = o["ncu_l2_hit_pct"] / control["ncu_l2_hit_pct"].iloc[0] \
            if control is not None and o["method"] != "random" else math.nan
        row["paper_l2_over_random"] = row["paper_l2_hit_pct"] / paper_l2_hit_pct["random"]
        row["density_error_pts"] = row["density_pct"] - row["paper_density_pct"]
        row["l2_error_pts"] = row["ncu_l2_hit_original_pct"] - row["paper_l2_hit_pct"]
        row["l2_ratio_error_pct"] = 100 * (row["l2_over_random"] / row["paper_l2_over_random"] - 1)
        row["misses"] = _misses(row)
        rows.append(row)
    table = pd.DataFrame(rows)
    is_control = table["method"].isin(CONTROLS)
    # a control row once (its workload's name does not change its mask), after the methods
    return pd.concat([table[~is_control], table[is_control].drop_duplicates("method", keep="last")],
                     ignore_index=True)


def _misses(row: dict) -> str:
    """What a method's row misses against the paper, with the numbers ("" when nothing, or for a control)."""
    if row["method"] in CONTROLS:
        return ""
    out = []
    for key, tolerance, unit in (("density_error_pts", DENSITY_TOLERANCE_PTS, " pts density"),
                                 ("l2_error_pts", L2_TOLERANCE_PTS, " pts L2 hit"),
                                 ("l2_ratio_error_pct", L2_RATIO_TOLERANCE_PCT, "% L2 / random")):
        if abs(row[key]) > tolerance:
            out.append(f"{row[key]:+.1f}{unit}")
    return "; ".join(out)


def distance_to_paper(table: pd.DataFrame, l2_target: str) -> dict[str, float]:
    """Per workload, the issue's distance to Table I over the four methods: sum of |density error| / 3 pts plus
    |L2 error| / its tolerance (5 pts with ``l2_target`` "absolute", 15% of the ratio to the iid control with
    "relative")."""
    column, tolerance = {"absolute": ("l2_error_pts", L2_TOLERANCE_PTS),
                         "relative": ("l2_ratio_error_pct", L2_RATIO_TOLERANCE_PCT)}[l2_target]
    methods = table[~table["method"].isin(CONTROLS)]
    return {workload: float((rows["density_error_pts"].abs() / DENSITY_TOLERANCE_PTS
                             + rows[column].abs() / tolerance).sum())
            for workload, rows in methods.groupby("workload")}


def order_label(stages: str, reorderer: str | None) -> str:
    """Table II's name of a launch order, its reorderer's registry label (``Reorderer.label``; followed by Stage 2,
    ``Reorderer.staged_label``): "Original", "O+S2", "WaveAlign S1", "WaveAlign" (S1+S2), "MinHash", "MinHash+S2",
    ...; a stage set without a spatial step orders by no reorderer (identity's labels), a row from before reorderers
    were recorded is WaveAlign's, and a reorderer this code lacks goes by its name."""
    if stages not in SPATIAL_STAGES:
        reorderer = NO_REORDERER
    elif not isinstance(reorderer, str):
        reorderer = DEFAULT_REORDERER
    temporal = stages in TEMPORAL_STAGES
    if reorderer not in reorderers.names():
        return f"{reorderer}+S2" if temporal else reorderer
    entry = reorderers.get(reorderer)
    return entry.staged_label if temporal else entry.label


def table2_order() -> list[str]:
    """Table II's launch orders in its order: the original's, each baseline's, then WaveAlign's, each alone and then
    followed by Stage 2 (by their registry labels)."""
    others = [r for r in reorderers.names() if r not in (NO_REORDERER, DEFAULT_REORDERER)]
    entries = map(reorderers.get, (NO_REORDERER, *others, DEFAULT_REORDERER))
    return [label for entry in entries for label in (entry.label, entry.staged_label)]


def table2(frame: pd.DataFrame) -> pd.DataFrame:
    """Table II: per hardware, backend, method, workload, head count, sequence length and launch order (original,
    WaveAlign, each baseline with and without Stage 2): kernel and reorder time, the speedup over the group's
    original order without and with the reorder overhead (the records' own, ``wavealign.metrics``), each beside its
    interval and verdict (over several cells, ``metrics.AGGREGATE_RULE``: the summary's rule), HBM SOL % and L2 hit
    % (Nsight Compute where profiled, else simulated). ``variant`` names the cells' launch orders
    (``records.order_name``). Lengths are kept apart: a 2K and a 4K cell are not one
    mean."""
    need = (*GROUP_KEYS, "num_heads", "stages", "group_id", "kernel_ms_median", "reorder_ms")
    if missing := missing_columns(frame, need):
        return _note_table(missing_note(missing))
    cells = done_cells(frame)
    if cells.empty:
        return _note_table(NO_CELLS)
    reorderer = cells["reorderer"] if "reorderer" in cells else pd.Series(None, index=cells.index, dtype=object)
    cells = with_speedups(cells)
    cells = cells.assign(
        simulated=is_simulated(cells), hbm_sol_pct=_hbm_sol(cells), l2_hit_pct=_l2_hit(cells),
        order=[order_label(st, r) for st, r in zip(cells["stages"], reorderer, strict=True)],
        **({"launch_order": [order_name(str(v), r) for v, r in zip(cells["variant"], reorderer, strict=True)]}
           if "variant" in cells else {}))
    cells = cells[cells["speedup_vs_original"].notna()]
    if cells.empty:
        return _note_table("no cell with an original-order cell in its group")
    shape = [*(["workload"] if "workload" in cells else []), "num_heads",
             *(["seq_len_tokens"] if "seq_len_tokens" in cells else [])]
    keys = [*GROUP_KEYS, *shape, "order", "simulated"]
    rows = []
    for key, part in cells.groupby(keys, dropna=False, sort=False):
        kernel, net = shown(part), shown(part, NET)
        variant = one_or_joined(part["launch_order"]) if "launch_order" in part else None
        rows.append({**dict(zip(keys, key, strict=True)), "variant": variant, "cells": len(part),
                     "kernel_ms": part["kernel_ms_median"].mean(), "reorder_ms": part["reorder_ms"].mean(),
                     "speedup": kernel.point, "speedup_ci_low": kernel.low, "speedup_ci_high": kernel.high,
                     "verdict": kernel.verdict, "speedup_with_overhead": net.point, "net_speedup_ci_low": net.low,
                     "net_speedup_ci_high": net.high, "net_verdict": net.verdict,
                     "hbm_sol_pct": part["hbm_sol_pct"].mean(), "l2_hit_pct": part["l2_hit_pct"].mean()})
    rank = {label: i for i, label in enumerate(table2_order())}
    table = pd.DataFrame(rows).sort_values(
        [*GROUP_KEYS, *shape, "order"], key=lambda c: c.map(lambda v: rank.get(v, len(rank))) if c.name == "order"
        else c)
    return table.reset_index(drop=True)


INTERVAL_COLUMNS = ("speedup_ci_low", "speedup_ci_high", "net_speedup_ci_low", "net_speedup_ci_high")
VERDICT_COLUMNS = ("verdict", "net_verdict")
NET = "net_"  # the prefix of a record's speedup columns with the reorder counted (net_speedup_vs_original, ...)


def with_intervals(cells: pd.DataFrame) -> pd.DataFrame:
    """``cells`` with their speedups' intervals and verdicts (NaN and ``metrics.NO_VERDICT`` in rows from before they
    were recorded); a simulated cell's interval is NaN whatever it holds: a prediction has no spread, and a table shows
    "-" for it, never a width of 0."""
    cells = cells.assign(**{c: cells[c].astype(float) if c in cells else math.nan
                            for c in ("speedup_vs_original", "net_speedup_vs_original", *INTERVAL_COLUMNS)})
    cells.loc[is_simulated(cells), list(INTERVAL_COLUMNS)] = math.nan
    return cells.assign(**{c: cells[c].fillna(metrics.NO_VERDICT) if c in cells else metrics.NO_VERDICT
                           for c in VERDICT_COLUMNS})


def with_speedups(cells: pd.DataFrame) -> pd.DataFrame:
    """``with_intervals``, and in rows from before speedups were recorded the speedups of their medians: the group's
    original kernel ms over the cell's kernel ms (net: over its kernel and reorder ms); NaN without an original in the
    group. A recorded speedup is the record's own (``metrics``, paired reps)."""
    original_ms = cells["kernel_ms_median"] / relative_to_original(cells, "kernel_ms_median")
    reorder_ms = cells["reorder_ms"].fillna(0.0) if "reorder_ms" in cells else 0.0
    cells = with_intervals(cells)
    return cells.assign(
        speedup_vs_original=cells["speedup_vs_original"].combine_first(
            metrics.speedup(original_ms, cells["kernel_ms_median"])),
        net_speedup_vs_original=cells["net_speedup_vs_original"].combine_first(
            metrics.speedup(original_ms, cells["kernel_ms_median"] + reorder_ms)))


def tolerance(cells: pd.DataFrame) -> float:
    """The verdicts' tolerance ``cells`` were judged with (``metrics.recorded_tolerance``)."""
    return metrics.recorded_tolerance(cells["verdict_tolerance"].tolist() if "verdict_tolerance" in cells else [])


def one_or_joined(values: pd.Series) -> object:
    """What a column says of a row that stands for several cells: their one value, or their values joined by ", "
    where they differ (None where no cell has one)."""
    kept = list(dict.fromkeys(v for v in values.tolist() if v is not None and v == v))
    if len(kept) == 1:
        return kept[0]
    return ", ".join(sorted(map(str, kept))) if kept else None


def shown(cells: pd.DataFrame, prefix: str = "") -> metrics.Shown:
    """The one speedup ``cells`` show together by ``metrics.AGGREGATE_RULE`` (``metrics.aggregate``, as the sweep's
    summary does): their kernel speedups over the original (``prefix`` ""), or with the reorder counted (``NET``);
    predicted when every cell is simulated, the baseline's when every cell is the original variant, judged with the
    tolerance the cells recorded. ``cells`` went through ``with_speedups`` (or ``with_intervals``)."""
    return metrics.aggregate(cells[f"{prefix}speedup_vs_original"], cells[f"{prefix}speedup_ci_low"],
                             cells[f"{prefix}speedup_ci_high"], predicted=bool(is_simulated(cells).all()),
                             baseline=bool(is_baseline(cells).all()), tolerance=tolerance(cells))


def kernel_benchmark(frame: pd.DataFrame) -> pd.DataFrame:
    """Per hardware, length, method, backend and stages: kernel and reorder time, the net speedup over the same
    backend's original order and over flex's, effective TFLOP/s, the gap to the 1/rho bound against the same
    backend's dense cell (method ``dense``) and, where profiled, L2 hit % and DRAM GB."""
    need = ("hardware", "backend", "method", "stages", "group_id", "seq_len_tokens", "num_heads", "head_dim",
            "density", "kernel_ms_median", "reorder_ms", "net_speedup_vs_original")
    if missing := missing_columns(frame, need):
        return _note_table(missing_note(missing))
    cells = done_cells(frame)
    cells = with_intervals(cells[~is_simulated(cells)])
    if cells.empty:
        return _note_table("no finished timed cell")
    shape = ["hardware", "seq_len_tokens", "num_heads", "head_dim"]
    dense = cells[cells["method"] == "dense"].drop_duplicates([*shape, "backend"]).set_index([*shape, "backend"])
    dense_ms = cells.set_index([*shape, "backend"]).index.map(dense["kernel_ms_median"].to_dict()).to_numpy()
    flex = cells[(cells["backend"] == "flex") & is_baseline(cells)]
    flex_ms = cells.set_index([*shape, "method"]).index.map(
        flex.drop_duplicates([*shape, "method"]).set_index([*shape, "method"])["kernel_ms_median"].to_dict())
    flops = metrics.attention_flops(cells["seq_len_tokens"], cells["seq_len_tokens"], cells["head_dim"],
                                    cells["num_heads"], cells["density"])
    table = cells.assign(
        effective_tflops=metrics.tflops(flops, cells["kernel_ms_median"]),
        net_speedup_vs_flex_original=metrics.speedup(flex_ms.to_numpy(),
                                                     cells["kernel_ms_median"] + cells["reorder_ms"]),
        gap_to_bound=metrics.gap_to_bound(dense_ms, cells["kernel_ms_median"], cells["density"]),
        dram_read_gb=cells["ncu_dram_read_bytes"] / 1e9 if "ncu_dram_read_bytes" in cells else float("nan"))
    columns = ["hardware", "seq_len_tokens", "method", "backend", "backend_params", "stages", "density",
               "kernel_ms_median", "reorder_ms", "net_speedup_vs_original", "net_speedup_ci_low",
               "net_speedup_ci_high", "net_verdict", "net_speedup_vs_flex_original",
               "effective_tflops", "gap_to_bound", "ncu_l2_hit_pct", "dram_read_gb"]
    table = table[[c for c in columns if c in table]].sort_values(["hardware", "seq_len_tokens", "method", "backend"])
    table["stages"] = table["stages"].map(lambda s: STAGE_LABELS.get(s, s))
    return table.reset_index(drop=True)


def to_markdown(table: pd.DataFrame, digits: int = 3) -> str:
    """A table as GitHub markdown, floats to ``digits`` decimals, NaN left blank."""
    def cell(value) -> str:
        if isinstance(value, float):
            return "" if value != value else f"{value:.{digits}f}"
        return str(value)

    lines = ["| " + " | ".join(map(str, table.columns)) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)


TABLES = {
    "table1_ncu_characterisation": ncu_characterisation,
    "table2_reorderer_comparison": table2,
    "kernel_benchmark": kernel_benchmark,
}
# each table's heading in the report
TABLE_TITLES = {
    "table1_ncu_characterisation": "Table I: density, HBM SOL and L2 hit per method, original order",
    "table2_reorderer_comparison": "Table II: reorderers compared (kernel and reorder time, speedups, HBM SOL, L2 hit)",
    "kernel_benchmark": "Kernel benchmark: time, effective TFLOP/s, net speedups and the gap to the 1/rho bound",
}
