"""Fig. 12, the ablation: Original, O+S1, O+S2 and O+S1+S2, the kernel's speedup over the original with L2 hit and
HBM read, in Fig. 11's panels."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from analysis.figures.fig11_cache_behaviour import cache_rows, draw_cache_panels
from analysis.plotting import (
    STAGE_LABELS,
)

ABLATION_TITLE = "Ablation: Original, O+S1, O+S2, O+S1+S2 (Fig. 12)"
ABLATION_STAGES = list(STAGE_LABELS)


def ablation_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Fig. 12's rows (``cache_rows``): the kernel's speedup over the original with its interval and verdict, L2
    hit, and HBM read over the original's, for Original, O+S1, O+S2 and O+S1+S2."""
    return cache_rows(frame, ABLATION_STAGES, with_time=True)


def draw_ablation(rows: pd.DataFrame) -> Figure:
    return draw_cache_panels(rows, ABLATION_TITLE, ABLATION_STAGES)


def ablation(frame: pd.DataFrame) -> Figure:
    """Fig. 12: Original, O+S1, O+S2, O+S1+S2: the kernel's speedup over the original order with its interval and
    verdict, HBM read relative to the original order, and L2 hit ratio, per method."""
    return draw_ablation(ablation_rows(frame))
