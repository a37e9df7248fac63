"""Fit and evaluate the adaptive-skip model of ``wavealign.skip`` from a sweep's cells of one hardware type.

The model (``wavealign.skip.MODEL_FEATURES``) is three log-linear regressions, log t = b0 + b . x, of the
kernel time in the original order, the kernel time with WaveAlign, and the reorder cost. Why this form:

- kernel and reorder times follow power laws of the mask's size, density and head count
  (t ~ MB^a rho^b H^c), which are linear in the logged features, so the fit extrapolates across sequence
  lengths and head counts; a tree cannot predict beyond the lengths it saw, and the evaluation holds
  lengths out;
- both kernel models are fitted on the same paired cells (one original and one WaveAlign cell per mask),
  so, OLS being linear in its target, their coefficient difference is exactly the fit of the log
  speedup log(t_orig / t_wa): the decision rests on the ratio, not on two independent errors;
- every coefficient is an elasticity a person can read (``profile.models.*.coef``).

A small ridge penalty on standardised features keeps the fit defined when a feature does not vary in a
sweep (e.g. one head count), and the coefficients are stored unstandardised, as the runtime uses them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.plotting import done_cells, is_baseline, is_simulated, panel_grid, row_variants
from wavealign import skip

FEATURE_COLUMNS = ("num_q_blocks", "num_kv_blocks", "seq_len_tokens", "density", "nnz_mean", "nnz_cv",
                   "adjacent_jaccard", "wave_working_set_bytes", "working_set_over_l2", "num_heads")
TARGETS = {"kernel_original_ms": "original_ms", "kernel_wavealign_ms": "wavealign_ms", "reorder_ms": "reorder_ms"}
SPLITS = ("seq_len", "method")
RIDGE = 1e-3


def paired_cells(frame: pd.DataFrame, hardware: str, include_simulated: bool = False,
                 backends: list[str] | None = None) -> pd.DataFrame:
    """One row per mask (``group_id``) of ``hardware`` (and of ``backends``, if given): its skip features,
    the original-order kernel time, and the forced WaveAlign (O+S1+S2) kernel time and reorder cost
    measured on the same device."""
    need = ("hardware", "group_id", "stages", "skip", "method", "kernel_ms_median", "reorder_ms",
            *FEATURE_COLUMNS)
    missing = [c for c in need if c not in frame.columns]
    if missing:
        raise ValueError(f"results lack column(s) {missing} needed to fit a skip profile")
    cells = done_cells(frame)
    cells = cells[(cells["hardware"] == hardware) & cells["kernel_ms_median"].notna()]
    if not include_simulated:
        cells = cells[~is_simulated(cells)]
    if backends is not None and "backend" in cells:
        cells = cells[cells["backend"].isin(backends)]
    original = cells[is_baseline(cells)].drop_duplicates("group_id").set_index("group_id")
    forced_both = row_variants(cells).map(lambda v: v.spatial and v.temporal and v.skip == "force").astype(bool)
    aligned = cells[forced_both].drop_duplicates("group_id")
    aligned = aligned.set_index("group_id")
    common = original.index.intersection(aligned.index)
    pairs = original.loc[common, ["method", *FEATURE_COLUMNS]].copy()
    pairs["original_ms"] = original.loc[common, "kernel_ms_median"]
    pairs["wavealign_ms"] = aligned.loc[common, "kernel_ms_median"]
    pairs["reorder_ms"] = aligned.loc[common, "reorder_ms"]
    for column in ("sweep_id", "simulated", "backend"):
        if column in original:
            pairs[column] = original.loc[common, column]
    pairs = pairs.dropna(subset=["original_ms", "wavealign_ms", "reorder_ms", *FEATURE_COLUMNS])
    return pairs[(pairs[["original_ms", "wavealign_ms", "reorder_ms"]] > 0).all(axis=1)].reset_index()


def skip_features(row: pd.Series) -> skip.SkipFeatures:
    """The ``SkipFeatures`` a cell recorded (the runtime computes the same from the mask)."""
    ints = {"num_q_blocks", "num_kv_blocks", "seq_len_tokens", "num_heads"}
    return skip.SkipFeatures(**{c: int(row[c]) if c in ints else float(row[c]) for c in FEATURE_COLUMNS})


def design_matrix(pairs: pd.DataFrame) -> np.ndarray:
    """``MODEL_FEATURES`` of every pair, as the runtime computes them (``SkipFeatures.model_inputs``)."""
    return np.array([skip_features(row).model_inputs() for _, row in pairs.iterrows()], dtype=float)


def fit_log_linear(x: np.ndarray, y_ms: np.ndarray, ridge: float = RIDGE) -> dict:
    """Ridge least squares of log(y) on standardised ``x``; returns raw-feature coefficients and fit facts."""
    log_y = np.log(y_ms)
    mean, std = x.mean(0), x.std(0)
    varies = std > 1e-12
    z = np.where(varies, (x - mean) / np.where(varies, std, 1.0), 0.0)
    n, k = z.shape
    gram = z.T @ z + ridge * n * np.eye(k)
    beta_z = np.linalg.solve(gram, z.T @ (log_y - log_y.mean()))
    beta = np.where(varies, beta_z / np.where(varies, std, 1.0), 0.0)
    intercept = log_y.mean() - float(beta @ mean)
    residual = log_y - (intercept + x @ beta)
    return {"coef": [float(intercept), *map(float, beta)], "features": list(skip.MODEL_FEATURES),
            "rmse_log": float(np.sqrt(np.mean(residual ** 2))), "cells": int(n),
            "feature_min": [float(v) for v in x.min(0)], "feature_max": [float(v) for v in x.max(0)]}


def fit_models(pairs: pd.DataFrame, ridge: float = RIDGE) -> dict[str, dict]:
    """The three models of a profile from paired cells."""
    if len(pairs) < 2:
        raise ValueError(f"need at least 2 paired (original, WaveAlign) cells to fit a skip profile, got {len(pairs)}")
    x = design_matrix(pairs)
    return {name: fit_log_linear(x, pairs[column].to_numpy(float), ridge) for name, column in TARGETS.items()}


def fit_profile(pairs: pd.DataFrame, hardware: str, provenance: dict, version: str,
                ridge: float = RIDGE) -> skip.Profile:
    """A fitted (non-provisional) profile; the rule is kept from the current one for inspection only."""
    try:
        rule = skip.load_profile(hardware, fallback=False).rule
    except ValueError:
        rule = {}
    return skip.Profile(hardware=hardware, provisional=False, rule=rule, models=fit_models(pairs, ridge),
                        provenance=provenance, version=version)


def decisions(profile: skip.Profile, pairs: pd.DataFrame) -> pd.DataFrame:
    """The runtime policy's decision for each pair (``SkipPolicy.decide`` itself): columns ``reorder`` and
    ``predicted_gain_ms``, indexed like ``pairs``."""
    policy = skip.SkipPolicy(profile)
    made = [policy.decide(skip_features(row)) for _, row in pairs.iterrows()]
    return pd.DataFrame({"reorder": [d.reorder for d in made], "predicted_gain_ms": [d.predicted_gain_ms
                                                                                    for d in made]},
                        index=pairs.index)


@dataclass
class Evaluation:
    """Held-out evaluation: per-cell table, summary metrics, and the split used."""

    table: pd.DataFrame
    metrics: dict[str, float]
    split: str


def score(pairs: pd.DataFrame, reorder: np.ndarray) -> dict[str, float]:
    """Decision accuracy against the oracle that knows both times, regret, and totals against the fixed
    policies. Regret is in percent of the oracle's total attention time."""
    never = pairs["original_ms"].to_numpy(float)
    always = (pairs["wavealign_ms"] + pairs["reorder_ms"]).to_numpy(float)
    oracle = np.minimum(never, always)
    chosen = np.where(reorder, always, never)
    total = {"policy": chosen.sum(), "always": always.sum(), "never": never.sum(), "oracle": oracle.sum()}
    best_fixed = min(total["always"], total["never"])
    return {
        "cells": float(len(pairs)),
        "accuracy": float(np.mean(reorder == (always < never))) if len(pairs) else math.nan,
        "regret_pct": float(100 * (total["policy"] - total["oracle"]) / total["oracle"]) if len(pairs) else math.nan,
        "total_policy_ms": float(total["policy"]), "total_always_ms": float(total["always"]),
        "total_never_ms": float(total["never"]), "total_oracle_ms": float(total["oracle"]),
        "vs_best_fixed_pct": float(100 * (total["policy"] - best_fixed) / best_fixed) if len(pairs) else math.nan,
        "reorder_fraction": float(np.mean(reorder)) if len(pairs) else math.nan,
    }


def _split_key(pairs: pd.DataFrame, split: str) -> pd.Series:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return pairs["seq_len_tokens"] if split == "seq_len" else pairs["method"]


def evaluate(pairs: pd.DataFrame, hardware: str, split: str = "seq_len", ridge: float = RIDGE) -> Evaluation:
    """Leave-one-group-out: for each sequence length (or method), fit on the others and decide on it.

    Also scores the current (e.g. provisional) profile of ``hardware`` on the same cells, for comparison.
    """
    key = _split_key(pairs, split)
    folds = sorted(key.unique())
    if len(folds) < 2:
        raise ValueError(f"split={split!r} needs cells of at least 2 different {split} values to hold one out, "
                         f"got {folds}")
    parts = []
    for held_out in folds:
        test = pairs[key == held_out]
        train = pairs[key != held_out]
        if len(train) < 2:
            continue
        profile = skip.Profile(hardware=hardware, provisional=False, rule={}, models=fit_models(train, ridge),
                               provenance={}, version="cv")
        made = decisions(profile, test)
        parts.append(test.assign(fold=str(held_out), reorder=made["reorder"],
                                 predicted_gain_ms=made["predicted_gain_ms"]))
    table = pd.concat(parts, ignore_index=True)
    table["actual_gain_ms"] = table["original_ms"] - table["wavealign_ms"] - table["reorder_ms"]
    table["oracle_reorder"] = table["actual_gain_ms"] > 0
    metrics = score(table, table["reorder"].to_numpy(bool))
    try:
        current = skip.load_profile(hardware)
        current_reorder = decisions(current, table)["reorder"].to_numpy(bool)
        metrics["current_profile_regret_pct"] = score(table, current_reorder)["regret_pct"]
    except ValueError:
        pass
    metrics["goal_met"] = float(metrics["regret_pct"] <= 1.0 and metrics["vs_best_fixed_pct"] <= 0.0)
    return Evaluation(table=table, metrics=metrics, split=split)


def evaluation_figure(evaluation: Evaluation, hardware: str) -> Figure:
    """Held-out predicted against actual gain, and the decisions over sequence length and density."""
    table = evaluation.table
    fig, axes = panel_grid(1, 2, width=5.2, height=4.2)
    right = table["reorder"] == table["oracle_reorder"]
    ax = axes[0][0]
    for ok, color, name in ((True, "tab:green", "decided as the oracle"), (False, "tab:red", "decided otherwise")):
        sel = table[right == ok]
        ax.scatter(sel["actual_gain_ms"], sel["predicted_gain_ms"], s=16, color=color, label=f"{name} ({len(sel)})")
    ax.axhline(0, color="0.4", linewidth=0.8)
    ax.axvline(0, color="0.4", linewidth=0.8)
    ax.set_xscale("symlog", linthresh=1e-3)
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set_xlabel("actual gain (ms): original - (WaveAlign + reorder)")
    ax.set_ylabel("predicted gain (ms), held out")
    ax.legend(fontsize=7)
    ax = axes[0][1]
    for oracle, marker in ((True, "o"), (False, "x")):
        sel = table[table["oracle_reorder"] == oracle]
        colors = np.where(sel["reorder"], "tab:blue", "tab:orange")
        ax.scatter(sel["seq_len_tokens"] / 1000, sel["density"], marker=marker, c=colors, s=22,
                   label=f"oracle: {'reorder' if oracle else 'skip'}")
    ax.set_yscale("log")
    ax.set_xlabel("sequence length (K tokens)")
    ax.set_ylabel("density")
    ax.set_title("colour: policy reorders (blue) / skips (orange)", fontsize=8)
    ax.legend(fontsize=7)
    m = evaluation.metrics
    fig.suptitle(f"{hardware} skip model, held out by {evaluation.split}: accuracy {m['accuracy']:.1%}, "
                 f"regret {m['regret_pct']:.2f}%, vs best fixed policy {m['vs_best_fixed_pct']:+.2f}%", fontsize=10)
    fig.tight_layout()
    return fig
