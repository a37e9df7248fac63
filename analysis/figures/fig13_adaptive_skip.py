"""Fig. 13: latency with and without the adaptive skip, against length and density."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from analysis.figures.common import (
    OVER_ORIGINAL_NET,
    figure_rows,
    footnote,
    identity_columns,
    log_scale,
    note_rows,
    noted_figure,
    speedup_columns,
)
from analysis.plotting import (
    badge_simulated,
    draw_intervals,
    label,
    mark_verdicts,
    panel_grid,
    row_variants,
    variant_color,
    whisker_tops,
)
from analysis.tables import (
    NET,
    shown,
    with_speedups,
)
from wavealign.records import CPU

SKIP_TITLE = "Adaptive skip: latency with and without the skip (Fig. 13)"
ALWAYS, ADAPTIVE = "no skip (always reorder)", "adaptive skip"
SERIES_VARIANTS = {ALWAYS: "wavealign", ADAPTIVE: "adaptive"}  # what each series stands for in rows naming no variant


@figure_rows("hardware", "group_id", "stages", "skip", "seq_len_tokens", "density", "kernel_ms_median", "total_ms")
def adaptive_skip_rows(cells: pd.DataFrame) -> pd.DataFrame:
    """Fig. 13's rows: one per drawn point, a reordered cell always reordering (``ALWAYS``) or under the skip policy
    (``ADAPTIVE``): its latency (reorder + kernel) over the original's, 1 / its net speedup (the record's, by
    ``tables.shown``; from its total over the original's in rows from before speedups were recorded) with the
    interval 1/high..1/low and the speedup's verdict, its length and density, whether the policy skipped (or would
    have), and the skip profiles that decided for its GPU. A ``cpu`` cell that always reordered gets no "would skip":
    the profiles are fitted to GPUs' kernels (a cpu cell's is its ``cpu_profile`` GPU's), and their rule says
    nothing about a CPU's timings; a cpu cell under the policy shows what it did."""
    cells = with_speedups(cells)
    launch = row_variants(cells)
    always = cells[launch.map(lambda v: v.reorders and v.skip == "force").astype(bool)]
    adaptive = cells[launch.map(lambda v: v.skip == "policy").astype(bool)]
    always, adaptive = (part[part["net_speedup_vs_original"].notna()] for part in (always, adaptive))
    if always.empty and adaptive.empty:
        return note_rows("no reordered cells with an original-order cell in their group")
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
                rows.append({"series": series, **identity_columns(cell), "seq_k": cell["seq_k"].iloc[0],
                             "density": cell["density"].iloc[0], "latency": 1.0 / net.point,
                             "latency_low": 1.0 / net.high, "latency_high": 1.0 / net.low,
                             **speedup_columns(net, OVER_ORIGINAL_NET), "skipped": bool(skipped[series][index]),
                             "skip_profiles": ", ".join(decided)})
    return pd.DataFrame(rows)


def draw_adaptive_skip(rows: pd.DataFrame) -> Figure:
    """Fig. 13 from its rows: per GPU, against length and against density, the always-reordered and the adaptive
    cells' latency over the original's with their intervals and same/ambiguous marks, a red x where the policy
    skipped (or would have), a line at the original's; every point inside its axes."""
    if (noted := noted_figure(rows, SKIP_TITLE)) is not None:
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
                colors = _variant_colors(part, ALWAYS)
                ax.scatter(part[x], part["latency"], marker="o", facecolors="none" if sim else colors,
                           edgecolors=colors, s=22, label=label(ALWAYS, bool(sim)))
            draw_intervals(ax, points[x], points["latency"], points["latency_low"], points["latency_high"])
            mark_verdicts(ax, points[x], whisker_tops(points["latency"], points["latency_high"]), points["verdict"])
            if len(adaptive):
                ax.scatter(adaptive[x], adaptive["latency"], marker="s", facecolors="none",
                           edgecolors=_variant_colors(adaptive, ADAPTIVE),
                           s=30, label=label(ADAPTIVE, bool(adaptive["simulated"].astype(bool).any())))
            skipped = points[points["skipped"]]
            if len(adaptive) or len(skipped):
                ax.scatter(skipped[x], skipped["latency"], marker="x", color="tab:red", s=40,
                           label="skipped" if len(adaptive) else "policy would skip")
            if points["simulated"].astype(bool).any():
                badge_simulated(ax)
            ax.axhline(1.0, color="0.3", linewidth=0.8, linestyle="-", label="original (never reorder)")
            log_scale(ax, "y")
            ax.margins(x=0.08, y=0.15)  # no marker cut by the frame
            ax.set_xlabel(xlabel)
            ax.set_ylabel("latency ÷ original kernel (95 % CI)")
            ax.legend(fontsize=7)
    fig.suptitle(SKIP_TITLE)
    fig.tight_layout()
    footnote(fig)
    return fig


def _variant_colors(points: pd.DataFrame, series: str) -> list[str]:
    """Each point in its variant's colour (``Variant.color``; its launch order's name before a reorderer), or in rows
    from before variants were recorded, in that of the registry variant its series stands for."""
    orders = points["variant"] if "variant" in points else [SERIES_VARIANTS[series]] * len(points)
    return [variant_color(str(order).split("[")[0]) for order in orders]


def adaptive_skip(frame: pd.DataFrame) -> Figure:
    """Fig. 13: end-to-end latency (reorder + kernel) relative to the original order, with and without the
    adaptive skip, against sequence length and density; a red x marks where the policy skipped. Each point carries its
    net speedup's interval as an error bar where it has one, and a same or ambiguous verdict is marked beside it. Each
    panel names the skip profile that decided (a ``cpu`` cell's is its ``cpu_profile`` GPU's), and every point is
    inside its axes."""
    return draw_adaptive_skip(adaptive_skip_rows(frame))
