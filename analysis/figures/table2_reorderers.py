"""Table II as bars: each launch order's speedup over the original, reorder counted and kernel alone."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from analysis.figures.common import (
    OVER_ORIGINAL,
    footnote,
    note_rows,
    noted_figure,
)
from analysis.plotting import (
    SIMULATED_HATCH,
    badge_simulated,
    draw_intervals,
    label,
    mark_verdicts,
    panel_grid,
    variant_color,
)
from analysis.tables import (
    table2,
)
from wavealign import reorderers
from wavealign.records import NO_REORDERER

REORDERERS_TITLE = "Reorderers: speedup over the original, reorder counted (bar) and kernel alone (tick) (Table II)"


def reorderer_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Table II's figure's rows: Table II's (``tables.table2``) but the original's own, each a panel's bar (the
    speedup with the reorder counted) and tick (the kernel's), with their intervals and verdicts."""
    table = table2(frame)
    if "note" in table:
        return note_rows(table["note"][0])
    table = table[table["order"] != reorderers.get(NO_REORDERER).label]
    if table.empty or table["order"].nunique() < 2:
        return note_rows("fewer than two reordered launch orders: nothing to compare")
    return table.assign(speedup_over=OVER_ORIGINAL).reset_index(drop=True)


def draw_reorderers(rows: pd.DataFrame) -> Figure:
    """Table II's figure from its rows: one panel per hardware, backend, method, workload, head count, length and
    source (measured or simulated) that has cells, each launch order's bar (reorder counted) and tick (kernel alone),
    each with its interval as an error bar where it has one, a same or ambiguous net verdict marked beside its bar
    (``plotting.mark_verdicts``), and simulated panels hatched and titled so."""
    if (noted := noted_figure(rows, REORDERERS_TITLE)) is not None:
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
                color=[to_rgba(technique_color(o), 1.0 if _with_stage2(o) else 0.45)
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
    footnote(fig)
    return fig


def reorderer_comparison(frame: pd.DataFrame) -> Figure:
    """Table II as bars: per panel, each launch order's speedup over the original with the reorder counted (bar) and
    of the kernel alone (tick), with their intervals, same/ambiguous marks, and simulated panels hatched."""
    return draw_reorderers(reorderer_rows(frame))


def technique_color(order: str) -> str:
    """A Table II launch order (``tables.order_label``: ``MinHash``, ``MinHash+S2``) in its reorderer's colour
    (``Reorderer.color``); a reorderer without one, or that this code lacks, in the colour its name fixes."""
    for entry in map(reorderers.get, reorderers.names()):
        if order in (entry.label, entry.staged_label) and entry.color is not None:
            return entry.color
    return variant_color(order.removesuffix("+S2"))


def _with_stage2(order: str) -> bool:
    """Whether a Table II launch order runs Stage 2 after its grouping (drawn full; the grouping alone pale)."""
    staged = {entry.staged_label for entry in map(reorderers.get, reorderers.names())}
    return order in staged or order.endswith("+S2")
