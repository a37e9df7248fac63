"""What every figure of the package shares: a figure as its rows and their drawing (``PaperFigure``), the
columns a drawn point carries, the cells a figure reads and the note it gives without them (``figure_rows``), the
launch orders' labels in one order, and the layout helpers (log axes that read, legends clear of bars, a footnote
under the figure)."""

from __future__ import annotations

import functools
import inspect
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Concatenate, ParamSpec

import numpy as np
import pandas as pd
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, Locator, LogLocator, MaxNLocator
from matplotlib.transforms import Bbox

from analysis.load import with_derived_columns
from analysis.plotting import (
    NO_CELLS,
    NOTE_COLOR,
    VERDICT_MARK_GID,
    done_cells,
    is_simulated,
    missing_columns,
    missing_note,
    note_figure,
    verdict_key,
)
from analysis.tables import (
    one_or_joined,
)
from wavealign import metrics, variants
from wavealign.records import order_name

DENSE = "dense"
BYTES_HINT = "needs Nsight Compute counters (measure ncu)\nor simulated cells (measure simulated)"
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


def note_rows(text: str) -> pd.DataFrame:
    return pd.DataFrame({NOTE: [text]})


def noted_figure(rows: pd.DataFrame, title: str) -> Figure | None:
    """The note figure of rows that are a ``NOTE``, else None."""
    return note_figure(title, str(rows[NOTE].iloc[0])) if NOTE in rows else None


def identity_columns(cells: pd.DataFrame) -> dict:
    """The identity columns of a drawn point's cells (``IDENTITY``) and their count."""
    return {**{name: one_or_joined(cells[column]) for name, column in IDENTITY.items() if column in cells},
            "cells": len(cells)}


def speedup_columns(point: metrics.Shown, over: str) -> dict:
    """A drawn speedup's ``SPEEDUP_COLUMNS``."""
    return dict(zip(SPEEDUP_COLUMNS, (over, point.point, point.low, point.high, point.verdict), strict=True))


def figure_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """Finished cells with the derived columns of ``analysis.load``, a ``_sim`` flag and, where variants are
    recorded, ``launch_order`` (``records.order_name``)."""
    cells = done_cells(frame)
    if "seq_k" not in cells:
        cells = with_derived_columns(cells)
    cells = cells.assign(_sim=is_simulated(cells))
    if "variant" not in cells:
        return cells
    reorderer = cells["reorderer"] if "reorderer" in cells else pd.Series(None, index=cells.index, dtype=object)
    return cells.assign(launch_order=[order_name(str(v), r) for v, r in zip(cells["variant"], reorderer, strict=True)])


Args = ParamSpec("Args")
Rows = Callable[Concatenate[pd.DataFrame, Args], pd.DataFrame]  # of a frame (or its cells) and other arguments


def figure_rows(*need: str) -> Callable[[Rows[Args]], Rows[Args]]:
    """Make a figure's rows of its cells (``figure_cells``) its rows of the results frame, keeping the function's
    name, docstring and parameters (the first named ``frame``): where the frame lacks a column of ``need`` or has no
    finished cell, its rows are instead the ``NOTE`` saying so. Every figure starts there; said once here, every
    figure's note reads alike."""

    def of_frame(rows_of_cells: Rows[Args]) -> Rows[Args]:
        @functools.wraps(rows_of_cells)
        def rows(frame: pd.DataFrame, *args: Args.args, **kwargs: Args.kwargs) -> pd.DataFrame:
            if missing := missing_columns(frame, need):
                return note_rows(missing_note(missing))
            cells = figure_cells(frame)
            if cells.empty:
                return note_rows(NO_CELLS)
            return rows_of_cells(cells, *args, **kwargs)

        signature = inspect.signature(rows_of_cells)
        cells_parameter, *others = signature.parameters.values()
        rows.__signature__ = signature.replace(parameters=[cells_parameter.replace(name="frame"), *others])
        return rows

    return of_frame


def kernel_reps(value: object) -> list[float]:
    """A row's ``kernel_ms_reps`` as a list (empty where none were recorded)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    return [float(v) for v in value]


def seq_ticks(ax, seqs: list[float]) -> None:
    ax.set_xticks(range(len(seqs)))
    ax.set_xticklabels([f"{s:g}K" for s in seqs], fontsize=8)
    ax.set_xlabel("sequence length (tokens)")


def variant_marker(label: str) -> str:
    """The marker of a drawn label's variant (``Variant.marker``: its first word, before a reorderer or backend
    parameters); a variant this code lacks (a sweep's own) the default one."""
    variant = variants.VARIANTS.get(label.split("[")[0].split(" ")[0])
    return variants.DEFAULT_MARKER if variant is None else variant.marker


def backend_params_of(text: object) -> dict:
    """A row's ``backend_params`` as a dict (empty where unreadable)."""
    try:
        params = json.loads(text) if isinstance(text, str) else {}
    except json.JSONDecodeError:
        return {}
    return params if isinstance(params, dict) else {}


def variant_labels(panel: pd.DataFrame) -> pd.Series:
    """The variant name (with its reorderer where that is not WaveAlign's Stage 1), plus the backend parameters that
    differ within the panel (e.g. the kernel's ``head_order``: the head-order variants O+Seq / O+WA of Fig. 9)."""
    labels = panel["launch_order"]
    if "backend_params" not in panel:
        return labels
    params = panel["backend_params"].map(backend_params_of)
    keys = sorted({k for p in params for k in p})
    varying = [k for k in keys if len({json.dumps(p.get(k), sort_keys=True) for p in params}) > 1]
    if not varying:
        return labels
    return labels + " " + params.map(lambda p: ",".join(f"{k}={p.get(k)}" for k in varying))


# the order variants are drawn in, in every panel: the baseline first, then the paper's ablation order
VARIANT_ORDER = {name: i for i, name in enumerate(variants.VARIANTS)}


def ordered_labels(panel: pd.DataFrame) -> list[str]:
    """The panel's labels in one fixed order: by variant (``VARIANT_ORDER``, others after), then by label."""
    keyed = sorted(zip(panel["variant"], panel["_label"], strict=True),
                   key=lambda vl: (VARIANT_ORDER.get(vl[0], len(VARIANT_ORDER)), vl[1]))
    return list(dict.fromkeys(label for _, label in keyed))


def footnote(fig: Figure, text: str | None = None) -> None:
    """Say once, under the figure (after its layout), what its verdict marks mean where it has any
    (``plotting.verdict_key``) and ``text``: which panels were left out and why (instead of drawing them empty)."""
    lines = [line for line in (verdict_key(fig), text) if line]
    if not lines:
        return
    width_in, height_in = fig.get_size_inches()
    rows = sum(math.ceil(len(line) * 0.068 / (0.9 * width_in)) for line in lines)  # 8 pt: about 0.068 in a glyph
    fig.subplots_adjust(bottom=fig.subplotpars.bottom + (0.05 + 0.15 * rows) / height_in)
    fig.text(0.5, 0.005, "\n".join(lines), ha="center", va="bottom", fontsize=8, color=NOTE_COLOR, wrap=True)


def legend_in_corner(ax, fontsize: int) -> None:
    """The panel's legend in its upper left corner (``legends_clear_of_bars`` then makes room for it)."""
    ax.legend(fontsize=fontsize, loc="upper left", ncol=2 if len(ax.get_legend_handles_labels()[1]) > 4 else 1)


def legends_clear_of_bars(fig: Figure) -> None:
    """After layout: raise each panel's y range (a quarter at a time) until no bar, whisker or verdict mark lies
    under its legend or above its top."""
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend()
        drawn = [*(patch for patch in ax.patches if patch.get_height() > 0),
                 *(text for text in ax.texts if text.get_gid() == VERDICT_MARK_GID)]
        for _ in range(12):
            frame = ax.get_window_extent(renderer)
            extents = [item.get_window_extent(renderer) for item in drawn] + whisker_extents(ax)
            if not any(extent.y1 > frame.y1 for extent in extents) and (
                    legend is None or not any(legend.get_window_extent(renderer).overlaps(e) for e in extents)):
                break
            bottom, top = ax.get_ylim()
            ax.set_ylim(bottom, top + 0.25 * (top - bottom))


class ReadableLogLocator(Locator):
    """Ticks of a log axis: the decades where it spans more than one (``LogLocator``), else about five round
    numbers across what it shows (0.9, 0.95, 1, 1.05): a narrow range, such as speedups near 1, has no decade or
    minor log tick above 1 to label."""

    def __call__(self) -> list[float]:
        low, high = sorted(self.axis.get_view_interval())
        if low > 0 and high / low <= 10:
            return [t for t in MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]).tick_values(low, high)
                    if low <= t <= high]
        return list(LogLocator().tick_values(low, high))


def whisker_extents(ax) -> list[Bbox]:
    """Each error bar's whisker (``draw_intervals``' line segments) in display coordinates, as a box: a line
    collection has no window extent of its own to ask for."""
    boxes = []
    for collection in ax.collections:
        if isinstance(collection, LineCollection):
            boxes += [Bbox.from_extents(*ax.transData.transform(np.asarray(segment)).min(0),
                                        *ax.transData.transform(np.asarray(segment)).max(0))
                      for segment in collection.get_segments() if len(segment)]
    return boxes


def log_scale(ax, axis: str) -> None:
    """A log axis whose ticks read as plain numbers (0.6, 1, 20), not 6x10^-1, with labelled ticks across a
    narrow range too (``ReadableLogLocator``)."""
    getattr(ax, f"set_{axis}scale")("log")
    target = getattr(ax, f"{axis}axis")
    target.set_major_locator(ReadableLogLocator())
    target.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    target.set_minor_formatter(FuncFormatter(lambda value, _: ""))
