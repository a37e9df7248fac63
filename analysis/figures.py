"""The paper's figures from a results frame (``wavealign.analysis.load``). Each figure is two steps: one function
builds the rows it draws (``PaperFigure.rows``: a DataFrame, one row per drawn point or bar, with the cells it stands
for), and one draws exactly those rows (``PaperFigure.draw``), so that the report writes beside each figure the table
of what it drew (``<figure>.csv``) and no figure computes a number its table lacks. A figure lacking its data is a
note (``plotting.note_figure``); its rows are then one ``NOTE``.

Every speedup a figure draws carries its 95 % interval as an error bar where it has one, and a same or ambiguous
verdict is marked beside it (``plotting.mark_verdicts``); over several cells the speedup, its interval and verdict
follow ``metrics.AGGREGATE_RULE`` (``tables.shown``), the sweep summary's rule, so a bar and the summary's line of the
same cells read alike. Simulated cells are drawn hatched, dashed or hollow and labelled "simulated".

``FIGURES`` lists them in report order: ``{name: PaperFigure}``; each is called with the frame alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, Locator, LogLocator, MaxNLocator
from matplotlib.transforms import Bbox

from wavealign import hardware as hardware_registry
from wavealign import masks, metrics, reorderers, variants
from wavealign.analysis.load import with_derived_columns
from wavealign.analysis.plotting import (
    NO_CELLS,
    NOTE_COLOR,
    SIMULATED_HATCH,
    STAGE_LABELS,
    VERDICT_MARK_GID,
    badge_simulated,
    bar_style,
    done_cells,
    draw_intervals,
    geomean,
    hbm_read_column,
    is_simulated,
    l2_hit_column,
    label,
    line_style,
    mark_verdicts,
    missing_columns,
    missing_note,
    note,
    note_figure,
    panel_grid,
    relative_to_original,
    variant_color,
    verdict_key,
    whisker_tops,
)
from wavealign.analysis.rebuild import RebuiltHead, rebuild_head
from wavealign.analysis.tables import NET, one_or_joined, order_label, shown, table2, tolerance, with_speedups
from wavealign.records import CPU, DEFAULT_REORDERER, NO_REORDERER, ORIGINAL_VARIANT, order_name

ORIGINAL = ORIGINAL_VARIANT
DENSE = "dense"
BYTES_HINT = "needs Nsight Compute counters (measure ncu)\nor simulated cells (measure simulated)"
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive")
NOTE = "note"  # the one column of a figure's rows when it has nothing to draw: why
FOOTNOTE = "footnote"  # rows.attrs key: what the figure leaves out and why, said once under it
# what a drawn point stands for, as columns of its rows: each identity column of its cells (their one value, or their
# values joined where they differ; variant is the launch order's name, records.order_name), then how many cells
IDENTITY = {"hardware": "hardware", "backend": "backend", "method": "method", "workload": "workload",
            "seq_len_tokens": "seq_len_tokens", "variant": "launch_order", "simulated": "_sim"}
# a drawn speedup: over what, its point, its interval at metrics.LEVEL (NaN where none) and its verdict
SPEEDUP_COLUMNS = ("speedup_over", "speedup", "speedup_ci_low", "speedup_ci_high", "verdict")
OVER_ORIGINAL = "original"  # the kernel's speedup over its group's original variant: the summary's
OVER_ORIGINAL_NET = "original, reorder counted"
OVER_DENSE = "dense"


@dataclass(frozen=True)
class PaperFigure:
    """A figure as the rows it draws (``rows``: the results frame -> one row per drawn point or bar, or a ``NOTE``)
    and the drawing of exactly those rows (``draw``); called with a frame, it draws that frame's rows."""

    rows: Callable[[pd.DataFrame], pd.DataFrame]
    draw: Callable[[pd.DataFrame], Figure]

    def __call__(self, frame: pd.DataFrame) -> Figure:
        return self.draw(self.rows(frame))


def _note_rows(text: str) -> pd.DataFrame:
    return pd.DataFrame({NOTE: [text]})


def _noted(rows: pd.DataFrame, title: str) -> Figure | None:
    """The note figure of rows that are a ``NOTE``, else None."""
    return note_figure(title, str(rows[NOTE].iloc[0])) if NOTE in rows else None


def _identity(cells: pd.DataFrame) -> dict:
    """The identity columns of a drawn point's cells (``IDENTITY``) and their count."""
    return {**{name: one_or_joined(cells[column]) for name, column in IDENTITY.items() if column in cells},
            "cells": len(cells)}


def _speedup(point: metrics.Shown, over: str) -> dict:
    """A drawn speedup's ``SPEEDUP_COLUMNS``."""
    return dict(zip(SPEEDUP_COLUMNS, (over, point.point, point.low, point.high, point.verdict), strict=True))


def _cells(frame: pd.DataFrame) -> pd.DataFrame:
    """Finished cells with the derived columns of ``wavealign.analysis.load``, a ``_sim`` flag and, where variants are
    recorded, ``launch_order`` (``records.order_name``)."""
    cells = done_cells(frame)
    if "seq_k" not in cells:
        cells = with_derived_columns(cells)
    cells = cells.assign(_sim=is_simulated(cells))
    if "variant" not in cells:
        return cells
    reorderer = cells["reorderer"] if "reorderer" in cells else pd.Series(None, index=cells.index, dtype=object)
    return cells.assign(launch_order=[order_name(str(v), r) for v, r in zip(cells["variant"], reorderer, strict=True)])


def _reps(value: object) -> list[float]:
    """A row's ``kernel_ms_reps`` as a list (empty where none were recorded)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    return [float(v) for v in value]


def _seq_ticks(ax, seqs: list[float]) -> None:
    ax.set_xticks(range(len(seqs)))
    ax.set_xticklabels([f"{s:g}K" for s in seqs], fontsize=8)
    ax.set_xlabel("sequence length (tokens)")


def _over_dense(dense_ms: float, ms: float, dense_reps: object, reps: object, simulated: bool) -> metrics.Ratio:
    """A sparse cell's speedup over the dense cell of its shape: two samples timed apart (``metrics.independent_ratio``
    of their reps, as ``wavealign compare``), or the medians' ratio without an interval (a prediction, or no reps)."""
    dense_reps, reps = _reps(dense_reps), _reps(reps)
    if not simulated and dense_reps and reps:
        return metrics.independent_ratio(dense_reps, reps)
    return metrics.Ratio(float(metrics.speedup(dense_ms, ms)), math.nan, math.nan, 1)


FIG2_TITLE = "Upper bound 1/ρ vs actual speedup over dense (Fig. 2)"


def speedup_vs_bound_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Fig. 2's rows: per method (panel), hardware/backend (series) and length, the compute-proportional bound 1/rho
    and the kernel's speedup over the dense cell of the same hardware, backend, workload and length, both in the
    original row order (each sparse cell against its dense cell: ``_over_dense``; over several cells,
    ``metrics.AGGREGATE_RULE``)."""
    need = ("hardware", "backend", "method", "variant", "seq_len_tokens", "density", "kernel_ms_median")
    if missing := missing_columns(frame, need):
        return _note_rows(missing_note(missing))
    cells = _cells(frame)
    if cells.empty:
        return _note_rows(NO_CELLS)
    if "kernel_ms_reps" not in cells:
        cells = cells.assign(kernel_ms_reps=None)
    originals = cells[cells["variant"] == ORIGINAL]
    dense, sparse = originals[originals["method"] == DENSE], originals[originals["method"] != DENSE]
    methods = sorted(sparse["method"].unique())
    if not methods:
        return _note_rows("no sparse-method cells in the original order")
    keys = ["hardware", "backend", "seq_len_tokens"] + (["workload"] if "workload" in cells else [])
    baseline = dense.drop_duplicates(keys)[[*keys, "kernel_ms_median", "kernel_ms_reps"]].rename(
        columns={"kernel_ms_median": "dense_ms", "kernel_ms_reps": "dense_ms_reps"})
    pairs = sparse.merge(baseline, on=keys)
    drawn = [m for m in methods if (pairs["method"] == m).any()]
    hint = ("no dense baseline cell of the same hardware, backend and length (method=dense, variant=original): "
            "add the sweep's dense_baseline grid")
    if not drawn:
        return _note_rows(f"{', '.join(methods)}: {hint.replace(': ', ':' + chr(10))}")
    ratios = [_over_dense(d, ms, dr, r, bool(sim)) for d, ms, dr, r, sim in zip(
        pairs["dense_ms"], pairs["kernel_ms_median"], pairs["dense_ms_reps"], pairs["kernel_ms_reps"], pairs["_sim"],
        strict=True)]
    pairs = pairs.assign(_point=[r.point for r in ratios], _low=[r.low for r in ratios],
                         _high=[r.high for r in ratios], _bound=metrics.bound_speedup(pairs["density"]))
    rows = []
    for (method, hw, backend, sim, seq_k), part in pairs.groupby(["method", "hardware", "backend", "_sim", "seq_k"]):
        over_dense = metrics.aggregate(part["_point"], part["_low"], part["_high"], predicted=bool(sim),
                                       tolerance=tolerance(part))
        rows.append({"panel": method, "series": f"{hw}/{backend}", "seq_k": seq_k, **_identity(part),
                     "bound": part["_bound"].mean(), **_speedup(over_dense, OVER_DENSE)})
    out = pd.DataFrame(rows)
    if len(drawn) < len(methods):
        out.attrs[FOOTNOTE] = f"not drawn: {', '.join(m for m in methods if m not in drawn)} ({hint})"
    return out


def draw_speedup_vs_bound(rows: pd.DataFrame) -> Figure:
    """Fig. 2 from its rows: per method, each series' bound (dotted) and actual speedup over dense with its interval
    and verdict mark, simulated series dashed and hollow."""
    if (noted := _noted(rows, FIG2_TITLE)) is not None:
        return noted
    panels = list(dict.fromkeys(rows["panel"]))
    fig, axes = panel_grid(1, len(panels))
    for ax, method in zip(axes[0], panels, strict=True):
        ax.set_title(method)
        for i, ((series, sim), line) in enumerate(rows[rows["panel"] == method].groupby(["series", "simulated"])):
            line = line.sort_values("seq_k")
            color = COLORS[i % len(COLORS)]
            style = line_style(bool(sim))
            ax.plot(line["seq_k"], line["bound"], marker="^", color=color, **{**style, "linestyle": ":"},
                    label=label(f"{series} 1/ρ", bool(sim)))
            ax.plot(line["seq_k"], line["speedup"], marker="o", color=color, **style,
                    label=label(f"{series} actual", bool(sim)))
            draw_intervals(ax, line["seq_k"], line["speedup"], line["speedup_ci_low"], line["speedup_ci_high"],
                           color=color)
            mark_verdicts(ax, line["seq_k"], whisker_tops(line["speedup"], line["speedup_ci_high"]), line["verdict"])
            if sim:
                badge_simulated(ax)
        _log_scale(ax, "y")
        ax.set_xlabel("sequence length (K tokens)")
        ax.set_ylabel("speedup over dense (95 % CI)")
        ax.legend(fontsize=7)
    fig.suptitle(FIG2_TITLE)
    fig.tight_layout()
    _footnote(fig, rows.attrs.get(FOOTNOTE))
    return fig


def speedup_vs_bound(frame: pd.DataFrame) -> Figure:
    """Fig. 2: per method, the compute-proportional bound 1/rho against the measured dense/sparse kernel time ratio
    with its interval (same hardware, backend, workload and length), both in the original row order."""
    return draw_speedup_vs_bound(speedup_vs_bound_rows(frame))


def _flops(cells: pd.DataFrame) -> pd.Series:
    """Attention forward FLOPs the mask leaves (``wavealign.metrics.attention_flops``), per cell."""
    return metrics.attention_flops(cells["seq_len_tokens"], cells["seq_len_tokens"], cells["head_dim"],
                                   cells["num_heads"], cells["density"])


ROOFLINE_TITLE = "Roofline (Fig. 3 / 15)"
PANELS = "panels"  # rows.attrs key: the panels a figure draws, those without rows holding a note


def roofline_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Fig. 3/15's rows: one per cell on a described GPU, its achieved TFLOP/s and operational intensity (FLOPs per
    DRAM byte, from Nsight Compute or the simulator), with its method and launch order's label; ``attrs[PANELS]``
    the GPUs drawn (one panel each, under their roofs)."""
    need = ("hardware", "method", "seq_len_tokens", "head_dim", "num_heads", "density", "kernel_ms_median")
    if missing := missing_columns(frame, need):
        return _note_rows(missing_note(missing))
    cells = _cells(frame)
    if cells.empty:
        return _note_rows(NO_CELLS)
    gpus = [hw for hw in sorted(cells["hardware"].unique()) if hw in hardware_registry.names()]
    if not gpus:
        return _note_rows("no cells on (or simulated for) a described GPU; hardware=cpu cells have no roofs")
    if "ncu_dram_read_bytes" in cells and cells["ncu_dram_read_bytes"].notna().any():
        dram = cells["ncu_dram_read_bytes"] + cells.get("ncu_dram_write_bytes", 0.0)
        source = "Nsight Compute DRAM bytes"
    elif "hbm_read_bytes" in cells:
        dram, source = cells["hbm_read_bytes"], "HBM read bytes"
    else:
        return _note_rows(f"no DRAM byte counts: {BYTES_HINT}")
    cells = cells.assign(_bytes=dram, _flops=_flops(cells))
    cells = cells.assign(intensity=metrics.operational_intensity(cells["_flops"], cells["_bytes"]),
                         tflops=metrics.tflops(cells["_flops"], cells["kernel_ms_median"]))
    cells = cells[cells["hardware"].isin(gpus) & np.isfinite(cells["intensity"]) & (cells["_bytes"] > 0)]
    rows = []
    for _, part in cells.groupby(["hardware", "method", "_sim"]):
        labelled = part.assign(_label=_variant_labels(part) if "variant" in part else "original")
        for name in _ordered_labels(labelled) if "variant" in part else ["original"]:
            for _, cell in labelled[labelled["_label"] == name].iterrows():
                rows.append({"panel": cell["hardware"], "label": name, **_identity(cell.to_frame().T), "source": source,
                             "intensity": cell["intensity"], "tflops": cell["tflops"]})
    out = pd.DataFrame(rows, columns=["panel", "label", *IDENTITY, "cells", "source", "intensity", "tflops"])
    out.attrs[PANELS] = gpus
    return out


def draw_roofline(rows: pd.DataFrame) -> Figure:
    """Fig. 3/15 from its rows: per GPU, its compute and HBM roofs and each cell's point, a marker per launch order
    and a colour per method, simulated points hollow."""
    if (noted := _noted(rows, ROOFLINE_TITLE)) is not None:
        return noted
    gpus = rows.attrs[PANELS]
    methods = sorted(rows["method"].unique())
    fig, axes = panel_grid(1, len(gpus), width=5.2, height=4.0)
    for ax, hw_name in zip(axes[0], gpus, strict=True):
        hw = hardware_registry.get(hw_name)
        ax.set_title(f"{hw.display_name}")
        part = rows[rows["panel"] == hw_name]
        if part.empty:
            source = rows["source"].iloc[0] if len(rows) else "DRAM bytes"
            note(ax, f"no {hw_name} cell has {source}:\n{BYTES_HINT}")
            continue
        ridge = hw.ridge_flops_per_byte
        lo, hi = min(part["intensity"].min() / 10, ridge / 30), max(part["intensity"].max() * 10, ridge * 3)
        xs = np.logspace(math.log10(lo), math.log10(hi), 200)
        ax.plot(xs, np.minimum(hw.peak_bf16_flops, hw.hbm_bytes_per_s * xs) / 1e12, color="0.2", linewidth=1.5,
                label=f"roof: {hw.peak_bf16_flops / 1e12:.0f} TFLOP/s, {hw.hbm_bytes_per_s / 1e12:.2f} TB/s")
        for (method, sim), points in part.groupby(["method", "simulated"], sort=False):
            color = COLORS[methods.index(method) % len(COLORS)]
            for name in dict.fromkeys(points["label"]):
                sel = points[points["label"] == name]
                ax.scatter(sel["intensity"], sel["tflops"], marker=_variant_marker(name), s=30,
                           facecolors="none" if sim else color, edgecolors=color,
                           label=label(f"{method} {name}", bool(sim)))
            if sim:
                badge_simulated(ax)
        _log_scale(ax, "x")
        _log_scale(ax, "y")
        ax.set_xlabel(f"operational intensity (FLOP / byte; {part['source'].iloc[0]})")
        ax.set_ylabel("achieved TFLOP/s")
        ax.legend(fontsize=7)
    fig.suptitle(ROOFLINE_TITLE)
    fig.tight_layout()
    return fig


def roofline(frame: pd.DataFrame) -> Figure:
    """Fig. 3/15: achieved TFLOP/s against operational intensity (FLOPs per DRAM byte, from Nsight Compute
    or the simulator), under the compute and HBM roofs of each cell's hardware."""
    return draw_roofline(roofline_rows(frame))


# one marker per launch order, the same in every panel: the variants in their fixed order, then any other label
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


def _variant_marker(name: str) -> str:
    variant = name.split("[")[0].split(" ")[0]
    index = _VARIANT_ORDER.get(variant, len(_VARIANT_ORDER) + sum(map(ord, name)) % 3)
    return _MARKERS[index % len(_MARKERS)]


def _params(text: object) -> dict:
    try:
        params = json.loads(text) if isinstance(text, str) else {}
    except json.JSONDecodeError:
        return {}
    return params if isinstance(params, dict) else {}


def _variant_labels(panel: pd.DataFrame) -> pd.Series:
    """The variant name (with its reorderer where that is not WaveAlign's Stage 1), plus the backend parameters that
    differ within the panel (e.g. the kernel's ``head_order``: the head-order variants O+Seq / O+WA of Fig. 9)."""
    labels = panel["launch_order"]
    if "backend_params" not in panel:
        return labels
    params = panel["backend_params"].map(_params)
    keys = sorted({k for p in params for k in p})
    varying = [k for k in keys if len({json.dumps(p.get(k), sort_keys=True) for p in params}) > 1]
    if not varying:
        return labels
    return labels + " " + params.map(lambda p: ",".join(f"{k}={p.get(k)}" for k in varying))


# the order variants are drawn in, in every panel: the baseline first, then the paper's ablation order
_VARIANT_ORDER = {name: i for i, name in enumerate(variants.VARIANTS)}


def _ordered_labels(panel: pd.DataFrame) -> list[str]:
    """The panel's labels in one fixed order: by variant (``_VARIANT_ORDER``, others after), then by label."""
    keyed = sorted(zip(panel["variant"], panel["_label"], strict=True),
                   key=lambda vl: (_VARIANT_ORDER.get(vl[0], len(_VARIANT_ORDER)), vl[1]))
    return list(dict.fromkeys(label for _, label in keyed))


LATENCY_TITLE = "Kernel latency with reorder overhead stacked (Fig. 9 / 10)"
LATENCY_AXIS = "kernel ms (median, 95 % CI)"


def median_interval(values: list[float], level: float = metrics.LEVEL) -> tuple[float, float, float]:
    """The median of ``values`` and its distribution-free interval at ``level``: the order statistics x_(k) and
    x_(n+1-k) of the largest k with P(Binomial(n, 1/2) < k) <= (1 - level) / 2, so the whisker of a latency bar is
    a 95 % interval as every speedup's is (NaN bounds with too few values for one: fewer than 6 at 95 %)."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return math.nan, math.nan, math.nan
    median = float(np.median(ordered))
    tail, k = 0.0, 0
    while k < n and tail + math.comb(n, k) / 2**n <= (1 - level) / 2:
        tail += math.comb(n, k) / 2**n
        k += 1
    if k == 0:
        return median, math.nan, math.nan
    return median, ordered[k - 1], ordered[n - k]


def kernel_latency_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Fig. 9/10's rows: one per bar, per hardware/backend/source/workload (a panel row), method (a panel), launch
    order's label and length: the median kernel ms of the cells' reps with its 95 % interval (``median_interval``;
    without reps, a prediction, the cells' median and no interval), their median reorder ms, and the speedup over the
    original with its interval and verdict (``tables.shown``: the summary's rule)."""
    need = ("hardware", "backend", "method", "variant", "seq_len_tokens", "kernel_ms_median")
    if missing := missing_columns(frame, need):
        return _note_rows(missing_note(missing))
    cells = _cells(frame)
    if cells.empty:
        return _note_rows(NO_CELLS)
    cells = with_speedups(cells.assign(**{c: cells.get(c, default) for c, default in (
        ("workload", ""), ("reorder_ms", 0.0), ("kernel_ms_reps", None))}))  # older results: kernel time alone
    rows = []
    # one panel row per workload too (a 4-head and a 40-head workload of one method are not one panel's bars), and
    # per simulated or measured (a backend's predicted launch is not its timed one); in a row only its methods
    for _, panel in cells.groupby(["hardware", "backend", "_sim", "workload", "method"]):
        panel = panel.assign(_label=_variant_labels(panel))
        for name in _ordered_labels(panel):
            for seq_k, part in panel[panel["_label"] == name].groupby("seq_k"):
                reps = [t for value in part["kernel_ms_reps"] for t in _reps(value)]
                median, low, high = median_interval(reps) if reps else \
                    (part["kernel_ms_median"].median(), math.nan, math.nan)
                rows.append({"label": name, "seq_k": seq_k, **_identity(part),
                             "kernel_ms": median, "kernel_ms_ci_low": low,
                             "kernel_ms_ci_high": high, "reorder_ms": part["reorder_ms"].median(),
                             **_speedup(shown(part), OVER_ORIGINAL)})
    return pd.DataFrame(rows)


def draw_kernel_latency(rows: pd.DataFrame) -> Figure:
    """Fig. 9/10 from its rows: per panel, a bar per launch order and length with its 95 % interval as whiskers, the
    reorder overhead stacked on top, a same or ambiguous speedup over the original marked above its bar and whisker,
    simulated bars hatched."""
    if (noted := _noted(rows, LATENCY_TITLE)) is not None:
        return noted
    keys = ["hardware", "backend", "simulated", "workload"]
    panel_rows = {key: list(dict.fromkeys(part["method"])) for key, part in rows.groupby(keys, sort=False)}
    many = rows["workload"].nunique() > 1
    fig, axes = panel_grid(len(panel_rows), max(len(methods) for methods in panel_rows.values()))
    for ((hw, backend, simulated, workload), methods), axes_row in zip(panel_rows.items(), axes, strict=True):
        for ax in axes_row[len(methods):]:
            ax.set_visible(False)
        for ax, method in zip(axes_row, methods, strict=False):
            ax.set_title(f"{hw} / {backend} / {method}" + (f"\n{workload}" if many else ""), fontsize=9)
            panel = rows[(rows[keys] == pd.Series([hw, backend, simulated, workload], index=keys)).all(axis=1)
                         & (rows["method"] == method)]
            seqs = sorted(panel["seq_k"].unique())
            labels = list(dict.fromkeys(panel["label"]))
            width = 0.8 / len(labels)
            for j, name in enumerate(labels):
                bars = panel[panel["label"] == name]
                xs = [seqs.index(s) + (j - (len(labels) - 1) / 2) * width for s in bars["seq_k"]]
                sim = bool(simulated)
                color = variant_color(name)
                ax.bar(xs, bars["kernel_ms"], width, color=color, label=label(name, sim), **bar_style(sim))
                draw_intervals(ax, xs, bars["kernel_ms"], bars["kernel_ms_ci_low"], bars["kernel_ms_ci_high"])
                overhead = bars["reorder_ms"].fillna(0.0)
                if (overhead > 0).any():
                    ax.bar(xs, overhead, width, bottom=bars["kernel_ms"], facecolor="white", edgecolor=color,
                           hatch="..", label=f"{name}: reorder overhead")
                tops = np.fmax(bars["kernel_ms"] + overhead, whisker_tops(bars["kernel_ms"], bars["kernel_ms_ci_high"]))
                mark_verdicts(ax, xs, tops, bars["verdict"])
                if sim:
                    badge_simulated(ax)
            _seq_ticks(ax, seqs)
            ax.set_ylabel(LATENCY_AXIS, fontsize=8)
            _legend_in_corner(ax, fontsize=6)
    fig.suptitle(LATENCY_TITLE)
    fig.tight_layout()
    _legends_clear_of_bars(fig)
    _footnote(fig)
    return fig


def kernel_latency(frame: pd.DataFrame) -> Figure:
    """Fig. 9/10: kernel latency per variant (original vs WaveAlign, and head-order variants where the backend
    parameters differ), with its median's 95 % interval and the reorder overhead stacked on top, against sequence
    length, per hardware/backend/workload (rows) and the methods each row has (columns); a same or ambiguous speedup
    over the original is marked above its bar."""
    return draw_kernel_latency(kernel_latency_rows(frame))


REORDERERS_TITLE = "Reorderers: speedup over the original, reorder counted (bar) and kernel alone (tick) (Table II)"


def reorderer_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Table II's figure's rows: Table II's (``tables.table2``) but the original's own, each a panel's bar (the
    speedup with the reorder counted) and tick (the kernel's), with their intervals and verdicts."""
    table = table2(frame)
    if "note" in table:
        return _note_rows(table["note"][0])
    table = table[table["order"] != "Original"]
    if table.empty or table["order"].nunique() < 2:
        return _note_rows("fewer than two reordered launch orders: nothing to compare")
    return table.assign(speedup_over=OVER_ORIGINAL).reset_index(drop=True)


def draw_reorderers(rows: pd.DataFrame) -> Figure:
    """Table II's figure from its rows: one panel per hardware, backend, method, workload, head count, length and
    source (measured or simulated) that has cells, each launch order's bar (reorder counted) and tick (kernel alone),
    each with its interval as an error bar where it has one, a same or ambiguous net verdict marked beside its bar
    (``plotting.mark_verdicts``), and simulated panels hatched and titled so."""
    if (noted := _noted(rows, REORDERERS_TITLE)) is not None:
        return noted
    keys = [k for k in ("hardware", "backend", "method", "workload", "num_heads", "seq_len_tokens", "simulated")
            if k in rows]
    panels = sorted(rows.groupby(keys).groups)
    orders = list(dict.fromkeys(rows["order"]))  # table2's order: baselines, then WaveAlign
    many = "workload" in rows and rows["workload"].nunique() > 1
    cols = min(4, len(panels))
    fig, axes = panel_grid(-(-len(panels) // cols), cols, width=4.2, height=0.35 * len(orders) + 1.2)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, key in zip(axes.flat, panels, strict=False):
        named = dict(zip(keys, key, strict=True))
        sim = bool(named["simulated"])
        tokens = f", {named['seq_len_tokens']:,} tokens" if "seq_len_tokens" in named else ""
        workload = f"\n{named['workload']}" if many else ""
        ax.set_title(label(f"{named['hardware']} / {named['backend']} / {named['method']}, {named['num_heads']} heads"
                           f"{tokens}{workload}", sim), fontsize=9)
        panel = rows[(rows[keys] == pd.Series(key, index=keys)).all(axis=1)].set_index("order")
        panel = panel.loc[[o for o in orders if o in panel.index]]  # the launch orders this panel has cells of
        ys = np.arange(len(panel))
        ax.barh(ys, panel["speedup_with_overhead"], hatch=SIMULATED_HATCH if sim else None,
                edgecolor="0.2" if sim else None,
                color=[to_rgba(_technique_color(o), 1.0 if o == "WaveAlign" or o.endswith("+S2") else 0.45)
                       for o in panel.index])
        draw_intervals(ax, ys, panel["speedup_with_overhead"], panel["net_speedup_ci_low"],
                       panel["net_speedup_ci_high"], horizontal=True)
        ax.plot(panel["speedup"], ys, "k|", markersize=10)
        draw_intervals(ax, ys + 0.25, panel["speedup"], panel["speedup_ci_low"], panel["speedup_ci_high"],
                       horizontal=True, color="0.55")
        ends = np.fmax(panel["speedup_with_overhead"], panel["net_speedup_ci_high"].fillna(0.0))
        mark_verdicts(ax, ys, ends, panel["net_verdict"], horizontal=True)
        if sim:
            badge_simulated(ax)
        ax.axvline(1.0, color="0.4", linewidth=0.8)
        ax.set_yticks(list(ys))
        ax.set_yticklabels(list(panel.index), fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("x original (95 % CI)", fontsize=8)
    fig.suptitle(REORDERERS_TITLE)
    fig.tight_layout()
    _footnote(fig)
    return fig


def reorderer_comparison(frame: pd.DataFrame) -> Figure:
    """Table II as bars: per panel, each launch order's speedup over the original with the reorder counted (bar) and
    of the kernel alone (tick), with their intervals, same/ambiguous marks, and simulated panels hatched."""
    return draw_reorderers(reorderer_rows(frame))


def _technique_color(order: str) -> str:
    """Table II's technique of a launch order (``MinHash+S2``: MinHash) in its reorderer's colour; the grouping alone
    is drawn pale, with Stage 2 full."""
    technique = order.removesuffix("+S2")
    colors = {r.label: r.color for r in map(reorderers.get, reorderers.names()) if r.color is not None}
    colors["WaveAlign"], colors["O"] = colors.get("WaveAlign S1", variant_color("wavealign")), colors.get("Original")
    return colors.get(technique) or variant_color(technique)


def _footnote(fig: Figure, text: str | None = None) -> None:
    """Say once, under the figure (after its layout), what its verdict marks mean where it has any
    (``plotting.verdict_key``) and ``text``: which panels were left out and why (instead of drawing them empty)."""
    lines = [line for line in (verdict_key(fig), text) if line]
    if not lines:
        return
    width_in, height_in = fig.get_size_inches()
    rows = sum(math.ceil(len(line) * 0.068 / (0.9 * width_in)) for line in lines)  # 8 pt: about 0.068 in a glyph
    fig.subplots_adjust(bottom=fig.subplotpars.bottom + (0.05 + 0.15 * rows) / height_in)
    fig.text(0.5, 0.005, "\n".join(lines), ha="center", va="bottom", fontsize=8, color=NOTE_COLOR, wrap=True)


def _legend_in_corner(ax, fontsize: int) -> None:
    """The panel's legend in its upper left corner (``_legends_clear_of_bars`` then makes room for it)."""
    ax.legend(fontsize=fontsize, loc="upper left", ncol=2 if len(ax.get_legend_handles_labels()[1]) > 4 else 1)


def _legends_clear_of_bars(fig: Figure) -> None:
    """After layout: raise each panel's y range (a quarter at a time) until no bar, whisker or verdict mark lies
    under its legend or above its top."""
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend()
        drawn = [*(patch for patch in ax.patches if patch.get_height() > 0),
                 *(text for text in ax.texts if text.get_gid() == VERDICT_MARK_GID)]
        for _ in range(12):
            frame = ax.get_window_extent(renderer)
            extents = [item.get_window_extent(renderer) for item in drawn] + _whisker_extents(ax)
            if not any(extent.y1 > frame.y1 for extent in extents) and (
                    legend is None or not any(legend.get_window_extent(renderer).overlaps(e) for e in extents)):
                break
            bottom, top = ax.get_ylim()
            ax.set_ylim(bottom, top + 0.25 * (top - bottom))


class _ReadableLogLocator(Locator):
    """Ticks of a log axis: the decades where it spans more than one (``LogLocator``), else about five round
    numbers across what it shows (0.9, 0.95, 1, 1.05): a narrow range, such as speedups near 1, has no decade or
    minor log tick above 1 to label."""

    def __call__(self) -> list[float]:
        low, high = sorted(self.axis.get_view_interval())
        if low > 0 and high / low <= 10:
            return [t for t in MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]).tick_values(low, high)
                    if low <= t <= high]
        return list(LogLocator().tick_values(low, high))


def _whisker_extents(ax) -> list[Bbox]:
    """Each error bar's whisker (``draw_intervals``' line segments) in display coordinates, as a box: a line
    collection has no window extent of its own to ask for."""
    boxes = []
    for collection in ax.collections:
        if isinstance(collection, LineCollection):
            boxes += [Bbox.from_extents(*ax.transData.transform(np.asarray(segment)).min(0),
                                        *ax.transData.transform(np.asarray(segment)).max(0))
                      for segment in collection.get_segments() if len(segment)]
    return boxes


def _log_scale(ax, axis: str) -> None:
    """A log axis whose ticks read as plain numbers (0.6, 1, 20), not 6x10^-1, with labelled ticks across a
    narrow range too (``_ReadableLogLocator``)."""
    getattr(ax, f"set_{axis}scale")("log")
    target = getattr(ax, f"{axis}axis")
    target.set_major_locator(_ReadableLogLocator())
    target.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    target.set_minor_formatter(FuncFormatter(lambda value, _: ""))


def _mean(values: pd.Series) -> float:
    kept = values.dropna()
    return float(kept.mean()) if len(kept) else math.nan


SPEEDUP_PANEL = "kernel speedup over original (95 % CI)"


def _own_orders(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells whose launch order is WaveAlign's own stages (a baseline reorderer's is Table II's, not the
    ablation's); all of them in rows from before reorderers were recorded."""
    if "reorderer" not in cells:
        return cells
    return cells[cells["reorderer"].isna() | cells["reorderer"].isin([DEFAULT_REORDERER, NO_REORDERER])]


def _cache_rows(frame: pd.DataFrame, stages: list[str], with_time: bool) -> pd.DataFrame:
    """The rows of Fig. 11/12: per GPU (a panel row), figure (a panel: the kernel's speedup over the original with
    ``with_time``, L2 hit %, HBM read over the original's), method and reorder stage set with source (a bar): the bar's
    value (the speedup by ``tables.shown`` with its interval and verdict; the mean L2 hit; the geometric mean of the
    HBM reads' ratios); ``attrs[FOOTNOTE]`` the panels left out for want of figures."""
    need = ("hardware", "method", "stages", "group_id")
    if missing := missing_columns(frame, need):
        return _note_rows(missing_note(missing))
    cells = _cells(frame)
    if cells.empty:
        return _note_rows(NO_CELLS)
    if "skip" in cells:
        cells = cells[cells["skip"] == "force"]
    cells = _own_orders(cells[cells["stages"].isin(stages)])
    if cells.empty or set(cells["stages"]) <= {"none"}:
        return _note_rows(f"no cells with reorder stages {[STAGE_LABELS[s] for s in stages if s != 'none']}")
    cells = with_speedups(cells)
    rows, omitted = [], []  # per GPU, the panels that have figures; the ones that have none, said once below
    for hw in sorted(cells["hardware"].unique()):
        part = cells[cells["hardware"] == hw]
        l2, hbm = l2_hit_column(part), hbm_read_column(part)  # per GPU: measured here, simulated there
        panels = [(SPEEDUP_PANEL, "speedup_vs_original")] if with_time else []
        panels += [(f"L2 hit % ({l2 or 'none'})", l2), (f"HBM read ÷ original ({hbm or 'none'})", hbm)]
        drawn = [p for p in panels if p[1] is not None and p[1] in part and part[p[1]].notna().any()]
        omitted += [f"{hw} {p[0].split(' (')[0]}" for p in panels if p not in drawn]
        for ylabel, column in drawn:
            for stage in stages:
                for _, bar in part[part["stages"] == stage].groupby(["method", "_sim"]):
                    rows.append({"panel": ylabel, "stage": stage, **_identity(bar),
                                 **_cache_value(part, bar, column, hbm)})
    if not rows:
        return _note_rows(f"no L2 or HBM figures for {', '.join(sorted(cells['hardware'].unique()))}:\n{BYTES_HINT}")
    out = pd.DataFrame(rows)
    if omitted:
        out.attrs[FOOTNOTE] = f"not drawn, no figures: {', '.join(omitted)} ({BYTES_HINT.replace(chr(10), ' ')})"
    return out


def _cache_value(part: pd.DataFrame, bar: pd.DataFrame, column: str, hbm: str | None) -> dict:
    """A cache figure's bar of the cells ``bar`` (of one GPU's cells ``part``): its drawn ``value`` and its
    ``SPEEDUP_COLUMNS`` (the kernel's speedup by ``tables.shown``; none for an L2 hit or an HBM ratio)."""
    if column == "speedup_vs_original":
        speedup = _speedup(shown(bar), OVER_ORIGINAL)
        return {"value": speedup["speedup"], **speedup}
    value = geomean(relative_to_original(part, column)[bar.index].tolist()) if column == hbm else _mean(bar[column])
    return {"value": value, **dict(zip(SPEEDUP_COLUMNS, (None, math.nan, math.nan, math.nan, metrics.NO_VERDICT),
                                       strict=True))}


def _draw_cache_panels(rows: pd.DataFrame, title: str, stages: list[str]) -> Figure:
    """Fig. 11/12 from their rows: per GPU a row of panels, in each a bar per method and stage set with source,
    speedups with their intervals and same/ambiguous marks, ratios over a line at 1."""
    if (noted := _noted(rows, title)) is not None:
        return noted
    gpus = list(dict.fromkeys(rows["hardware"]))
    panels = {hw: list(dict.fromkeys(rows.loc[rows["hardware"] == hw, "panel"])) for hw in gpus}
    fig, axes = panel_grid(len(gpus), max(len(p) for p in panels.values()))
    for hw, axes_row in zip(gpus, axes, strict=True):
        for ax in axes_row[len(panels[hw]):]:
            ax.set_visible(False)
        for ax, ylabel in zip(axes_row, panels[hw], strict=False):
            ax.set_title(f"{hw}: {ylabel.split(' (')[0]}", fontsize=9)
            _bars_by_method(ax, rows[(rows["hardware"] == hw) & (rows["panel"] == ylabel)], stages, ylabel)
            if not ylabel.startswith("L2"):
                ax.axhline(1.0, color="0.4", linewidth=0.8)
    fig.suptitle(title)
    fig.tight_layout()
    _legends_clear_of_bars(fig)
    _footnote(fig, rows.attrs.get(FOOTNOTE))
    return fig


def _bars_by_method(ax, bars: pd.DataFrame, stages: list[str], ylabel: str) -> None:
    """A bar per row of ``bars``: per method (x), one per stage set and source (measured or simulated) the panel
    has, centred on the method's label (a panel with two of four stages draws two bars, not four slots with two
    empty), each with its interval and same/ambiguous mark where it has one."""
    methods = sorted(bars["method"].unique())
    slots = list(dict.fromkeys((s, sim) for s in stages for sim in sorted(set(bars.loc[bars["stage"] == s,
                                                                                        "simulated"]))))
    width = 0.8 / max(len(slots), 1)
    for j, (stage, sim) in enumerate(slots):
        slot = bars[(bars["stage"] == stage) & (bars["simulated"] == sim)].set_index("method").reindex(methods)
        xs = [i + (j - (len(slots) - 1) / 2) * width for i in range(len(methods))]
        ax.bar(xs, slot["value"], width, color=variant_color(stage),
               label=label(STAGE_LABELS.get(stage, stage), bool(sim)), **bar_style(bool(sim)))
        draw_intervals(ax, xs, slot["value"], slot["speedup_ci_low"], slot["speedup_ci_high"])
        mark_verdicts(ax, xs, whisker_tops(slot["value"], slot["speedup_ci_high"]), slot["verdict"])
        if sim:
            badge_simulated(ax)
    ax.set_xticks(range(len(methods)))
    ax.set_xticklabels(methods, fontsize=8, rotation=15)
    ax.set_ylabel(ylabel)
    _legend_in_corner(ax, fontsize=7)


CACHE_TITLE = "L2 hit ratio and normalised HBM read (Fig. 11)"
CACHE_STAGES = ["none", "both"]
ABLATION_TITLE = "Ablation: Original, O+S1, O+S2, O+S1+S2 (Fig. 12)"
ABLATION_STAGES = list(STAGE_LABELS)


def cache_behaviour_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Fig. 11's rows (``_cache_rows``): L2 hit and HBM read over the original's, original vs O+S1+S2."""
    return _cache_rows(frame, CACHE_STAGES, with_time=False)


def draw_cache_behaviour(rows: pd.DataFrame) -> Figure:
    return _draw_cache_panels(rows, CACHE_TITLE, CACHE_STAGES)


def cache_behaviour(frame: pd.DataFrame) -> Figure:
    """Fig. 11: L2 hit ratio and HBM read normalised to the original order, per method, original vs
    WaveAlign (O+S1+S2)."""
    return draw_cache_behaviour(cache_behaviour_rows(frame))


def ablation_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Fig. 12's rows (``_cache_rows``): the kernel's speedup over the original with its interval and verdict, L2
    hit, and HBM read over the original's, for Original, O+S1, O+S2 and O+S1+S2."""
    return _cache_rows(frame, ABLATION_STAGES, with_time=True)


def draw_ablation(rows: pd.DataFrame) -> Figure:
    return _draw_cache_panels(rows, ABLATION_TITLE, ABLATION_STAGES)


def ablation(frame: pd.DataFrame) -> Figure:
    """Fig. 12: Original, O+S1, O+S2, O+S1+S2: the kernel's speedup over the original order with its interval and
    verdict, HBM read relative to the original order, and L2 hit ratio, per method."""
    return draw_ablation(ablation_rows(frame))


SKIP_TITLE = "Adaptive skip: latency with and without the skip (Fig. 13)"
ALWAYS, ADAPTIVE = "no skip (always reorder)", "adaptive skip"


def adaptive_skip_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Fig. 13's rows: one per drawn point, a reordered cell always reordering (``ALWAYS``) or under the skip policy
    (``ADAPTIVE``): its latency (reorder + kernel) over the original's, 1 / its net speedup (the record's, by
    ``tables.shown``; from its total over the original's in rows from before speedups were recorded) with the
    interval 1/high..1/low and the speedup's verdict, its length and density, whether the policy skipped (or would
    have), and the skip profiles that decided for its GPU. A ``cpu`` cell that always reordered gets no "would skip":
    the profiles are fitted to GPUs' kernels (a cpu cell's is its ``cpu_profile`` GPU's), and their rule says
    nothing about a CPU's timings; a cpu cell under the policy shows what it did."""
    need = ("hardware", "group_id", "stages", "skip", "seq_len_tokens", "density", "kernel_ms_median",
            "total_ms")
    if missing := missing_columns(frame, need):
        return _note_rows(missing_note(missing))
    cells = _cells(frame)
    if cells.empty:
        return _note_rows(NO_CELLS)
    cells = with_speedups(cells)
    always = cells[(cells["stages"] != "none") & (cells["skip"] == "force")]
    adaptive = cells[cells["skip"] == "policy"]
    always, adaptive = (part[part["net_speedup_vs_original"].notna()] for part in (always, adaptive))
    if always.empty and adaptive.empty:
        return _note_rows("no reordered cells with an original-order cell in their group")
    rows = []
    for hw in sorted(set(always["hardware"]) | set(adaptive["hardware"])):
        hw_always, hw_adaptive = always[always["hardware"] == hw], adaptive[adaptive["hardware"] == hw]
        decided = sorted({str(p) for p in pd.concat([hw_always, hw_adaptive] if hw != CPU else [hw_adaptive]).get(
            "profile_hardware", pd.Series(dtype=object)).dropna()})
        if len(hw_adaptive):  # the policy's own cells: skipped where it did not reorder
            applied = hw_adaptive["reorder_applied"].fillna(False).astype(bool) \
                if "reorder_applied" in hw_adaptive else pd.Series(True, index=hw_adaptive.index)
            skipped = {ALWAYS: pd.Series(False, index=hw_always.index), ADAPTIVE: ~applied}
        else:  # none: where the policy would have skipped the always-reordered cells, if it was asked
            asked = hw != CPU and "skip_reorder" in hw_always and hw_always["skip_reorder"].notna().any()
            would = hw_always["skip_reorder"].fillna(True).astype(bool) == False if asked \
                else pd.Series(False, index=hw_always.index)  # noqa: E712
            skipped = {ALWAYS: would, ADAPTIVE: pd.Series(dtype=bool)}
        for series, part in ((ALWAYS, hw_always), (ADAPTIVE, hw_adaptive)):
            for index in part.index:
                cell = part.loc[[index]]
                net = shown(cell, NET)
                rows.append({"series": series, **_identity(cell), "seq_k": cell["seq_k"].iloc[0],
                             "density": cell["density"].iloc[0], "latency": 1.0 / net.point,
                             "latency_low": 1.0 / net.high, "latency_high": 1.0 / net.low,
                             **_speedup(net, OVER_ORIGINAL_NET), "skipped": bool(skipped[series][index]),
                             "skip_profiles": ", ".join(decided)})
    return pd.DataFrame(rows)


def draw_adaptive_skip(rows: pd.DataFrame) -> Figure:
    """Fig. 13 from its rows: per GPU, against length and against density, the always-reordered and the adaptive
    cells' latency over the original's with their intervals and same/ambiguous marks, a red x where the policy
    skipped (or would have), a line at the original's; every point inside its axes."""
    if (noted := _noted(rows, SKIP_TITLE)) is not None:
        return noted
    hardware = list(dict.fromkeys(rows["hardware"]))
    fig, axes = panel_grid(len(hardware), 2)
    for hw, axes_row in zip(hardware, axes, strict=True):
        points = rows[rows["hardware"] == hw]
        always, adaptive = points[points["series"] == ALWAYS], points[points["series"] == ADAPTIVE]
        decided = points["skip_profiles"].iloc[0]
        for ax, (x, xlabel) in zip(axes_row, (("seq_k", "sequence length (K tokens)"), ("density", "density")),
                                   strict=True):
            profile = f" (skip profile: {decided})" if decided else " (no skip profile: they are fitted to GPUs)" \
                if hw == CPU else ""
            ax.set_title(f"{hw}{profile}: against {xlabel.split(' (')[0]}", fontsize=9)
            for sim, part in always.groupby("simulated"):
                ax.scatter(part[x], part["latency"], marker="o", facecolors="none" if sim else "tab:blue",
                           edgecolors="tab:blue", s=22, label=label(ALWAYS, bool(sim)))
            draw_intervals(ax, points[x], points["latency"], points["latency_low"], points["latency_high"])
            mark_verdicts(ax, points[x], whisker_tops(points["latency"], points["latency_high"]), points["verdict"])
            if len(adaptive):
                ax.scatter(adaptive[x], adaptive["latency"], marker="s", facecolors="none", edgecolors="tab:green",
                           s=30, label=label(ADAPTIVE, bool(adaptive["simulated"].astype(bool).any())))
            skipped = points[points["skipped"]]
            if len(adaptive) or len(skipped):
                ax.scatter(skipped[x], skipped["latency"], marker="x", color="tab:red", s=40,
                           label="skipped" if len(adaptive) else "policy would skip")
            if points["simulated"].astype(bool).any():
                badge_simulated(ax)
            ax.axhline(1.0, color="0.3", linewidth=0.8, linestyle="-", label="original (never reorder)")
            _log_scale(ax, "y")
            ax.margins(x=0.08, y=0.15)  # no marker cut by the frame
            ax.set_xlabel(xlabel)
            ax.set_ylabel("latency ÷ original kernel (95 % CI)")
            ax.legend(fontsize=7)
    fig.suptitle(SKIP_TITLE)
    fig.tight_layout()
    _footnote(fig)
    return fig


def adaptive_skip(frame: pd.DataFrame) -> Figure:
    """Fig. 13: end-to-end latency (reorder + kernel) relative to the original order, with and without the
    adaptive skip, against sequence length and density; a red x marks where the policy skipped. Each point carries its
    net speedup's interval as an error bar where it has one, and a same or ambiguous verdict is marked beside it. Each
    panel names the skip profile that decided (a ``cpu`` cell's is its ``cpu_profile`` GPU's), and every point is
    inside its axes."""
    return draw_adaptive_skip(adaptive_skip_rows(frame))


MASK_TITLE = "Mask before and after reordering, one head (Fig. 14)"


def mask_pictures_rows(frame: pd.DataFrame, cell_id: str | None = None,
                       max_seq_len_tokens: int = 65_536) -> pd.DataFrame:
    """Fig. 14's row: the one cell whose mask it redraws (``cell_id``; without it, the longest reordered cell up to
    ``max_seq_len_tokens``, building a mask from Q/K on the CPU costs time, preferring Q/K-free synthetic masks, full
    WaveAlign and a density near 25 %), with its ``cell_json``."""
    need = ("cell_id", "cell_json", "stages", "seq_len_tokens", "method")
    if missing := missing_columns(frame, need):
        return _note_rows(missing_note(missing))
    cells = _cells(frame)
    if cells.empty:
        return _note_rows(NO_CELLS)
    if cell_id is not None:
        chosen = cells[cells["cell_id"] == cell_id]
        if chosen.empty:
            return _note_rows(f"no finished cell {cell_id!r} in the results")
    else:
        # a Q/K-free mask redraws at any length; one built from Q/K only up to max_seq_len_tokens (CPU time)
        qk_free = [m for m in cells["method"].unique() if m in masks.available() and not masks.get(m).needs_qk]
        synthetic = cells["method"].isin(qk_free)
        chosen = cells[(cells["stages"] != "none") & (cells["method"] != DENSE)
                       & (synthetic | (cells["seq_len_tokens"] <= max_seq_len_tokens))]
        if {"num_q_blocks", "wave_size"} <= set(chosen):  # a mask of one wave has no first wave to show apart
            chosen = chosen[chosen["num_q_blocks"] > chosen["wave_size"]]
        if chosen.empty:
            return _note_rows("no reordered cell of more than one wave to redraw (Q/K-built masks up to "
                              f"{max_seq_len_tokens} tokens; report --mask-cell ID draws any cell)")
        # prefer Q/K-free masks, full WaveAlign, the longest sequence, then the density nearest the paper's 25%
        chosen = chosen.assign(_synthetic=chosen["method"].isin(qk_free),
                               _both=chosen["stages"] == "both",
                               _near_quarter=-(chosen["density"] - 0.25).abs() if "density" in chosen else 0.0)
        chosen = chosen.sort_values(["_synthetic", "_both", "seq_len_tokens", "_near_quarter"], ascending=False)
    cell = chosen.iloc[[0]]
    return pd.DataFrame([{"cell_id": cell["cell_id"].iloc[0], **_identity(cell), "stages": cell["stages"].iloc[0],
                          "cell_json": cell["cell_json"].iloc[0]}])


def draw_mask_pictures(rows: pd.DataFrame) -> Figure:
    """Fig. 14 from its row: the cell's mask regenerated from its recorded config with ``wavealign.inputs.build``
    (the sweep's own mask-building code) and reordered with ``wavealign.launch_order.plan`` using the cell's stages,
    wave size and seed (``analysis.rebuild``); a note where this code cannot rebuild it."""
    if (noted := _noted(rows, MASK_TITLE)) is not None:
        return noted
    config = json.loads(rows["cell_json"].iloc[0])
    try:
        rebuilt = rebuild_head(config)
    except Exception as exc:  # a record of older code may not rebuild with this one: say so, keep the report
        return note_figure(MASK_TITLE, f"cannot rebuild the mask of cell {config.get('cell_id')} with this code:\n"
                                       f"{type(exc).__name__}: {str(exc)[:200]}")
    return _draw_masks(rebuilt, MASK_TITLE)


def mask_pictures(frame: pd.DataFrame, cell_id: str | None = None, max_seq_len_tokens: int = 65_536) -> Figure:
    """Fig. 14: one head's block mask before and after reordering, in full and zoomed to the first wave, of the
    cell ``cell_id`` or the one ``mask_pictures_rows`` chooses."""
    return draw_mask_pictures(mask_pictures_rows(frame, cell_id, max_seq_len_tokens))


def _draw_masks(rebuilt: RebuiltHead, title: str) -> Figure:
    stages, head, after = rebuilt.stages, rebuilt.head, rebuilt.after
    wave = min(rebuilt.wave_size, head.shape[1])
    fig, axes = panel_grid(2, 2, width=4.4, height=4.0)
    # WaveAlign's own stages by the paper's ablation names; a baseline by its Table II name ("MinHash+S2")
    own = rebuilt.reorderer in (DEFAULT_REORDERER, NO_REORDERER)
    reordered = STAGE_LABELS[stages] if own else order_label(stages, rebuilt.reorderer)
    for col, (name, m) in enumerate((("original order", head[0]), (f"after {reordered}", after[0]))):
        union = int(m[:wave].any(0).sum())
        axes[0][col].imshow(m.numpy(), cmap="Greys", interpolation="nearest", aspect="auto")
        axes[0][col].set_title(f"{name}: {m.shape[0]}x{m.shape[1]} blocks", fontsize=9)
        axes[1][col].imshow(m[:wave].numpy(), cmap="Greys", interpolation="nearest", aspect="auto")
        axes[1][col].set_title(f"first wave ({wave} rows): K/V union {union} blocks", fontsize=9)
        for ax in (axes[0][col], axes[1][col]):
            ax.set_xlabel("K/V block")
            ax.set_ylabel("launch slot (query block)")
    fig.suptitle(f"{title}\n{rebuilt.hardware}/{rebuilt.method} {rebuilt.seq_len_tokens} tokens, head 0 "
                 f"(regenerated with wavealign.inputs.build)", fontsize=10)
    fig.tight_layout()
    return fig


FIGURES: dict[str, PaperFigure] = {
    "fig02_speedup_vs_bound": PaperFigure(speedup_vs_bound_rows, draw_speedup_vs_bound),
    "fig03_roofline": PaperFigure(roofline_rows, draw_roofline),
    "fig10_kernel_latency": PaperFigure(kernel_latency_rows, draw_kernel_latency),
    "fig11_cache_behaviour": PaperFigure(cache_behaviour_rows, draw_cache_behaviour),
    "fig12_ablation": PaperFigure(ablation_rows, draw_ablation),
    "fig13_adaptive_skip": PaperFigure(adaptive_skip_rows, draw_adaptive_skip),
    "fig14_mask_pictures": PaperFigure(mask_pictures_rows, draw_mask_pictures),
    "table2_reorderers": PaperFigure(reorderer_rows, draw_reorderers),
}
