"""Fig. 9 / 10: kernel latency per launch order with its 95 % interval and the reorder overhead stacked."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.figures.common import (
    OVER_ORIGINAL,
    figure_rows,
    footnote,
    identity_columns,
    kernel_reps,
    legend_in_corner,
    legends_clear_of_bars,
    noted_figure,
    ordered_labels,
    seq_ticks,
    speedup_columns,
    variant_labels,
)
from analysis.plotting import (
    badge_simulated,
    bar_style,
    draw_intervals,
    label,
    mark_verdicts,
    panel_grid,
    variant_color,
    whisker_tops,
)
from analysis.tables import (
    shown,
    with_speedups,
)
from wavealign import metrics

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


@figure_rows("hardware", "backend", "method", "variant", "seq_len_tokens", "kernel_ms_median")
def kernel_latency_rows(cells: pd.DataFrame) -> pd.DataFrame:
    """Fig. 9/10's rows: one per bar, per hardware/backend/source/workload (a panel row), method (a panel), launch
    order's label and length: the median kernel ms of the cells' reps with its 95 % interval (``median_interval``;
    without reps, a prediction, the cells' median and no interval), their median reorder ms, and the speedup over the
    original with its interval and verdict (``tables.shown``: the summary's rule)."""
    cells = with_speedups(cells.assign(**{c: cells.get(c, default) for c, default in (
        ("workload", ""), ("reorder_ms", 0.0), ("kernel_ms_reps", None))}))  # older results: kernel time alone
    rows = []
    # one panel row per workload too (a 4-head and a 40-head workload of one method are not one panel's bars), and
    # per simulated or measured (a backend's predicted launch is not its timed one); in a row only its methods
    for _, panel in cells.groupby(["hardware", "backend", "_sim", "workload", "method"]):
        panel = panel.assign(_label=variant_labels(panel))
        for name in ordered_labels(panel):
            for seq_k, part in panel[panel["_label"] == name].groupby("seq_k"):
                reps = [t for value in part["kernel_ms_reps"] for t in kernel_reps(value)]
                median, low, high = median_interval(reps) if reps else \
                    (part["kernel_ms_median"].median(), math.nan, math.nan)
                rows.append({"label": name, "seq_k": seq_k, **identity_columns(part),
                             "kernel_ms": median, "kernel_ms_ci_low": low,
                             "kernel_ms_ci_high": high, "reorder_ms": part["reorder_ms"].median(),
                             **speedup_columns(shown(part), OVER_ORIGINAL)})
    return pd.DataFrame(rows)


def draw_kernel_latency(rows: pd.DataFrame) -> Figure:
    """Fig. 9/10 from its rows: per panel, a bar per launch order and length with its 95 % interval as whiskers, the
    reorder overhead stacked on top, a same or ambiguous speedup over the original marked above its bar and whisker,
    simulated bars hatched."""
    if (noted := noted_figure(rows, LATENCY_TITLE)) is not None:
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
            seq_ticks(ax, seqs)
            ax.set_ylabel(LATENCY_AXIS, fontsize=8)
            legend_in_corner(ax, fontsize=6)
    fig.suptitle(LATENCY_TITLE)
    fig.tight_layout()
    legends_clear_of_bars(fig)
    footnote(fig)
    return fig


def kernel_latency(frame: pd.DataFrame) -> Figure:
    """Fig. 9/10: kernel latency per variant (original vs WaveAlign, and head-order variants where the backend
    parameters differ), with its median's 95 % interval and the reorder overhead stacked on top, against sequence
    length, per hardware/backend/workload (rows) and the methods each row has (columns); a same or ambiguous speedup
    over the original is marked above its bar."""
    return draw_kernel_latency(kernel_latency_rows(frame))
