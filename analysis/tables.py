"""The paper's tables from a results frame: NCU characterisation per method (Table I) and the reorderer
comparison (Table II). Each returns a DataFrame; one lacking its inputs holds a single ``note`` column.
"""

from __future__ import annotations

import pandas as pd

from wavealign.analysis.plotting import (
    NO_CELLS,
    STAGE_LABELS,
    done_cells,
    geomean,
    is_simulated,
    missing_columns,
    missing_note,
    relative_to_original,
)

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
    cells = cells[cells["stages"] == "none"]
    if cells.empty:
        return _note_table("no finished original-order cells")
    cells = cells.assign(simulated=is_simulated(cells), hbm_sol_pct=_hbm_sol(cells), l2_hit_pct=_l2_hit(cells))
    table = cells.groupby([*GROUP_KEYS, "simulated"]).agg(
        cells=("density", "size"), density_pct=("density", lambda d: 100 * d.mean()),
        hbm_sol_pct=("hbm_sol_pct", "mean"), l2_hit_pct=("l2_hit_pct", "mean"))
    return table.reset_index()


# how Table II names each launch order: the technique, "+S2" when Stage 2 follows it
REORDERER_LABELS = {"identity": "Original", "wavealign": "WaveAlign S1", "hypergraph": "Hypergraph",
                    "minhash": "MinHash", "lsh": "LSH", "clustering": "Clustering"}


def order_label(stages: str, reorderer: str | None) -> str:
    """Table II's name of a launch order: "Original", "O+S2", "WaveAlign S1", "WaveAlign" (S1+S2), "MinHash",
    "MinHash+S2", ... (a row from before reorderers were recorded is WaveAlign's)."""
    if stages == "none":
        return "Original"
    if stages == "temporal" or reorderer == "identity":
        return "O+S2" if stages in ("temporal", "both") else "Original"
    name = reorderer if isinstance(reorderer, str) else "wavealign"
    if name == "wavealign":
        return "WaveAlign" if stages == "both" else "WaveAlign S1"
    label = REORDERER_LABELS.get(name, name)
    return f"{label}+S2" if stages == "both" else label


def table2(frame: pd.DataFrame) -> pd.DataFrame:
    """Table II: per hardware, backend, method, head count, sequence length and launch order (original, WaveAlign,
    each baseline with and without Stage 2): kernel and reorder time, the speedup over the group's original order
    without and with the reorder overhead (geomean over cells), HBM SOL % and L2 hit % (Nsight Compute where
    profiled, else simulated). Lengths are kept apart: a 2K and a 4K cell are not one mean."""
    need = (*GROUP_KEYS, "num_heads", "stages", "group_id", "kernel_ms_median", "reorder_ms")
    if missing := missing_columns(frame, need):
        return _note_table(missing_note(missing))
    cells = done_cells(frame)
    if cells.empty:
        return _note_table(NO_CELLS)
    original_kernel = relative_to_original(cells, "kernel_ms_median")
    reorderer = cells["reorderer"] if "reorderer" in cells else pd.Series(None, index=cells.index, dtype=object)
    cells = cells.assign(
        simulated=is_simulated(cells), hbm_sol_pct=_hbm_sol(cells), l2_hit_pct=_l2_hit(cells),
        order=[order_label(st, r) for st, r in zip(cells["stages"], reorderer, strict=True)],
        speedup=1.0 / original_kernel,
        speedup_with_overhead=cells["kernel_ms_median"] / original_kernel
        / (cells["kernel_ms_median"] + cells["reorder_ms"].fillna(0.0)))
    cells = cells[cells["speedup"].notna()]
    if cells.empty:
        return _note_table("no cell with an original-order cell in its group")
    shape = ["num_heads", *(["seq_len_tokens"] if "seq_len_tokens" in cells else [])]
    table = cells.groupby([*GROUP_KEYS, *shape, "order", "simulated"]).agg(
        cells=("kernel_ms_median", "size"), kernel_ms=("kernel_ms_median", "mean"),
        reorder_ms=("reorder_ms", "mean"), speedup=("speedup", geomean),
        speedup_with_overhead=("speedup_with_overhead", geomean),
        hbm_sol_pct=("hbm_sol_pct", "mean"), l2_hit_pct=("l2_hit_pct", "mean")).reset_index()
    rank = {label: i for i, label in enumerate(
        ["Original", "O+S2", *[f"{REORDERER_LABELS[r]}{s}" for r in ("hypergraph", "minhash", "lsh", "clustering")
                               for s in ("", "+S2")], "WaveAlign S1", "WaveAlign"])}
    table = table.sort_values([*GROUP_KEYS, *shape, "order"],
                              key=lambda c: c.map(lambda v: rank.get(v, len(rank))) if c.name == "order" else c)
    return table.reset_index(drop=True)


def kernel_benchmark(frame: pd.DataFrame) -> pd.DataFrame:
    """Per hardware, length, method, backend and stages: kernel and reorder time, the net speedup over the same
    backend's original order and over flex's, effective TFLOP/s, the gap to the 1/rho bound against the same
    backend's dense cell (method ``dense``) and, where profiled, L2 hit % and DRAM GB."""
    need = ("hardware", "backend", "method", "stages", "group_id", "seq_len_tokens", "num_heads", "head_dim",
            "density", "kernel_ms_median", "reorder_ms", "net_speedup_vs_original")
    if missing := missing_columns(frame, need):
        return _note_table(missing_note(missing))
    cells = done_cells(frame)
    cells = cells[~is_simulated(cells)]
    if cells.empty:
        return _note_table("no finished timed cell")
    shape = ["hardware", "seq_len_tokens", "num_heads", "head_dim"]
    dense = cells[cells["method"] == "dense"].drop_duplicates([*shape, "backend"]).set_index([*shape, "backend"])
    dense_ms = cells.set_index([*shape, "backend"]).index.map(dense["kernel_ms_median"].to_dict()).to_numpy()
    flex = cells[(cells["backend"] == "flex") & (cells["stages"] == "none")]
    flex_ms = cells.set_index([*shape, "method"]).index.map(
        flex.drop_duplicates([*shape, "method"]).set_index([*shape, "method"])["kernel_ms_median"].to_dict())
    flops = 4.0 * cells["seq_len_tokens"] ** 2 * cells["head_dim"] * cells["num_heads"] * cells["density"]
    table = cells.assign(
        effective_tflops=flops / (cells["kernel_ms_median"] * 1e-3) / 1e12,
        net_speedup_vs_flex_original=flex_ms.to_numpy() / (cells["kernel_ms_median"] + cells["reorder_ms"]),
        gap_to_bound=(1.0 / cells["density"]) / (dense_ms / cells["kernel_ms_median"]),
        dram_read_gb=cells["ncu_dram_read_bytes"] / 1e9 if "ncu_dram_read_bytes" in cells else float("nan"))
    columns = ["hardware", "seq_len_tokens", "method", "backend", "backend_params", "stages", "density",
               "kernel_ms_median", "reorder_ms", "net_speedup_vs_original", "net_speedup_vs_flex_original",
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
