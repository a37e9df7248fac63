"""The paper's figures from a results frame (``wavealign.analysis.load``): one function per figure, each returning a
matplotlib Figure drawn only from the cells present, with a note in any panel that lacks data.

``FIGURES`` lists them in report order: ``{name: function}``; every function takes the frame alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import numpy as np
import pandas as pd
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from wavealign import hardware as hardware_registry
from wavealign import masks, metrics, variants
from wavealign.analysis.load import with_derived_columns
from wavealign.analysis.plotting import (
    NO_CELLS,
    NOTE_COLOR,
    SIMULATED_HATCH,
    STAGE_LABELS,
    VARIANT_COLORS,
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
)
from wavealign.analysis.rebuild import RebuiltHead, rebuild_head
from wavealign.analysis.tables import order_label, table2, with_intervals
from wavealign.records import DEFAULT_REORDERER, NO_REORDERER, ORIGINAL_VARIANT, order_name

ORIGINAL = ORIGINAL_VARIANT
DENSE = "dense"
BYTES_HINT = "needs Nsight Compute counters (measure ncu)\nor simulated cells (measure simulated)"
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive")


def _cells(frame: pd.DataFrame) -> pd.DataFrame:
    """Finished cells with a ``_sim`` flag column and the derived columns of ``wavealign.analysis.load``."""
    cells = done_cells(frame)
    if "seq_k" not in cells:
        cells = with_derived_columns(cells)
    return cells.assign(_sim=is_simulated(cells))


def _seq_ticks(ax, seqs: list[float]) -> None:
    ax.set_xticks(range(len(seqs)))
    ax.set_xticklabels([f"{s:g}K" for s in seqs], fontsize=8)
    ax.set_xlabel("sequence length (tokens)")


def speedup_vs_bound(frame: pd.DataFrame) -> Figure:
    """Fig. 2: per method, the compute-proportional bound 1/rho against the measured dense/sparse kernel
    time ratio (same hardware, backend, workload and length), both in the original row order."""
    title = "Upper bound 1/ρ vs actual speedup over dense (Fig. 2)"
    need = ("hardware", "backend", "method", "variant", "seq_len_tokens", "density", "kernel_ms_median")
    if missing := missing_columns(frame, need):
        return note_figure(title, missing_note(missing))
    cells = _cells(frame)
    if cells.empty:
        return note_figure(title, NO_CELLS)
    originals = cells[cells["variant"] == ORIGINAL]
    dense, sparse = originals[originals["method"] == DENSE], originals[originals["method"] != DENSE]
    methods = sorted(sparse["method"].unique())
    if not methods:
        return note_figure(title, "no sparse-method cells in the original order")
    keys = ["hardware", "backend", "seq_len_tokens"] + (["workload"] if "workload" in cells else [])
    baseline = dense.drop_duplicates(keys)[[*keys, "kernel_ms_median"]].rename(
        columns={"kernel_ms_median": "dense_ms"})
    paired = {m: sparse[sparse["method"] == m].merge(baseline, on=keys) for m in methods}
    drawn = [m for m in methods if not paired[m].empty]
    hint = ("no dense baseline cell of the same hardware, backend and length (method=dense, variant=original): "
            "add the sweep's dense_baseline grid")
    if not drawn:
        return note_figure(title, f"{', '.join(methods)}: {hint.replace(': ', ':' + chr(10))}")
    fig, axes = panel_grid(1, len(drawn))
    for ax, method in zip(axes[0], drawn, strict=True):
        ax.set_title(method)
        pairs = paired[method]
        pairs = pairs.assign(bound=metrics.bound_speedup(pairs["density"]),
                             actual=metrics.speedup(pairs["dense_ms"], pairs["kernel_ms_median"]))
        for i, ((hw, backend, sim), part) in enumerate(pairs.groupby(["hardware", "backend", "_sim"])):
            by_len = part.groupby("seq_k")[["bound", "actual"]].mean()
            color = COLORS[i % len(COLORS)]
            style = line_style(bool(sim))
            ax.plot(by_len.index, by_len["bound"], marker="^", color=color, **{**style, "linestyle": ":"},
                    label=label(f"{hw}/{backend} 1/ρ", bool(sim)))
            ax.plot(by_len.index, by_len["actual"], marker="o", color=color, **style,
                    label=label(f"{hw}/{backend} actual", bool(sim)))
            if sim:
                badge_simulated(ax)
        _log_scale(ax, "y")
        ax.set_xlabel("sequence length (K tokens)")
        ax.set_ylabel("speedup over dense")
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    if len(drawn) < len(methods):
        _footnote(fig, f"not drawn: {', '.join(m for m in methods if m not in drawn)} ({hint})")
    return fig


def _flops(cells: pd.DataFrame) -> pd.Series:
    """Attention forward FLOPs the mask leaves (``wavealign.metrics.attention_flops``), per cell."""
    return metrics.attention_flops(cells["seq_len_tokens"], cells["seq_len_tokens"], cells["head_dim"],
                                   cells["num_heads"], cells["density"])


def roofline(frame: pd.DataFrame) -> Figure:
    """Fig. 3/15: achieved TFLOP/s against operational intensity (FLOPs per DRAM byte, from Nsight Compute
    or the simulator), under the compute and HBM roofs of each cell's hardware."""
    title = "Roofline (Fig. 3 / 15)"
    need = ("hardware", "method", "seq_len_tokens", "head_dim", "num_heads", "density", "kernel_ms_median")
    if missing := missing_columns(frame, need):
        return note_figure(title, missing_note(missing))
    cells = _cells(frame)
    if cells.empty:
        return note_figure(title, NO_CELLS)
    gpus = [hw for hw in sorted(cells["hardware"].unique()) if hw in hardware_registry.names()]
    if not gpus:
        return note_figure(title, "no cells on (or simulated for) a described GPU; hardware=cpu cells have no roofs")
    if "ncu_dram_read_bytes" in cells and cells["ncu_dram_read_bytes"].notna().any():
        dram = cells["ncu_dram_read_bytes"] + cells.get("ncu_dram_write_bytes", 0.0)
        source = "Nsight Compute DRAM bytes"
    elif "hbm_read_bytes" in cells:
        dram, source = cells["hbm_read_bytes"], "HBM read bytes"
    else:
        return note_figure(title, f"no DRAM byte counts: {BYTES_HINT}")
    cells = cells.assign(_bytes=dram, _flops=_flops(cells))
    cells = cells.assign(_intensity=metrics.operational_intensity(cells["_flops"], cells["_bytes"]),
                         _tflops=metrics.tflops(cells["_flops"], cells["kernel_ms_median"]))
    methods = sorted(cells["method"].unique())
    fig, axes = panel_grid(1, len(gpus), width=5.2, height=4.0)
    for ax, hw_name in zip(axes[0], gpus, strict=True):
        hw = hardware_registry.get(hw_name)
        ax.set_title(f"{hw.display_name}")
        part = cells[(cells["hardware"] == hw_name) & np.isfinite(cells["_intensity"]) & (cells["_bytes"] > 0)]
        if part.empty:
            note(ax, f"no {hw_name} cell has {source}:\n{BYTES_HINT}")
            continue
        ridge = hw.ridge_flops_per_byte
        lo, hi = min(part["_intensity"].min() / 10, ridge / 30), max(part["_intensity"].max() * 10, ridge * 3)
        xs = np.logspace(math.log10(lo), math.log10(hi), 200)
        ax.plot(xs, np.minimum(hw.peak_bf16_flops, hw.hbm_bytes_per_s * xs) / 1e12, color="0.2", linewidth=1.5,
                label=f"roof: {hw.peak_bf16_flops / 1e12:.0f} TFLOP/s, {hw.hbm_bytes_per_s / 1e12:.2f} TB/s")
        for i, method in enumerate(methods):
            for sim, pts in part[part["method"] == method].groupby("_sim"):
                order = (pts.assign(_label=_variant_labels(pts))["_label"] if "variant" in pts
                         else pd.Series("original", index=pts.index))
                for name in _ordered_labels(pts.assign(_label=order)) if "variant" in pts else ["original"]:
                    sel = pts[order == name]
                    ax.scatter(sel["_intensity"], sel["_tflops"], marker=_variant_marker(name), s=30,
                               facecolors="none" if sim else COLORS[i % len(COLORS)],
                               edgecolors=COLORS[i % len(COLORS)], label=label(f"{method} {name}", bool(sim)))
                if sim:
                    badge_simulated(ax)
        _log_scale(ax, "x")
        _log_scale(ax, "y")
        ax.set_xlabel(f"operational intensity (FLOP / byte; {source})")
        ax.set_ylabel("achieved TFLOP/s")
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


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
    reorderer = panel["reorderer"] if "reorderer" in panel else pd.Series(None, index=panel.index)
    labels = pd.Series([order_name(str(v), r) for v, r in zip(panel["variant"], reorderer, strict=True)],
                       index=panel.index)
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


def kernel_latency(frame: pd.DataFrame) -> Figure:
    """Fig. 9/10: kernel latency per variant (original vs WaveAlign, and head-order variants where the
    backend parameters differ), with the reorder overhead stacked on top, against sequence length, per
    hardware/backend/workload (rows) and the methods each row has (columns)."""
    title = "Kernel latency with reorder overhead stacked (Fig. 9 / 10)"
    need = ("hardware", "backend", "method", "variant", "seq_len_tokens", "kernel_ms_median")
    if missing := missing_columns(frame, need):
        return note_figure(title, missing_note(missing))
    cells = _cells(frame)
    if cells.empty:
        return note_figure(title, NO_CELLS)
    if "workload" not in cells:
        cells = cells.assign(workload="")
    # one row per workload too (a 4-head and a 40-head workload of one method are not one panel's bars), and per
    # simulated or measured (a backend's predicted launch is not its timed one); in a row only the methods it has
    rows = {key: sorted(part["method"].unique())
            for key, part in cells.groupby(["hardware", "backend", "_sim", "workload"])}
    many = cells["workload"].nunique() > 1
    fig, axes = panel_grid(len(rows), max(len(methods) for methods in rows.values()))
    for ((hw, backend, simulated, workload), methods), axes_row in zip(sorted(rows.items()), axes, strict=True):
        for ax in axes_row[len(methods):]:
            ax.set_visible(False)
        for ax, method in zip(axes_row, methods, strict=False):
            ax.set_title(f"{hw} / {backend} / {method}" + (f"\n{workload}" if many else ""), fontsize=9)
            panel = cells[(cells["hardware"] == hw) & (cells["backend"] == backend) & (cells["method"] == method)
                          & (cells["workload"] == workload) & (cells["_sim"] == simulated)]
            panel = panel.assign(_label=_variant_labels(panel))
            if "reorder_ms" not in panel:  # older results: draw the kernel time alone
                panel = panel.assign(reorder_ms=0.0)
            seqs = sorted(panel["seq_k"].unique())
            labels = _ordered_labels(panel)
            width = 0.8 / len(labels)
            for j, name in enumerate(labels):
                part = panel[panel["_label"] == name].groupby("seq_k").agg(
                    kernel=("kernel_ms_median", "median"), reorder=("reorder_ms", "median"), sim=("_sim", "any"))
                xs = [seqs.index(s) + (j - (len(labels) - 1) / 2) * width for s in part.index]
                sim = bool(part["sim"].any())
                color = variant_color(name)
                ax.bar(xs, part["kernel"], width, color=color, label=label(name, sim), **bar_style(sim))
                overhead = part["reorder"].fillna(0.0)
                if (overhead > 0).any():
                    ax.bar(xs, overhead, width, bottom=part["kernel"], facecolor="white", edgecolor=color,
                           hatch="..", label=f"{name}: reorder overhead")
                if sim:
                    badge_simulated(ax)
            _seq_ticks(ax, seqs)
            ax.set_ylabel("ms")
            _legend_in_corner(ax, fontsize=6)
    fig.suptitle(title)
    fig.tight_layout()
    _legends_clear_of_bars(fig)
    return fig


def reorderer_comparison(frame: pd.DataFrame) -> Figure:
    """Table II as bars: one panel per hardware, backend, method, head count, length and source (measured or
    simulated) that has cells (none drawn empty), each launch order's speedup over the original with the reorder
    counted (bar) and of the kernel alone (tick), each with its interval as an error bar where it has one, a same or
    ambiguous net verdict marked beside its bar (``plotting.mark_verdicts``), and simulated panels hatched and titled
    so."""
    title = "Reorderers: speedup over the original, reorder counted (bar) and kernel alone (tick) (Table II)"
    table = table2(frame)
    if "note" in table:
        return note_figure(title, table["note"][0])
    table = table[table["order"] != "Original"]
    if table.empty or table["order"].nunique() < 2:
        return note_figure(title, "fewer than two reordered launch orders: nothing to compare")
    keys = ["hardware", "backend", "method", "num_heads", *(["seq_len_tokens"] if "seq_len_tokens" in table else []),
            "simulated"]
    panels = sorted(table.groupby(keys).groups)
    orders = list(dict.fromkeys(table["order"]))  # table2's order: baselines, then WaveAlign
    cols = min(4, len(panels))
    fig, axes = panel_grid(-(-len(panels) // cols), cols, width=4.2, height=0.35 * len(orders) + 1.2)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, key in zip(axes.flat, panels, strict=False):
        hw, backend, method, heads, *tokens, sim = key
        ax.set_title(label(f"{hw} / {backend} / {method}, {heads} heads" + (f", {tokens[0]:,} tokens" if tokens
                                                                            else ""), bool(sim)), fontsize=9)
        panel = table[(table[keys] == pd.Series(key, index=keys)).all(axis=1)].set_index("order")
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
        ax.set_xlabel("x original", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


# Table II's techniques, one colour each; the grouping alone is drawn pale, with Stage 2 full
_TECHNIQUE_COLORS = {"Hypergraph": "tab:purple", "MinHash": "tab:brown", "LSH": "tab:olive", "Clustering": "tab:cyan",
                     "Random": "tab:pink", "Longest-first": "goldenrod", "Hilbert curve": "teal",
                     "WaveAlign": VARIANT_COLORS["wavealign"], "O": "tab:gray"}


def _technique_color(order: str) -> str:
    technique = order.removesuffix("+S2").removesuffix(" S1")
    return _TECHNIQUE_COLORS.get(technique, variant_color(technique))


def _bars_by_method(ax, cells: pd.DataFrame, value: pd.Series, stages: list[str],
                    aggregate: Callable[[pd.Series], float], ylabel: str) -> None:
    """Bars of ``value`` aggregated per method (x), one per reorder stage and source (measured or simulated) that the
    panel's cells have, centred on the method's label (a panel with two of four stages draws two bars, not four
    slots with two empty)."""
    methods = sorted(cells["method"].unique())
    slots = [(stage, sim, part) for stage in stages
             for sim, part in cells[cells["stages"] == stage].groupby("_sim")]
    width = 0.8 / max(len(slots), 1)
    for j, (stage, sim, part) in enumerate(slots):
        heights = [aggregate(value[part.index[part["method"] == m]]) for m in methods]
        xs = [i + (j - (len(slots) - 1) / 2) * width for i in range(len(methods))]
        ax.bar(xs, heights, width, color=variant_color(stage),
               label=label(STAGE_LABELS.get(stage, stage), bool(sim)), **bar_style(bool(sim)))
        if sim:
            badge_simulated(ax)
    ax.set_xticks(range(len(methods)))
    ax.set_xticklabels(methods, fontsize=8, rotation=15)
    ax.set_ylabel(ylabel)
    _legend_in_corner(ax, fontsize=7)


def _footnote(fig: Figure, text: str) -> None:
    """Say once, under the figure, which panels were left out and why (instead of drawing them empty)."""
    fig.subplots_adjust(bottom=max(fig.subplotpars.bottom, 0.12))
    fig.text(0.5, 0.01, text, ha="center", fontsize=8, color=NOTE_COLOR, wrap=True)


def _legend_in_corner(ax, fontsize: int) -> None:
    """The panel's legend in its upper left corner (``_legends_clear_of_bars`` then makes room for it)."""
    ax.legend(fontsize=fontsize, loc="upper left", ncol=2 if len(ax.get_legend_handles_labels()[1]) > 4 else 1)


def _legends_clear_of_bars(fig: Figure) -> None:
    """After layout: raise each panel's y range (a quarter at a time) until no bar lies under its legend."""
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend()
        bars = [patch for patch in ax.patches if patch.get_height() > 0]
        for _ in range(12):
            if legend is None or not any(legend.get_window_extent(renderer).overlaps(bar.get_window_extent(renderer))
                                         for bar in bars):
                break
            bottom, top = ax.get_ylim()
            ax.set_ylim(bottom, top + 0.25 * (top - bottom))


def _log_scale(ax, axis: str) -> None:
    """A log axis whose tick labels read as plain numbers (0.6, 1, 20), not 6x10^-1; between decades only when
    the axis spans at most one."""
    getattr(ax, f"set_{axis}scale")("log")
    target = getattr(ax, f"{axis}axis")

    def minor(value: float, _: int) -> str:
        low, high = sorted(target.get_view_interval())
        return f"{value:g}" if low > 0 and high / low <= 10 else ""  # wider: the decades alone stay readable

    target.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    target.set_minor_formatter(FuncFormatter(minor))


def _mean(values: pd.Series) -> float:
    kept = values.dropna()
    return float(kept.mean()) if len(kept) else math.nan


def _geomean(values: pd.Series) -> float:
    return geomean(values.tolist())


def _cache_panels(frame: pd.DataFrame, title: str, stages: list[str], with_time: bool) -> Figure:
    need = ("hardware", "method", "stages", "group_id")
    if missing := missing_columns(frame, need):
        return note_figure(title, missing_note(missing))
    cells = _cells(frame)
    if cells.empty:
        return note_figure(title, NO_CELLS)
    if "skip_mode" in cells:
        cells = cells[cells["skip_mode"] == "force"]
    cells = cells[cells["stages"].isin(stages)]
    if cells.empty or set(cells["stages"]) <= {"none"}:
        return note_figure(title, f"no cells with reorder stages {[STAGE_LABELS[s] for s in stages if s != 'none']}")
    rows, omitted = [], []  # per GPU, the panels that have figures; the ones that have none, said once below
    for hw in sorted(cells["hardware"].unique()):
        part = cells[cells["hardware"] == hw]
        l2, hbm = l2_hit_column(part), hbm_read_column(part)  # per GPU: measured here, simulated there
        panels = [("kernel time ÷ original (geomean)", "kernel_ms_median", True)] if with_time else []
        panels += [(f"L2 hit % ({l2 or 'none'})", l2, False), (f"HBM read ÷ original ({hbm or 'none'})", hbm, True)]
        drawn = [p for p in panels if p[1] is not None and p[1] in part and part[p[1]].notna().any()]
        omitted += [f"{hw} {p[0].split(' (')[0]}" for p in panels if p not in drawn]
        if drawn:
            rows.append((hw, part, drawn))
    if not rows:
        return note_figure(title, f"no L2 or HBM figures for {', '.join(sorted(cells['hardware'].unique()))}:\n"
                                  f"{BYTES_HINT}")
    fig, axes = panel_grid(len(rows), max(len(drawn) for _, _, drawn in rows))
    for (hw, part, drawn), axes_row in zip(rows, axes, strict=True):
        for ax in axes_row[len(drawn):]:
            ax.set_visible(False)
        for ax, (ylabel, column, relative) in zip(axes_row, drawn, strict=False):
            ax.set_title(f"{hw}: {ylabel.split(' (')[0]}", fontsize=9)
            value = relative_to_original(part, column) if relative else part[column]
            _bars_by_method(ax, part, value, stages, _geomean if relative else _mean, ylabel)
            if relative:
                ax.axhline(1.0, color="0.4", linewidth=0.8)
    fig.suptitle(title)
    fig.tight_layout()
    _legends_clear_of_bars(fig)
    if omitted:
        _footnote(fig, f"not drawn, no figures: {', '.join(omitted)} ({BYTES_HINT.replace(chr(10), ' ')})")
    return fig


def cache_behaviour(frame: pd.DataFrame) -> Figure:
    """Fig. 11: L2 hit ratio and HBM read normalised to the original order, per method, original vs
    WaveAlign (O+S1+S2)."""
    return _cache_panels(frame, "L2 hit ratio and normalised HBM read (Fig. 11)", ["none", "both"], False)


def ablation(frame: pd.DataFrame) -> Figure:
    """Fig. 12: Original, O+S1, O+S2, O+S1+S2: kernel time and HBM read relative to the original order,
    and L2 hit ratio, per method."""
    return _cache_panels(frame, "Ablation: Original, O+S1, O+S2, O+S1+S2 (Fig. 12)", list(STAGE_LABELS), True)


def adaptive_skip(frame: pd.DataFrame) -> Figure:
    """Fig. 13: end-to-end latency (reorder + kernel) relative to the original order, with and without the
    adaptive skip, against sequence length and density; a red x marks where the policy skipped. Each point carries its
    net speedup's interval as an error bar where it has one, and a same or ambiguous verdict is marked beside it. Each
    panel names the skip profile that decided (a ``cpu`` cell's is its ``cpu_profile`` GPU's), and every point is
    inside its axes."""
    title = "Adaptive skip: latency with and without the skip (Fig. 13)"
    need = ("hardware", "group_id", "stages", "skip_mode", "seq_len_tokens", "density", "kernel_ms_median",
            "total_ms")
    if missing := missing_columns(frame, need):
        return note_figure(title, missing_note(missing))
    cells = _cells(frame)
    if cells.empty:
        return note_figure(title, NO_CELLS)
    # latency over the original's: 1 / the record's net speedup (wavealign.metrics), its interval 1/high..1/low; a
    # row from before speedups were recorded: its total over the original's (whose total is its kernel)
    cells = with_intervals(cells)
    cells = cells.assign(_rel=(1.0 / cells["net_speedup_vs_original"]).combine_first(
                             relative_to_original(cells, "total_ms")),
                         _rel_low=1.0 / cells["net_speedup_ci_high"], _rel_high=1.0 / cells["net_speedup_ci_low"])
    always = cells[(cells["stages"] != "none") & (cells["skip_mode"] == "force") & cells["_rel"].notna()]
    adaptive = cells[(cells["skip_mode"] == "policy") & cells["_rel"].notna()]
    if always.empty and adaptive.empty:
        return note_figure(title, "no reordered cells with an original-order cell in their group")
    hardware = sorted(set(always["hardware"]) | set(adaptive["hardware"]))
    fig, axes = panel_grid(len(hardware), 2)
    for hw, axes_row in zip(hardware, axes, strict=True):
        hw_always = always[always["hardware"] == hw]
        hw_adaptive = adaptive[adaptive["hardware"] == hw]
        for ax, (x, xlabel) in zip(axes_row, (("seq_k", "sequence length (K tokens)"), ("density", "density")),
                                   strict=True):
            decided = sorted({str(p) for p in pd.concat([hw_always, hw_adaptive]).get(
                "profile_hardware", pd.Series(dtype=object)).dropna()})
            profile = f" (skip profile: {', '.join(decided)})" if decided else ""
            ax.set_title(f"{hw}{profile}: against {xlabel.split(' (')[0]}", fontsize=9)
            for sim, part in hw_always.groupby("_sim"):
                ax.scatter(part[x], part["_rel"], marker="o", facecolors="none" if sim else "tab:blue",
                           edgecolors="tab:blue", s=22, label=label("no skip (always reorder)", bool(sim)))
            for part in (hw_always, hw_adaptive):
                draw_intervals(ax, part[x], part["_rel"], part["_rel_low"], part["_rel_high"])
                mark_verdicts(ax, part[x], part["_rel"], part["net_verdict"])
            if len(hw_adaptive):
                applied = hw_adaptive["reorder_applied"].fillna(False).astype(bool) \
                    if "reorder_applied" in hw_adaptive else pd.Series(True, index=hw_adaptive.index)
                ax.scatter(hw_adaptive[x], hw_adaptive["_rel"], marker="s", facecolors="none",
                           edgecolors="tab:green", s=30, label=label("adaptive skip", bool(hw_adaptive["_sim"].any())))
                skipped = hw_adaptive[~applied]
                ax.scatter(skipped[x], skipped["_rel"], marker="x", color="tab:red", s=40, label="skipped")
            elif "skip_reorder" in hw_always and hw_always["skip_reorder"].notna().any():
                would_skip = hw_always[hw_always["skip_reorder"].fillna(True).astype(bool) == False]  # noqa: E712
                ax.scatter(would_skip[x], would_skip["_rel"], marker="x", color="tab:red", s=40,
                           label="policy would skip")
            if hw_always["_sim"].any() or (len(hw_adaptive) and hw_adaptive["_sim"].any()):
                badge_simulated(ax)
            ax.axhline(1.0, color="0.3", linewidth=0.8, linestyle="-", label="original (never reorder)")
            _log_scale(ax, "y")
            ax.margins(x=0.08, y=0.15)  # no marker cut by the frame
            ax.set_xlabel(xlabel)
            ax.set_ylabel("latency ÷ original kernel")
            ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def mask_pictures(frame: pd.DataFrame, cell_id: str | None = None, max_seq_len_tokens: int = 65_536) -> Figure:
    """Fig. 14: one head's block mask before and after reordering, in full and zoomed to the first wave.

    The mask is regenerated from the cell's recorded config with ``wavealign.inputs.build`` (the
    sweep's own mask-building code) and reordered with ``wavealign.launch_order.plan`` using the cell's stages,
    wave size and seed. Without ``cell_id``, the longest reordered cell up to ``max_seq_len_tokens``
    (building a mask from Q/K on the CPU costs time) is drawn, preferring Q/K-free synthetic masks and a
    density near 25%.
    """
    title = "Mask before and after reordering, one head (Fig. 14)"
    need = ("cell_id", "cell_json", "stages", "seq_len_tokens", "method")
    if missing := missing_columns(frame, need):
        return note_figure(title, missing_note(missing))
    cells = _cells(frame)
    if cells.empty:
        return note_figure(title, NO_CELLS)
    if cell_id is not None:
        chosen = cells[cells["cell_id"] == cell_id]
        if chosen.empty:
            return note_figure(title, f"no finished cell {cell_id!r} in the results")
    else:
        # a Q/K-free mask redraws at any length; one built from Q/K only up to max_seq_len_tokens (CPU time)
        qk_free = [m for m in cells["method"].unique() if m in masks.available() and not masks.get(m).needs_qk]
        synthetic = cells["method"].isin(qk_free)
        chosen = cells[(cells["stages"] != "none") & (cells["method"] != DENSE)
                       & (synthetic | (cells["seq_len_tokens"] <= max_seq_len_tokens))]
        if {"num_q_blocks", "wave_size"} <= set(chosen):  # a mask of one wave has no first wave to show apart
            chosen = chosen[chosen["num_q_blocks"] > chosen["wave_size"]]
        if chosen.empty:
            return note_figure(title, "no reordered cell of more than one wave to redraw (Q/K-built masks up to "
                                      f"{max_seq_len_tokens} tokens; report --mask-cell ID draws any cell)")
        # prefer Q/K-free masks, full WaveAlign, the longest sequence, then the density nearest the paper's 25%
        chosen = chosen.assign(_synthetic=chosen["method"].isin(qk_free),
                               _both=chosen["stages"] == "both",
                               _near_quarter=-(chosen["density"] - 0.25).abs() if "density" in chosen else 0.0)
        chosen = chosen.sort_values(["_synthetic", "_both", "seq_len_tokens", "_near_quarter"], ascending=False)
    config = json.loads(chosen.iloc[0]["cell_json"])
    try:
        rebuilt = rebuild_head(config)
    except Exception as exc:  # a record of older code may not rebuild with this one: say so, keep the report
        return note_figure(title, f"cannot rebuild the mask of cell {config.get('cell_id')} with this code:\n"
                                  f"{type(exc).__name__}: {str(exc)[:200]}")
    return _draw_masks(rebuilt, title)


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


FIGURES: dict[str, Callable[[pd.DataFrame], Figure]] = {
    "fig02_speedup_vs_bound": speedup_vs_bound,
    "fig03_roofline": roofline,
    "fig10_kernel_latency": kernel_latency,
    "fig11_cache_behaviour": cache_behaviour,
    "fig12_ablation": ablation,
    "fig13_adaptive_skip": adaptive_skip,
    "fig14_mask_pictures": mask_pictures,
    "table2_reorderers": reorderer_comparison,
}
