"""The paper's figures from a results frame (``analysis.load``). Each figure is two steps: one function
builds the rows it draws (``PaperFigure.rows``: a DataFrame, one row per drawn point or bar, with the cells it stands
for), and one draws exactly those rows (``PaperFigure.draw``), so that the report writes beside each figure the table
of what it drew (``<figure>.csv``) and no figure computes a number its table lacks. A figure lacking its data is a
note (``plotting.note_figure``); its rows are then one ``NOTE``.

Every speedup a figure draws carries its 95 % interval as an error bar where it has one, and a same or ambiguous
verdict is marked beside it (``plotting.mark_verdicts``); over several cells the speedup, its interval and verdict
follow ``metrics.AGGREGATE_RULE`` (``tables.shown``), the sweep summary's rule, so a bar and the summary's line of the
same cells read alike. Simulated cells are drawn hatched, dashed or hollow and labelled "simulated".

One module per figure, named by its key in ``FIGURES`` (``fig13_adaptive_skip``: its rows and its drawing), sharing
``common``; colours and markers are the variants' and reorderers' own (``Variant.color``, ``Reorderer.color``).
``FIGURES`` lists them in report order: ``{name: PaperFigure}``; each is called with the frame alone.
"""

from __future__ import annotations

from analysis.figures.common import NOTE, OVER_DENSE, OVER_ORIGINAL, OVER_ORIGINAL_NET, PaperFigure
from analysis.figures.fig02_speedup_vs_bound import (
    draw_speedup_vs_bound,
    speedup_vs_bound,
    speedup_vs_bound_rows,
)
from analysis.figures.fig03_roofline import draw_roofline, roofline, roofline_rows
from analysis.figures.fig10_kernel_latency import (
    LATENCY_AXIS,
    draw_kernel_latency,
    kernel_latency,
    kernel_latency_rows,
    median_interval,
)
from analysis.figures.fig11_cache_behaviour import (
    cache_behaviour,
    cache_behaviour_rows,
    draw_cache_behaviour,
)
from analysis.figures.fig12_ablation import ablation, ablation_rows, draw_ablation
from analysis.figures.fig13_adaptive_skip import adaptive_skip, adaptive_skip_rows, draw_adaptive_skip
from analysis.figures.fig14_mask_pictures import draw_mask_pictures, mask_pictures, mask_pictures_rows
from analysis.figures.table2_reorderers import draw_reorderers, reorderer_comparison, reorderer_rows

FIGURES: dict[str, PaperFigure] = {
    "fig02_speedup_vs_bound": PaperFigure(speedup_vs_bound_rows, draw_speedup_vs_bound),
    "fig03_roofline": PaperFigure(roofline_rows, draw_roofline),
    "fig10_kernel_latency": PaperFigure(kernel_latency_rows, draw_kernel_latency),
    "fig11_cache_behaviour": PaperFigure(cache_behaviour_rows, draw_cache_behaviour),
    "fig12_ablation": PaperFigure(ablation_rows, draw_ablation),
    "fig13_adaptive_skip": PaperFigure(adaptive_skip_rows, draw_adaptive_skip),
    "fig14_mask_pictures": PaperFigure(mask_pictures_rows, draw_mask_pictures),
    "table2_reorderers": PaperFigure(reorderer_rows, draw_reorderers),
}

__all__ = ["FIGURES", "LATENCY_AXIS", "NOTE", "OVER_DENSE", "OVER_ORIGINAL", "OVER_ORIGINAL_NET", "PaperFigure",
           "ablation", "ablation_rows", "adaptive_skip", "adaptive_skip_rows", "cache_behaviour",
           "cache_behaviour_rows", "draw_ablation", "draw_adaptive_skip", "draw_cache_behaviour",
           "draw_kernel_latency", "draw_mask_pictures", "draw_reorderers", "draw_roofline", "draw_speedup_vs_bound",
           "kernel_latency", "kernel_latency_rows", "mask_pictures", "mask_pictures_rows", "median_interval",
           "reorderer_comparison", "reorderer_rows", "roofline", "roofline_rows", "speedup_vs_bound",
           "speedup_vs_bound_rows"]
