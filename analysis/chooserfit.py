"""What a GPU's skip profile learns of the order chooser (``launch_order.chooser.ChooserFit``) from a sweep whose groups
hold an ``auto`` cell: every row of such a group records the simulator's predicted kernel time of its order
(``predicted_kernel_ms``) beside the measured one.

- ``bias``, per candidate: the median over groups of log(measured / predicted) of the candidate relative to the
  original's (so drift of the whole group cancels), which the chooser adds to its prediction's log;
- ``margin_pct``: the median of what is left of that error, as a %: a predicted net gain below it keeps the original
  (the 90th percentile kept the original where triton-static's orders gain 2-4 %: 4 of 9 held-out groups within 1 %
  of the best, against 7 of 9 at the median; ``benchmarks/results/orders-h200/``).

``evaluate`` refits with each method's groups held out and scores the choices on them against the measured best.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from wavealign.launch_order import candidates

# the rows a fit reads: measured, done, in a group the chooser predicted (each fixed order once; auto is its pick)
COLUMNS = ("group_id", "method", "order_candidate", "predicted_kernel_ms", "kernel_ms_median", "reorder_ms")
QUANTILE = 0.5


def chooser_rows(frame: pd.DataFrame, hardware: str, backend: str) -> pd.DataFrame:
    """The fixed-order rows of ``hardware``'s groups on ``backend`` that hold a chooser's predictions, measured (not
    simulated)."""
    if "predicted_kernel_ms" not in frame:  # a run root from before the chooser
        return pd.DataFrame(columns=list(COLUMNS))
    rows = frame[(frame.hardware == hardware) & (frame.backend == backend) & (frame.status == "done")
                 & ~frame.simulated.astype(bool)
                 & (frame.variant != "auto") & frame.predicted_kernel_ms.notna()]
    return rows[list(COLUMNS)].drop_duplicates(["group_id", "order_candidate"])


def _relative_errors(rows: pd.DataFrame) -> pd.DataFrame:
    """Per row: log(measured / predicted) less its group original's."""
    log_error = np.log(rows.kernel_ms_median / rows.predicted_kernel_ms)
    original = log_error[rows.order_candidate == candidates.ORIGINAL].groupby(rows.group_id).first()
    return rows.assign(error=log_error - rows.group_id.map(original)).dropna(subset=["error"])


def fit(rows: pd.DataFrame) -> dict:
    """A profile's ``chooser`` section from ``chooser_rows``: {"bias": {candidate: float}, "margin_pct": float,
    "groups": n}."""
    errors = _relative_errors(rows)
    fixed = errors[errors.order_candidate != candidates.ORIGINAL]
    bias = fixed.groupby("order_candidate").error.median()
    left = (fixed.error - fixed.order_candidate.map(bias)).abs()
    margin = 100.0 * math.expm1(float(left.quantile(QUANTILE))) if len(left) else 0.0
    return {"bias": {name: round(float(b), 5) for name, b in bias.items()}, "margin_pct": round(margin, 3),
            "groups": int(errors.group_id.nunique())}


def choose(rows: pd.DataFrame, section: dict) -> pd.Series:
    """The candidate a chooser with ``section`` picks in each group of ``rows``, from the recorded predictions (the
    plan cost as measured beside them)."""
    bias = section.get("bias", {})
    net = rows.predicted_kernel_ms * np.exp(rows.order_candidate.map(bias).fillna(0.0)) + rows.reorder_ms
    scored = rows.assign(net=net)
    picks = {}
    for group_id, g in scored.groupby("group_id"):
        best = g.loc[g.net.idxmin()]
        original = g[g.order_candidate == candidates.ORIGINAL]
        gain = 100.0 * (1.0 - best.net / original.net.iloc[0]) if len(original) else math.inf
        picks[group_id] = candidates.ORIGINAL if gain < section.get("margin_pct", 0.0) else best.order_candidate
    return pd.Series(picks)


def evaluate(rows: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float]]:
    """Each method's groups chosen by a fit on the other methods' (and by the bare simulator), against the measured
    best by net time: a table per group and the share within 1 % of the best."""
    out = []
    for method in sorted(rows.method.unique()):
        train, test = rows[rows.method != method], rows[rows.method == method]
        fitted = choose(test, fit(train)) if len(train) else None
        bare = choose(test, {})
        for group_id, g in test.groupby("group_id"):
            net = (g.kernel_ms_median + g.reorder_ms).set_axis(g.order_candidate)
            best = net.idxmin()
            for how, picks in (("fitted", fitted), ("simulator", bare)):
                if picks is None:
                    continue
                pick = picks[group_id]
                out.append(dict(method=method, group_id=group_id, chooser=how, pick=pick, best=best,
                                pick_over_best=float(net[best] / net[pick])))
    table = pd.DataFrame(out)
    metrics = {f"within_1pct_{how}": float((t.pick_over_best >= 0.99).mean())
               for how, t in table.groupby("chooser")} if len(table) else {}
    return table, metrics
