"""Shared drawing conventions: notes in panels that lack data, the "simulated" style, cell selection.

Every figure draws only from the cells present; a panel without what it needs says so in words
(``note``) instead of raising. Simulated cells (``simulated=True``) are drawn hatched/dashed and hollow,
and their labels say "simulated".
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable
from typing import Any

import matplotlib

matplotlib.use("Agg")  # figures are written to files; never open a window
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from wavealign import metrics, variants

STAGE_LABELS = variants.PAPER_LABELS
# One colour per reorder variant (wavealign.variants, in their order) in every figure, whatever else a panel holds; a
# stage set takes its forced variant's colour (none = original, both = wavealign). Other labels get one of the rest,
# fixed by their name.
NO_CELLS = "no finished cells in the results"  # what a figure or table without one says
VARIANT_COLORS = {name: v.color for name, v in variants.VARIANTS.items() if v.color is not None}
_OTHER_COLORS = ("tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray")
SIMULATED_LABEL = "simulated"
NOTE_COLOR = "0.35"


def missing_columns(frame: pd.DataFrame, columns: Iterable[str]) -> list[str]:
    """The ``columns`` that ``frame`` lacks."""
    return [c for c in columns if c not in frame.columns]


def done_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """Cells that finished (all rows when the frame has no ``status`` column)."""
    return frame[frame["status"] == "done"] if "status" in frame.columns else frame


def is_simulated(frame: pd.DataFrame) -> pd.Series:
    """Per row: was it simulated (False where the column is absent)."""
    if "simulated" not in frame.columns:
        return pd.Series(False, index=frame.index)
    return frame["simulated"].fillna(False).astype(bool)


def note(ax: Axes, text: str) -> None:
    """Say in the panel why it has nothing to show."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9, color=NOTE_COLOR,
            wrap=True, bbox={"boxstyle": "round", "facecolor": "0.95", "edgecolor": "0.8"})
    ax.set_xticks([])
    ax.set_yticks([])


NO_DATA_LABEL = "no data: "  # a note figure's label, then its note: the report leaves such a figure out


def note_figure(title: str, text: str) -> Figure:
    """A one-panel figure holding only a note (the whole figure lacks data); labelled ``NO_DATA_LABEL`` + the note,
    so that the report leaves it out and says why once, instead of showing an empty panel."""
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.set_title(title)
    note(ax, text)
    fig.tight_layout()
    fig.set_label(NO_DATA_LABEL + text)
    return fig


def left_out_because(fig: Figure) -> str | None:
    """Why a figure holds no data (its note), or None when it shows some."""
    text = fig.get_label()
    return text.removeprefix(NO_DATA_LABEL) if text.startswith(NO_DATA_LABEL) else None


def missing_note(columns: list[str]) -> str:
    return f"no data: the results lack column(s) {', '.join(columns)}"


def panel_grid(rows: int, cols: int, width: float = 4.6, height: float = 3.4) -> tuple[Figure, np.ndarray]:
    """A rows x cols grid of axes, always 2-D."""
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    return fig, axes


def label(text: str, simulated: bool) -> str:
    return f"{text} ({SIMULATED_LABEL})" if simulated else text


def line_style(simulated: bool) -> dict[str, Any]:
    """Lines: solid and filled for measured cells, dashed and hollow for simulated ones."""
    if simulated:
        return {"linestyle": "--", "markerfacecolor": "none", "alpha": 0.8}
    return {"linestyle": "-"}


def variant_color(name: str) -> str:
    """The fixed colour of a variant (``wavealign``), a stage set (``both``) or a variant label with backend
    parameters after it (``wavealign head_order=sequential`` takes its own, name-fixed colour)."""
    name = variants.forced(name) if name in STAGE_LABELS else name
    if name in VARIANT_COLORS:
        return VARIANT_COLORS[name]
    return _OTHER_COLORS[zlib.crc32(name.encode()) % len(_OTHER_COLORS)]


SIMULATED_HATCH = "//"


def bar_style(simulated: bool) -> dict[str, Any]:
    """Bars: solid for measured cells, hatched and lighter for simulated ones."""
    return {"hatch": SIMULATED_HATCH, "alpha": 0.55, "edgecolor": "0.2"} if simulated else {"alpha": 0.95}


# a verdict that is neither a clear win nor a clear loss (metrics.VERDICTS), marked beside its point or bar
UNCERTAIN_MARKS = {"same": "~", "ambiguous": "?"}


def verdict_mark(verdict: object) -> str:
    """The mark of a same (``~``) or ambiguous (``?``) verdict, a prediction's too; "" for any other or none."""
    if not isinstance(verdict, str):
        return ""
    return UNCERTAIN_MARKS.get(verdict.removesuffix(metrics.PREDICTED), "")


def draw_intervals(ax: Axes, positions: Iterable[float], points: Iterable[float], lows: Iterable[float],
                   highs: Iterable[float], horizontal: bool = False, color: str = "0.15") -> None:
    """Asymmetric error bars from each point's interval (``low`` below, ``high`` above), only where it has one: a
    simulated cell's or a single rep's is NaN and draws none."""
    positions, points, lows, highs = (np.asarray(list(v), dtype=float) for v in (positions, points, lows, highs))
    has = np.isfinite(lows) & np.isfinite(highs) & np.isfinite(points)
    if not has.any():
        return
    reach = np.vstack([points[has] - lows[has], highs[has] - points[has]]).clip(min=0.0)
    style = {"fmt": "none", "ecolor": color, "elinewidth": 0.9, "capsize": 2.5}
    if horizontal:
        ax.errorbar(points[has], positions[has], xerr=reach, **style)
    else:
        ax.errorbar(positions[has], points[has], yerr=reach, **style)


VERDICT_MARK_GID = "verdict-mark"  # the gid of a drawn mark, so the figure's key is drawn only where one is
VERDICT_KEY = "? ambiguous: the speedup's 95 % interval crosses an edge of the band that reads same; ~ same: within it"


def mark_verdicts(ax: Axes, positions: Iterable[float], tops: Iterable[float], verdicts: Iterable[object],
                  horizontal: bool = False) -> None:
    """Mark each same (``~``) or ambiguous (``?``) point just beyond ``tops``, where its drawn whisker ends (above it;
    right of it on a ``horizontal`` axis), so the mark never sits on the whisker; the words are said once under the
    figure (``verdict_key``), not beside every point, where they ran into each other and the whiskers."""
    place = {"xytext": (4, 0), "va": "center", "ha": "left"} if horizontal else \
        {"xytext": (0, 2), "va": "bottom", "ha": "center"}
    for position, top, verdict in zip(positions, tops, verdicts, strict=True):
        if (mark := verdict_mark(verdict)) and np.isfinite(top):
            xy = (top, position) if horizontal else (position, top)
            ax.annotate(mark, xy, textcoords="offset points", fontsize=11, fontweight="bold", color=NOTE_COLOR,
                        gid=VERDICT_MARK_GID, annotation_clip=False, **place)


def verdict_key(fig: Figure) -> str | None:
    """What the marks mean (``VERDICT_KEY``) where the figure draws any, else None."""
    marked = any(text.get_gid() == VERDICT_MARK_GID for ax in fig.axes for text in ax.texts)
    return VERDICT_KEY if marked else None


def whisker_tops(points: Iterable[float], highs: Iterable[float]) -> np.ndarray:
    """Where each point's drawn whisker ends: its interval's high end, or the point where it has none."""
    points, highs = (np.asarray(list(v), dtype=float) for v in (points, highs))
    return np.where(np.isfinite(highs), np.fmax(points, highs), points)


def badge_simulated(ax: Axes) -> None:
    """Mark a panel that shows simulated cells."""
    ax.text(0.99, 0.99, SIMULATED_LABEL, ha="right", va="top", transform=ax.transAxes, fontsize=8,
            color="tab:purple", fontstyle="italic")


def geomean(values: Iterable[float]) -> float:
    kept = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return math.exp(sum(math.log(v) for v in kept) / len(kept)) if kept else math.nan


def l2_hit_column(frame: pd.DataFrame) -> str | None:
    """Nsight Compute's L2 hit rate where measured, else the dataset's (simulated) one."""
    for column in ("ncu_l2_hit_pct", "l2_hit_pct"):
        if column in frame.columns and frame[column].notna().any():
            return column
    return None


def hbm_read_column(frame: pd.DataFrame) -> str | None:
    """Nsight Compute's DRAM read bytes where measured, else the dataset's (simulated) HBM read bytes."""
    for column in ("ncu_dram_read_bytes", "hbm_read_bytes"):
        if column in frame.columns and frame[column].notna().any():
            return column
    return None


def row_variants(frame: pd.DataFrame) -> pd.Series:
    """Each row's variant (``variants.recorded``), looked up once per distinct name, stages and skip; a row without a
    ``variant`` (before rows named it) is its stages' forced one, a row without ``skip`` forced."""
    names = frame["variant"] if "variant" in frame else frame["stages"].map(variants.forced)
    stages = frame["stages"] if "stages" in frame else pd.Series(None, index=frame.index, dtype=object)
    skips = frame["skip"] if "skip" in frame else pd.Series("force", index=frame.index)
    keys = list(zip(names, stages, skips, strict=True))
    found = {key: variants.recorded(*key) for key in set(keys)}
    return pd.Series([found[key] for key in keys], index=frame.index, dtype=object)


def is_baseline(frame: pd.DataFrame) -> pd.Series:
    """Per row: is it its group's baseline (``Variant.is_baseline``)."""
    return row_variants(frame).map(lambda v: v.is_baseline).astype(bool)


def relative_to_original(frame: pd.DataFrame, column: str) -> pd.Series:
    """``column`` of each cell divided by that of the original-order cell of its group (NaN without one)."""
    if frame.empty or missing_columns(frame, ("group_id", "stages", column)):
        return pd.Series(np.nan, index=frame.index, dtype=float)
    originals = frame[is_baseline(frame)].drop_duplicates("group_id").set_index("group_id")[column]
    return frame[column] / frame["group_id"].map(originals)
