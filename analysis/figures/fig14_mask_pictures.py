"""Fig. 14: one head's block mask before and after reordering, regenerated from its cell."""

from __future__ import annotations

import json

import pandas as pd
from matplotlib.figure import Figure

from analysis.figures.common import (
    DENSE,
    figure_rows,
    identity_columns,
    note_rows,
    noted_figure,
)
from analysis.plotting import (
    STAGE_LABELS,
    note_figure,
    panel_grid,
    row_variants,
)
from analysis.rebuild import RebuiltHead, rebuild_head
from analysis.tables import (
    order_label,
)
from wavealign import masks
from wavealign.records import DEFAULT_REORDERER, NO_REORDERER

MASK_TITLE = "Mask before and after reordering, one head (Fig. 14)"


@figure_rows("cell_id", "cell_json", "stages", "seq_len_tokens", "method")
def mask_pictures_rows(cells: pd.DataFrame, cell_id: str | None = None,
                       max_seq_len_tokens: int = 65_536) -> pd.DataFrame:
    """Fig. 14's row: the one cell whose mask it redraws (``cell_id``; without it, the longest reordered cell up to
    ``max_seq_len_tokens``, building a mask from Q/K on the CPU costs time, preferring Q/K-free synthetic masks, full
    WaveAlign and a density near 25 %), with its ``cell_json``."""
    if cell_id is not None:
        chosen = cells[cells["cell_id"] == cell_id]
        if chosen.empty:
            return note_rows(f"no finished cell {cell_id!r} in the results")
    else:
        # a Q/K-free mask redraws at any length; one built from Q/K only up to max_seq_len_tokens (CPU time)
        qk_free = [m for m in cells["method"].unique() if m in masks.available() and not masks.get(m).needs_qk]
        synthetic = cells["method"].isin(qk_free)
        reordered = row_variants(cells).map(lambda v: v.reorders).astype(bool)
        chosen = cells[reordered & (cells["method"] != DENSE)
                       & (synthetic | (cells["seq_len_tokens"] <= max_seq_len_tokens))]
        if {"num_q_blocks", "wave_size"} <= set(chosen):  # a mask of one wave has no first wave to show apart
            chosen = chosen[chosen["num_q_blocks"] > chosen["wave_size"]]
        if chosen.empty:
            return note_rows("no reordered cell of more than one wave to redraw (Q/K-built masks up to "
                              f"{max_seq_len_tokens} tokens; report --mask-cell ID draws any cell)")
        # prefer Q/K-free masks, full WaveAlign, the longest sequence, then the density nearest the paper's 25%
        chosen = chosen.assign(_synthetic=chosen["method"].isin(qk_free),
                               _both=row_variants(chosen).map(lambda v: v.spatial and v.temporal),
                               _near_quarter=-(chosen["density"] - 0.25).abs() if "density" in chosen else 0.0)
        chosen = chosen.sort_values(["_synthetic", "_both", "seq_len_tokens", "_near_quarter"], ascending=False)
    cell = chosen.iloc[[0]]
    return pd.DataFrame([{"cell_id": cell["cell_id"].iloc[0], **identity_columns(cell),
                          "stages": cell["stages"].iloc[0],
                          "cell_json": cell["cell_json"].iloc[0]}])


def draw_mask_pictures(rows: pd.DataFrame) -> Figure:
    """Fig. 14 from its row: the cell's mask regenerated from its recorded config with ``wavealign.inputs.build``
    (the sweep's own mask-building code) and reordered with ``wavealign.launch_order.plan`` using the cell's stages,
    wave size and seed (``analysis.rebuild``); a note where this code cannot rebuild it."""
    if (noted := noted_figure(rows, MASK_TITLE)) is not None:
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
