"""Fig. 11: L2 hit and HBM read over the original's, original vs O+S1+S2; its panels (``cache_rows``,
``draw_cache_panels``) are Fig. 12's too, which adds the kernel's speedup and every stage set."""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure

from analysis.figures.common import (
    BYTES_HINT,
    FOOTNOTE,
    OVER_ORIGINAL,
    SPEEDUP_COLUMNS,
    figure_rows,
    footnote,
    identity_columns,
    legend_in_corner,
    legends_clear_of_bars,
    note_rows,
    noted_figure,
    speedup_columns,
)
from analysis.plotting import (
    STAGE_LABELS,
    badge_simulated,
    bar_style,
    draw_intervals,
    geomean,
    hbm_read_column,
    l2_hit_column,
    label,
    mark_verdicts,
    panel_grid,
    relative_to_original,
    row_variants,
    variant_color,
    whisker_tops,
)
from analysis.tables import (
    shown,
    with_speedups,
)
from wavealign import metrics, variants
from wavealign.records import DEFAULT_REORDERER, NO_REORDERER


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


@figure_rows("hardware", "method", "stages", "group_id")
def cache_rows(cells: pd.DataFrame, stages: list[str], with_time: bool) -> pd.DataFrame:
    """The rows of Fig. 11/12: per GPU (a panel row), figure (a panel: the kernel's speedup over the original with
    ``with_time``, L2 hit %, HBM read over the original's), method and reorder stage set with source (a bar): the bar's
    value (the speedup by ``tables.shown`` with its interval and verdict; the mean L2 hit; the geometric mean of the
    HBM reads' ratios); ``attrs[FOOTNOTE]`` the panels left out for want of figures."""
    if "skip" in cells:
        cells = cells[row_variants(cells).map(lambda v: v.skip == "force").astype(bool)]
    cells = _own_orders(cells[cells["stages"].isin(stages)])
    if cells.empty or not row_variants(cells).map(lambda v: v.reorders).any():
        reordering = [STAGE_LABELS[s] for s in stages if variants.get(variants.forced(s)).reorders]
        return note_rows(f"no cells with reorder stages {reordering}")
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
                    rows.append({"panel": ylabel, "stage": stage, **identity_columns(bar),
                                 **_cache_value(part, bar, column, hbm)})
    if not rows:
        return note_rows(f"no L2 or HBM figures for {', '.join(sorted(cells['hardware'].unique()))}:\n{BYTES_HINT}")
    out = pd.DataFrame(rows)
    if omitted:
        out.attrs[FOOTNOTE] = f"not drawn, no figures: {', '.join(omitted)} ({BYTES_HINT.replace(chr(10), ' ')})"
    return out


def _cache_value(part: pd.DataFrame, bar: pd.DataFrame, column: str, hbm: str | None) -> dict:
    """A cache figure's bar of the cells ``bar`` (of one GPU's cells ``part``): its drawn ``value`` and its
    ``SPEEDUP_COLUMNS`` (the kernel's speedup by ``tables.shown``; none for an L2 hit or an HBM ratio)."""
    if column == "speedup_vs_original":
        speedup = speedup_columns(shown(bar), OVER_ORIGINAL)
        return {"value": speedup["speedup"], **speedup}
    value = geomean(relative_to_original(part, column)[bar.index].tolist()) if column == hbm else _mean(bar[column])
    return {"value": value, **dict(zip(SPEEDUP_COLUMNS, (None, math.nan, math.nan, math.nan, metrics.NO_VERDICT),
                                       strict=True))}


def draw_cache_panels(rows: pd.DataFrame, title: str, stages: list[str]) -> Figure:
    """Fig. 11/12 from their rows: per GPU a row of panels, in each a bar per method and stage set with source,
    speedups with their intervals and same/ambiguous marks, ratios over a line at 1."""
    if (noted := noted_figure(rows, title)) is not None:
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
    legends_clear_of_bars(fig)
    footnote(fig, rows.attrs.get(FOOTNOTE))
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
    legend_in_corner(ax, fontsize=7)


CACHE_TITLE = "L2 hit ratio and normalised HBM read (Fig. 11)"
CACHE_STAGES = ["none", "both"]  # the original order and O+S1+S2
def cache_behaviour_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Fig. 11's rows (``cache_rows``): L2 hit and HBM read over the original's, original vs O+S1+S2."""
    return cache_rows(frame, CACHE_STAGES, with_time=False)


def draw_cache_behaviour(rows: pd.DataFrame) -> Figure:
    return draw_cache_panels(rows, CACHE_TITLE, CACHE_STAGES)


def cache_behaviour(frame: pd.DataFrame) -> Figure:
    """Fig. 11: L2 hit ratio and HBM read normalised to the original order, per method, original vs
    WaveAlign (O+S1+S2)."""
    return draw_cache_behaviour(cache_behaviour_rows(frame))
