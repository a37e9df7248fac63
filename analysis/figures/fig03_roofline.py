"""Fig. 3 / 15: achieved TFLOP/s against operational intensity under each GPU's roofs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.figures.common import (
    BYTES_HINT,
    IDENTITY,
    figure_rows,
    identity_columns,
    log_scale,
    note_rows,
    noted_figure,
    ordered_labels,
    variant_labels,
    variant_marker,
)
from analysis.plotting import (
    badge_simulated,
    label,
    note,
    panel_grid,
)
from wavealign import hardware as hardware_registry
from wavealign import metrics


def _flops(cells: pd.DataFrame) -> pd.Series:
    """Attention forward FLOPs the mask leaves (``wavealign.metrics.attention_flops``), per cell."""
    return metrics.attention_flops(cells["seq_len_tokens"], cells["seq_len_tokens"], cells["head_dim"],
                                   cells["num_heads"], cells["density"])


ROOFLINE_TITLE = "Roofline (Fig. 3 / 15)"
PANELS = "panels"  # rows.attrs key: the panels a figure draws, those without rows holding a note


@figure_rows("hardware", "method", "seq_len_tokens", "head_dim", "num_heads", "density", "kernel_ms_median")
def roofline_rows(cells: pd.DataFrame) -> pd.DataFrame:
    """Fig. 3/15's rows: one per cell on a described GPU, its achieved TFLOP/s and operational intensity (FLOPs per
    DRAM byte, from Nsight Compute or the simulator), with its method and launch order's label; ``attrs[PANELS]``
    the GPUs drawn (one panel each, under their roofs)."""
    gpus = [hw for hw in sorted(cells["hardware"].unique()) if hw in hardware_registry.names()]
    if not gpus:
        return note_rows("no cells on (or simulated for) a described GPU; hardware=cpu cells have no roofs")
    if "ncu_dram_read_bytes" in cells and cells["ncu_dram_read_bytes"].notna().any():
        dram = cells["ncu_dram_read_bytes"] + cells.get("ncu_dram_write_bytes", 0.0)
        source = "Nsight Compute DRAM bytes"
    elif "hbm_read_bytes" in cells:
        dram, source = cells["hbm_read_bytes"], "HBM read bytes"
    else:
        return note_rows(f"no DRAM byte counts: {BYTES_HINT}")
    cells = cells.assign(_bytes=dram, _flops=_flops(cells))
    cells = cells.assign(intensity=metrics.operational_intensity(cells["_flops"], cells["_bytes"]),
                         tflops=metrics.tflops(cells["_flops"], cells["kernel_ms_median"]))
    cells = cells[cells["hardware"].isin(gpus) & np.isfinite(cells["intensity"]) & (cells["_bytes"] > 0)]
    rows = []
    for _, part in cells.groupby(["hardware", "method", "_sim"]):
        labelled = part.assign(_label=variant_labels(part) if "variant" in part else "original")
        for name in ordered_labels(labelled) if "variant" in part else ["original"]:
            for _, cell in labelled[labelled["_label"] == name].iterrows():
                rows.append({"panel": cell["hardware"], "label": name, **identity_columns(cell.to_frame().T),
                             "source": source,
                             "intensity": cell["intensity"], "tflops": cell["tflops"]})
    out = pd.DataFrame(rows, columns=["panel", "label", *IDENTITY, "cells", "source", "intensity", "tflops"])
    out.attrs[PANELS] = gpus
    return out


def draw_roofline(rows: pd.DataFrame) -> Figure:
    """Fig. 3/15 from its rows: per GPU, its compute and HBM roofs and each cell's point, a marker per launch order
    and a colour per method, simulated points hollow."""
    if (noted := noted_figure(rows, ROOFLINE_TITLE)) is not None:
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
            color = f"C{methods.index(method)}"  # matplotlib's own colour cycle: a method is no variant
            for name in dict.fromkeys(points["label"]):
                sel = points[points["label"] == name]
                ax.scatter(sel["intensity"], sel["tflops"], marker=variant_marker(name), s=30,
                           facecolors="none" if sim else color, edgecolors=color,
                           label=label(f"{method} {name}", bool(sim)))
            if sim:
                badge_simulated(ax)
        log_scale(ax, "x")
        log_scale(ax, "y")
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
