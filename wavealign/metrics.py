"""Every figure derived from measured ones, each defined once: the speedup and its baseline, its confidence interval
and verdict, attention FLOPs and TFLOP/s, the 1/rho bound, operational intensity.

The pipeline computes a cell's derived figures here at record time, and the summary, the report, the figures, MLflow
and ``wavealign compare`` read them from the record (or call these same functions on columns: every function takes
floats or numpy/pandas arrays alike), so a speedup never means two things.

Speedups and their intervals
    A speedup is ``baseline_ms / ms`` (> 1: faster than the baseline). Timed side by side (``paired_ratio``: the
    baseline and the variant launched alternately, rep by rep), it is the geometric mean of the per-rep ratios, with
    a Student-t interval on their logarithms: drift that falls on both launches of a rep cancels in its ratio. Two
    samples taken apart (``independent_ratio``: two sweeps in ``wavealign compare``) compare their geometric means,
    with Welch's interval on the difference of the mean logarithms. Ratios outside Tukey's fences (1.5 IQR beyond the
    quartiles of the log ratios: a rep hit by a context switch or a clock change) are dropped before either, and
    counted. The interval's level is ``LEVEL`` (95 %).

Verdicts (written once here, shown in the summary's notes: ``VERDICT_RULE``)
    faster      the whole interval lies above ``1 + tolerance``
    slower      the whole interval lies below ``1 - tolerance``
    same        the whole interval lies within ``1 +- tolerance``
    ambiguous   the interval crosses ``1 + tolerance`` or ``1 - tolerance``: more repetitions could tell
    A prediction (a simulated cell) has no spread: its point decides, and the verdict says it was predicted.
    Too much spread (``SPREAD_RULE``): where a sample's interquartile range exceeds ``SPREAD_LIMIT_PCT`` of its
    median (a loaded CPU: 119-132 % was seen at load 10-30), its reps are not independent draws around one time (a
    burst of load slows a run of them), a t interval over them is too narrow, and the verdict is ambiguous with a
    warning, whatever the interval says (``too_spread``).

Two runs of one cell (``wavealign compare``)
    Reps of one run say nothing of what differs between runs (the host's load, the GPU's clocks, the process's
    memory layout): five identical CPU sweeps gave 50 faster/slower verdicts in 100 from intervals of the reps
    alone. So a comparison's interval adds a between-run noise floor (``between_runs``): each run's time is taken
    as one draw from a distribution as wide as its reps (a robust standard deviation of their logs, ``log_sd``),
    and a known difference of the host (CPU share, GPU clock) widens it by that much. Kernel times also get the
    drift the two runs' other cells show (``run_drift_sd``): a host that ran every cell 3x slower for a minute (seen
    at load 2 on 2 cores, with the 5-minute load average still under 1) is not in any one cell's reps, and two runs
    cannot tell a change every cell shares from such a host; a speedup over an original timed in the same run is
    free of it (its drift cancels in each rep's ratio).

One speedup over several cells (written once here, shown beside the verdict rule: ``AGGREGATE_RULE``)
    A summary line, a Table II row, a figure's bar or point that stands for several cells (seeds, workloads,
    lengths) shows the geometric mean of their speedups, with a Student-t interval across their logarithms (each
    cell one sample: the spread between cells, not within them; no cell dropped), judged by the verdict rule. One
    cell shows its own interval; a measured cell without one (a single rep) has no verdict. Predictions show the
    geometric mean of their points, judged as predictions. The baseline's own cells show their point, ``BASELINE``.
    ``aggregate`` is the one implementation: the summary, the report's tables and every figure call it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95  # the confidence level of every interval
TOLERANCE = 0.01  # a speedup within 1 +- 1 % is the same time: the verdicts' default band (grid.verdict_tolerance)
TUKEY_FENCE = 1.5  # log ratios beyond 1.5 IQR of their quartiles are outliers (Tukey's fences)
VERDICTS = ("faster", "slower", "same", "ambiguous")
NO_VERDICT = "-"  # the verdict of a speedup with neither an interval nor a point to judge
PREDICTED = " (predicted)"  # appended to a simulated cell's verdict: a model's point, not a measurement's interval
VERDICT_RULE = ("verdict: faster / slower when the whole 95 % interval lies beyond 1 +- {tol:.1%}; same when it lies "
                "within; ambiguous when it crosses either edge; (predicted): a simulated point, no interval")
SPREAD_LIMIT_PCT = 25.0  # a sample's IQR beyond 25 % of its median: a t interval over its reps cannot be trusted
SPREAD_RULE = ("spread: a time whose reps' IQR exceeds {limit:.0f} % of their median gives no verdict (ambiguous, "
               "with a warning)")
DRIFT_CELLS = 2  # other cells of both runs it takes to estimate the runs' drift (``run_drift_sd``)
_IQR_PER_SD = 1.349  # a normal distribution's interquartile range in standard deviations
BASELINE = "baseline"  # the verdict shown for the baseline's own cells: the speedups refer to them
AGGREGATE_RULE = ("several cells on one line or bar: the geometric mean of their speedups with a 95 % t interval "
                  "across their logs, judged by the same rule; one cell: its own interval")

# Student's t quantile t_{0.975, df} for df = 1..30 (two-sided 95 %; any statistics table, e.g. NIST/SEMATECH
# e-Handbook 1.3.6.7.2); beyond 30 the Cornish-Fisher expansion of the normal quantile is within 1e-4 of it
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
_Z975 = 1.959964


def speedup(baseline_ms, ms):
    """How many times faster than the baseline: ``baseline_ms / ms`` (floats or arrays)."""
    return baseline_ms / ms


def t_quantile(df: int) -> float:
    """Student's t quantile at ``LEVEL`` (two-sided) for ``df`` degrees of freedom (>= 1)."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


@dataclass(frozen=True)
class Ratio:
    """A speedup with its interval at ``LEVEL``: ``point`` (the geometric mean of the kept ratios), ``low`` and
    ``high`` (NaN when fewer than two ratios are kept), ``samples`` kept and ``outliers`` dropped."""

    point: float
    low: float
    high: float
    samples: int
    outliers: int = 0

    @property
    def half_width_pct(self) -> float:
        """Half the interval's width as a share of the point, in percent (NaN without an interval)."""
        return 100 * (self.high - self.low) / (2 * self.point)

    def verdict(self, tolerance: float = TOLERANCE) -> str:
        return verdict(self.low, self.high, tolerance)


def _logs(values: Sequence[float]) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or not np.all(np.isfinite(array)) or np.any(array <= 0):
        raise ValueError(f"times and ratios must be finite and > 0, got {list(values)[:8]}")
    return np.log(array)


def _drop_outliers(logs: np.ndarray) -> np.ndarray:
    """The logs within Tukey's fences (all of them when fewer than four: no quartiles to speak of)."""
    if logs.size < 4:
        return logs
    q1, q3 = np.quantile(logs, [0.25, 0.75])
    reach = TUKEY_FENCE * (q3 - q1)
    return logs[(logs >= q1 - reach) & (logs <= q3 + reach)]


def _t_interval(logs: np.ndarray) -> tuple[float, float, float]:
    """The geometric mean of ``exp(logs)`` and its Student-t interval at ``LEVEL`` (NaN with fewer than two)."""
    mean = float(logs.mean())
    if logs.size < 2:
        return math.exp(mean), math.nan, math.nan
    reach = t_quantile(logs.size - 1) * float(logs.std(ddof=1)) / math.sqrt(logs.size)
    return math.exp(mean), math.exp(mean - reach), math.exp(mean + reach)


def ratio_of_logs(log_ratios: Sequence[float]) -> Ratio:
    """A speedup from per-rep log ratios: their geometric mean and Student-t interval, outliers dropped."""
    logs = np.asarray(log_ratios, dtype=float)
    kept = _drop_outliers(logs)
    return Ratio(*_t_interval(kept), int(kept.size), int(logs.size - kept.size))


def paired_ratio(baseline_ms: Sequence[float], ms: Sequence[float], extra_ms: float = 0.0) -> Ratio:
    """The speedup of ``ms`` over ``baseline_ms``, timed in pairs (rep i of each launched one after the other):
    per-rep ratios ``baseline_ms[i] / (ms[i] + extra_ms)`` (``extra_ms``: a cost paid once per launch, e.g. the
    reorder's plan, for the net speedup)."""
    if len(baseline_ms) != len(ms) or not len(ms):
        raise ValueError(f"paired times must be two equal, non-empty lists, got {len(baseline_ms)} and {len(ms)}")
    return ratio_of_logs(_logs(baseline_ms) - _logs(np.asarray(ms, dtype=float) + extra_ms))


def independent_ratio(baseline_ms: Sequence[float], ms: Sequence[float]) -> Ratio:
    """The speedup of ``ms`` over ``baseline_ms`` from two samples taken apart: the ratio of their geometric means,
    with Welch's interval on the difference of their mean logs (each sample's outliers dropped)."""
    a, b = _drop_outliers(_logs(baseline_ms)), _drop_outliers(_logs(ms))
    outliers = len(baseline_ms) + len(ms) - a.size - b.size
    point = float(np.exp(a.mean() - b.mean()))
    if a.size < 2 or b.size < 2:
        return Ratio(point, math.nan, math.nan, int(min(a.size, b.size)), outliers)
    va, vb = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
    if va + vb == 0:
        return Ratio(point, point, point, int(min(a.size, b.size)), outliers)
    df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))  # Welch-Satterthwaite
    reach = t_quantile(max(1, math.floor(df))) * math.sqrt(va + vb)
    mean = float(a.mean() - b.mean())
    return Ratio(point, math.exp(mean - reach), math.exp(mean + reach), int(min(a.size, b.size)), outliers)


def spread_pct(times: Sequence[float]) -> float:
    """The interquartile range of ``times`` as a percentage of their median (NaN with fewer than two, or a median
    that is not positive): the spread ``SPREAD_LIMIT_PCT`` judges."""
    array = np.asarray(times, dtype=float)
    array = array[np.isfinite(array)]
    if array.size < 2:
        return math.nan
    q1, median, q3 = np.quantile(array, [0.25, 0.5, 0.75])
    return 100 * float(q3 - q1) / float(median) if median > 0 else math.nan


def too_spread(*spreads_pct: float) -> bool:
    """Whether any of the spreads (``spread_pct``; NaN: unknown, not judged) exceeds ``SPREAD_LIMIT_PCT``."""
    return any(s > SPREAD_LIMIT_PCT for s in spreads_pct if s is not None and math.isfinite(s))


def log_sd(logs: Sequence[float]) -> float:
    """A robust standard deviation of ``logs``: their IQR over a normal's (1.349 sd), so the rep a context switch
    slowed widens it no more than one rep; 0 with fewer than two."""
    array = np.asarray(logs, dtype=float)
    if array.size < 2:
        return 0.0
    q1, q3 = np.quantile(array, [0.25, 0.75])
    return float(q3 - q1) / _IQR_PER_SD


def run_drift_sd(log_ratios: Sequence[float]) -> float:
    """How far two runs' times of unchanged cells drift apart, from the log time ratios of other cells of the same
    two runs on the same hardware: a robust root mean square around 1 (not around their mean: a drift every cell
    shares, a busier host, counts), ``median(|log ratio|) / 0.6745`` (a normal's median absolute value in standard
    deviations). NaN with fewer than ``DRIFT_CELLS``: two runs alone cannot tell their drift from a change."""
    logs = np.abs(np.asarray(log_ratios, dtype=float))
    logs = logs[np.isfinite(logs)]
    return float(np.median(logs)) / 0.6745 if logs.size >= DRIFT_CELLS else math.nan


def between_runs(ratio: Ratio, run_sds: Sequence[float], host_log: float = 0.0) -> Ratio:
    """``ratio`` (the two runs' samples compared, ``independent_ratio``, or their two speedups) with its interval
    widened by a between-run noise floor: each run's figure as one draw from a distribution of standard deviation
    ``run_sds`` (in logs, ``log_sd``), the two added in quadrature at ``LEVEL`` to the interval's own half-width;
    then ``host_log``, a known difference of the hosts (in logs: a CPU share or GPU clock ratio), added whole. The
    point is kept. Without an interval, none is made."""
    if math.isnan(ratio.low) or math.isnan(ratio.high):
        return ratio
    own = (math.log(ratio.high) - math.log(ratio.low)) / 2
    floor = _Z975 * math.sqrt(sum(sd * sd for sd in run_sds))
    reach = math.sqrt(own * own + floor * floor) + abs(host_log)
    centre = (math.log(ratio.high) + math.log(ratio.low)) / 2
    return Ratio(ratio.point, math.exp(centre - reach), math.exp(centre + reach), ratio.samples, ratio.outliers)


def verdict(low: float, high: float, tolerance: float = TOLERANCE, point: float = math.nan,
            spreads_pct: Sequence[float] = ()) -> str:
    """The verdict on a speedup from its interval (``VERDICT_RULE``); without one (NaN) the ``point`` decides, as
    a prediction (``PREDICTED`` appended), and with neither it is ``NO_VERDICT``. ``spreads_pct``: the reps'
    spreads (``spread_pct``) behind a measured interval; one beyond ``SPREAD_LIMIT_PCT`` makes it ambiguous
    (``SPREAD_RULE``)."""
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance}")
    if math.isnan(low) or math.isnan(high):
        if math.isnan(point):
            return NO_VERDICT
        low = high = point
        suffix = PREDICTED
    else:
        suffix = ""
    if low > 1 + tolerance:
        word = "faster"
    elif high < 1 - tolerance:
        word = "slower"
    elif low >= 1 - tolerance and high <= 1 + tolerance:
        word = "same"
    else:
        word = "ambiguous"
    if not suffix and too_spread(*spreads_pct):
        word = "ambiguous"
    return word + suffix


@dataclass(frozen=True)
class Shown:
    """A speedup as shown for one or more cells (``aggregate``): its point, its interval at ``LEVEL`` (NaN where
    none applies), its verdict and how many cells it stands for."""

    point: float
    low: float
    high: float
    verdict: str
    cells: int


def recorded_tolerance(tolerances: Sequence[float | None]) -> float:
    """The verdicts' tolerance cells were judged with: the first recorded (finite) one, else ``TOLERANCE``."""
    return next((float(t) for t in tolerances if t is not None and math.isfinite(t)), TOLERANCE)


def aggregate(points: Sequence[float], lows: Sequence[float], highs: Sequence[float], *, predicted: bool = False,
              baseline: bool = False, tolerance: float = TOLERANCE,
              spreads_pct: Sequence[float] = ()) -> Shown:
    """The one speedup shown for cells of ``points`` (their own intervals ``lows``/``highs``, NaN where none) by
    ``AGGREGATE_RULE``: cells without a finite positive point are left out; one cell keeps its interval; several
    give their geometric mean with a Student-t interval across their logs; ``predicted`` cells give their geometric
    mean, judged as a prediction; ``baseline`` cells their geometric mean, ``BASELINE``. ``spreads_pct``: the reps'
    spreads (``spread_pct``) behind these speedups; one beyond ``SPREAD_LIMIT_PCT`` makes a verdict ambiguous
    (``SPREAD_RULE``)."""
    points, lows, highs = (np.asarray(v, dtype=float).reshape(-1) for v in (points, lows, highs))
    if not points.size == lows.size == highs.size:
        raise ValueError(f"points, lows and highs must be as long, got {points.size}, {lows.size}, {highs.size}")
    kept = np.isfinite(points) & (points > 0)
    cells = int(kept.sum())
    if not cells:
        return Shown(math.nan, math.nan, math.nan, NO_VERDICT, 0)
    point, low, high = _t_interval(np.log(points[kept]))
    if baseline:
        return Shown(point, math.nan, math.nan, BASELINE, cells)
    if predicted:
        return Shown(point, math.nan, math.nan, verdict(math.nan, math.nan, tolerance, point), cells)
    if cells == 1:
        point, low, high = float(points[kept][0]), float(lows[kept][0]), float(highs[kept][0])
    return Shown(point, low, high, verdict(low, high, tolerance, spreads_pct=spreads_pct), cells)


def interval_text(point: float, low: float, high: float) -> str:
    """A speedup as printed: ``1.102 [1.095, 1.110]``, or the point alone without an interval, ``-`` without
    either."""
    if point is None or math.isnan(point):
        return "-"
    if math.isnan(low) or math.isnan(high):
        return f"{point:.3f}"
    return f"{point:.3f} [{low:.3f}, {high:.3f}]"


def attention_flops(seq_q, seq_kv, head_dim, heads, density=1.0, batch=1):
    """FLOPs of the attention forward that a block density ``density`` leaves: 4 * Nq * Nkv * D * H * rho (two
    matrix products of 2 * Nq * Nkv * D each); floats or arrays."""
    if np.any((np.asarray(density) < 0) | (np.asarray(density) > 1)):
        raise ValueError(f"density must be in [0, 1], got {density}")
    return 4.0 * seq_q * seq_kv * head_dim * heads * batch * density


def tflops(flops, ms):
    """Useful FLOPs per second, in TFLOP/s, of ``flops`` done in ``ms`` milliseconds."""
    return flops / (ms * 1e-3) / 1e12


def bound_speedup(density):
    """The compute-proportional bound on a sparse launch's speedup over dense: 1 / rho."""
    return 1.0 / density


def gap_to_bound(dense_ms, sparse_ms, density):
    """(1/rho) / (dense_ms / sparse_ms): 1.0 when the kernel saves exactly the compute the mask skips."""
    return bound_speedup(density) / speedup(dense_ms, sparse_ms)


def operational_intensity(flops, dram_bytes):
    """FLOPs per byte of DRAM traffic (the roofline's x axis)."""
    return flops / dram_bytes


def headroom_captured(speedup: float, limit_speedup: float) -> float:
    """The share of the headroom an order takes: (t_orig / t_order - 1) / (t_orig / t_limit - 1), from its speedup
    over the original and the order limit's (``sim.order_limit``); NaN where the limit leaves no headroom."""
    if not (math.isfinite(speedup) and math.isfinite(limit_speedup)) or limit_speedup <= 1.0:
        return math.nan
    return (speedup - 1.0) / (limit_speedup - 1.0)
