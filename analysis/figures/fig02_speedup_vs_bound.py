"""Fig. 2: the compute-proportional bound 1/rho against the measured speedup over dense."""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure

from analysis.figures.common import (
    DENSE,
    FOOTNOTE,
    OVER_DENSE,
    figure_rows,
    footnote,
    identity_columns,
    kernel_reps,
    log_scale,
    note_rows,
    noted_figure,
    speedup_columns,
)
from analysis.plotting import (
    badge_simulated,
    draw_intervals,
    is_baseline,
    label,
    line_style,
    mark_verdicts,
    panel_grid,
    whisker_tops,
)
from analysis.tables import (
    tolerance,
)
from wavealign import metrics


def _over_dense(dense_ms: float, ms: float, dense_reps: object, reps: object, simulated: bool) -> metrics.Ratio:
    """A sparse cell's speedup over the dense cell of its shape: two samples timed apart (``metrics.independent_ratio``
    of their reps, as ``wavealign compare``), or the medians' ratio without an interval (a prediction, or no reps)."""
    dense_reps, reps = kernel_reps(dense_reps), kernel_reps(reps)
    if not simulated and dense_reps and reps:
        return metrics.independent_ratio(dense_reps, reps)
    return metrics.Ratio(float(metrics.speedup(dense_ms, ms)), math.nan, math.nan, 1)


FIG2_TITLE = "Upper bound 1/ρ vs actual speedup over dense (Fig. 2)"


@figure_rows("hardware", "backend", "method", "variant", "seq_len_tokens", "density", "kernel_ms_median")
def speedup_vs_bound_rows(cells: pd.DataFrame) -> pd.DataFrame:
    """Fig. 2's rows: per method (panel), hardware/backend (series) and length, the compute-proportional bound 1/rho
    and the kernel's speedup over the dense cell of the same hardware, backend, workload and length, both in the
    original row order (each sparse cell against its dense cell: ``_over_dense``; over several cells,
    ``metrics.AGGREGATE_RULE``)."""
    if "kernel_ms_reps" not in cells:
        cells = cells.assign(kernel_ms_reps=None)
    originals = cells[is_baseline(cells)]
    dense, sparse = originals[originals["method"] == DENSE], originals[originals["method"] != DENSE]
    methods = sorted(sparse["method"].unique())
    if not methods:
        return note_rows("no sparse-method cells in the original order")
    keys = ["hardware", "backend", "seq_len_tokens"] + (["workload"] if "workload" in cells else [])
    baseline = dense.drop_duplicates(keys)[[*keys, "kernel_ms_median", "kernel_ms_reps"]].rename(
        columns={"kernel_ms_median": "dense_ms", "kernel_ms_reps": "dense_ms_reps"})
    pairs = sparse.merge(baseline, on=keys)
    drawn = [m for m in methods if (pairs["method"] == m).any()]
    hint = ("no dense baseline cell of the same hardware, backend and length (method=dense, variant=original): "
            "add the sweep's dense_baseline grid")
    if not drawn:
        return note_rows(f"{', '.join(methods)}: {hint.replace(': ', ':' + chr(10))}")
    ratios = [_over_dense(d, ms, dr, r, bool(sim)) for d, ms, dr, r, sim in zip(
        pairs["dense_ms"], pairs["kernel_ms_median"], pairs["dense_ms_reps"], pairs["kernel_ms_reps"], pairs["_sim"],
        strict=True)]
    pairs = pairs.assign(_point=[r.point for r in ratios], _low=[r.low for r in ratios],
                         _high=[r.high for r in ratios], _bound=metrics.bound_speedup(pairs["density"]))
    rows = []
    for (method, hw, backend, sim, seq_k), part in pairs.groupby(["method", "hardware", "backend", "_sim", "seq_k"]):
        over_dense = metrics.aggregate(part["_point"], part["_low"], part["_high"], predicted=bool(sim),
                                       tolerance=tolerance(part))
        rows.append({"panel": method, "series": f"{hw}/{backend}", "seq_k": seq_k, **identity_columns(part),
                     "bound": part["_bound"].mean(), **speedup_columns(over_dense, OVER_DENSE)})
    out = pd.DataFrame(rows)
    if len(drawn) < len(methods):
        out.attrs[FOOTNOTE] = f"not drawn: {', '.join(m for m in methods if m not in drawn)} ({hint})"
    return out


def draw_speedup_vs_bound(rows: pd.DataFrame) -> Figure:
    """Fig. 2 from its rows: per method, each series' bound (dotted) and actual speedup over dense with its interval
    and verdict mark, simulated series dashed and hollow."""
    if (noted := noted_figure(rows, FIG2_TITLE)) is not None:
        return noted
    panels = list(dict.fromkeys(rows["panel"]))
    fig, axes = panel_grid(1, len(panels))
    for ax, method in zip(axes[0], panels, strict=True):
        ax.set_title(method)
        for i, ((series, sim), line) in enumerate(rows[rows["panel"] == method].groupby(["series", "simulated"])):
            line = line.sort_values("seq_k")
            color = f"C{i}"  # matplotlib's own colour cycle: a series is no variant
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
        log_scale(ax, "y")
        ax.set_xlabel("sequence length (K tokens)")
        ax.set_ylabel("speedup over dense (95 % CI)")
        ax.legend(fontsize=7)
    fig.suptitle(FIG2_TITLE)
    fig.tight_layout()
    footnote(fig, rows.attrs.get(FOOTNOTE))
    return fig


def speedup_vs_bound(frame: pd.DataFrame) -> Figure:
    """Fig. 2: per method, the compute-proportional bound 1/rho against the measured dense/sparse kernel time ratio
    with its interval (same hardware, backend, workload and length), both in the original row order."""
    return draw_speedup_vs_bound(speedup_vs_bound_rows(frame))
