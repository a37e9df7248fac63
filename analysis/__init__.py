"""Analysis of sweep results: load the Parquet dataset, draw the paper's figures and tables, fit skip profiles.

    from wavealign import analysis
    df = analysis.load("wavealign-runs")            # or an MLflow experiment name
    fig = analysis.kernel_latency(df)                 # one function per figure, each returns a Figure
    analysis.write_report(df, "wavealign-runs/report")

The package depends on the library and ``wavealign.orchestrator``, never the other way round.
"""

from wavealign.analysis.figures import (
    FIGURES,
    ablation,
    adaptive_skip,
    cache_behaviour,
    kernel_latency,
    mask_pictures,
    roofline,
    speedup_vs_bound,
)
from wavealign.analysis.load import load
from wavealign.analysis.report import write_report
from wavealign.analysis.tables import TABLES, ncu_characterisation, table2

__all__ = [
    "FIGURES",
    "TABLES",
    "ablation",
    "adaptive_skip",
    "cache_behaviour",
    "kernel_latency",
    "load",
    "mask_pictures",
    "ncu_characterisation",
    "roofline",
    "speedup_vs_bound",
    "table2",
    "write_report",
]
