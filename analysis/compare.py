"""Two sweeps' done cells side by side: per cell matched by what it measures, how many times faster B ran than A,
with an interval where both sides kept their per-rep times, and a verdict (``wavealign.metrics``).

A side is a run root, optionally one of its sweeps (``RUN_ROOT:SWEEP``, by sweep name or id); its done rows are read
with ``analysis.load`` and the newest row of each cell kept. Cells match on ``IDENTITY``. The ratio is A's kernel
time over B's (``metrics.independent_ratio`` of the two samples of ``kernel_ms_reps``: > 1 means B is faster); rows
written before dataset schema 7 have no reps and compare their medians (``metrics.speedup``), without an interval
and so without a verdict; simulated rows compare by their predicted point (the verdict says "predicted").
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.load import latest_per_configuration, load, sweep_parent_runs
from analysis.plotting import bar_style
from analysis.report import readable
from orchestrator import dataset, files
from orchestrator.run_root import RunRoot
from wavealign import metrics, variants
from wavealign.records import order_name

# what a cell measures, for matching across sweeps (the ids also hash the code's fingerprint, so they never match);
# not how it was timed (measure_params: paired or blocked, reps), so two timing settings of one cell compare
IDENTITY = ("hardware", "backend", "measure", "method", "workload", "seq_len_tokens", "num_heads", "seed", "variant",
            "reorderer", "method_params", "reorderer_params", "backend_params")
FIGURE_DPI = 110


@dataclass(frozen=True)
class Side:
    """One side of a comparison: a run root and, optionally, one of its sweeps (by ``sweep_name`` or ``sweep_id``)."""

    run_root: Path
    sweep: str | None = None

    @classmethod
    def parse(cls, argument: str, text: str) -> Side:
        """``RUN_ROOT`` or ``RUN_ROOT:SWEEP`` (a run root whose own name holds a colon is taken whole); a
        ``ValueError`` naming ``argument`` where the folder is no run root."""
        root, sweep = RunRoot(Path(text)), None
        if not root.is_run_root() and ":" in text:
            head, _, tail = text.rpartition(":")
            root, sweep = RunRoot(Path(head)), tail or None
        if not root.is_run_root():
            raise ValueError(f"{argument} {text!r}: {root.path} {root.state()}; expected a sweep's run root, "
                             f"optionally :SWEEP (its sweep_name or sweep_id)")
        return cls(root.path, sweep)

    def __str__(self) -> str:
        return f"{self.run_root}:{self.sweep}" if self.sweep else str(self.run_root)


def done_rows(side: Side, argument: str) -> pd.DataFrame:
    """The side's done rows, newest per cell configuration, then newest per ``IDENTITY``; a ``ValueError`` naming
    ``argument`` where the sweep is not in the run root or no cell of it is done."""
    frame = load(side.run_root, latest_only=False)
    if side.sweep is not None:
        chosen = (frame["sweep_name"] == side.sweep) | (frame["sweep_id"] == side.sweep)
        if not chosen.any():
            known = sorted({f"{n} ({i})" for n, i in zip(frame["sweep_name"], frame["sweep_id"], strict=True)})
            raise ValueError(f"{argument} {str(side)!r}: no sweep named {side.sweep!r} in {side.run_root}; expected "
                             f"a sweep_name or sweep_id of {known or 'its sweeps (it has none)'}")
        frame = frame[chosen]
    frame = frame[frame["status"] == "done"]
    if frame.empty:
        raise ValueError(f"{argument} {str(side)!r}: no done cells; expected a run root with finished cells")
    frame = latest_per_configuration(frame)
    order = [c for c in dataset.ORDER_COLUMNS if c in frame.columns]
    return frame.sort_values(order, kind="stable").drop_duplicates(list(IDENTITY), keep="last")


@dataclass(frozen=True)
class SideState:
    """What one side's host was doing, from the run records of the sweeps it read (``record.host_load``): the load
    per CPU (the 5-minute average as the run ended; NaN where no record holds one) and the CPUs."""

    load_per_cpu: float
    cpus: int | None

    @property
    def cpu_share(self) -> float:
        """The share of a core a busy process got: 1 up to one runnable task per CPU, then CPUs over load."""
        return 1.0 if not self.load_per_cpu > 1 else 1.0 / self.load_per_cpu

    def __str__(self) -> str:
        if math.isnan(self.load_per_cpu):
            return "host load not recorded"
        return f"host load {self.load_per_cpu:.2f} per CPU ({self.cpus} CPUs, 5-min average at the run's end)"


def side_state(side: Side, sweep_ids: list[str]) -> SideState:
    """The highest load per CPU among the side's sweeps' latest run records (the busiest run bounds its cells)."""
    from orchestrator.record import latest_run_record, sweep_folder

    loads, cpus = [], None
    for sweep_id in sweep_ids:
        record = latest_run_record(sweep_folder(side.run_root, sweep_id)) or {}
        host = record.get("host") if isinstance(record.get("host"), dict) else {}
        load, count = host.get("load_5m"), host.get("cpus")
        if isinstance(load, int | float) and isinstance(count, int) and count > 0:
            loads.append(load / count)
            cpus = count
    return SideState(max(loads, default=math.nan), cpus)


@dataclass(frozen=True)
class CellComparison:
    """One cell of both sides, judged by what two runs can support (``compare_cell``): ``verdict`` is the
    ``speedup_verdict`` where both sides timed the cell beside its own original (``basis`` "speedup"), else the
    ``time_verdict`` (``basis`` "time"). ``ratio``: A's kernel time over B's (> 1: B faster) with its interval widened
    by the between-run noise floor; ``speedup_ratio``: B's speedup over its original divided by A's (> 1: B's launch
    order gains more), from each run's own paired reps (drift between the runs cancels). ``*_spread_pct``: the
    widest IQR (% of median) among each side's reps behind the verdict; ``*_gpu_sm_clock_mhz``: the cell's mean SM
    clock (NaN on a CPU); ``*_load_per_cpu``: its side's host load (``SideState``)."""

    identity: dict[str, Any]
    simulated: bool
    a_kernel_ms: float
    b_kernel_ms: float
    ratio: float
    ratio_ci_low: float
    ratio_ci_high: float
    verdict: str
    a_speedup_vs_original: float
    a_speedup_ci_low: float
    a_speedup_ci_high: float
    b_speedup_vs_original: float
    b_speedup_ci_low: float
    b_speedup_ci_high: float
    basis: str = "time"
    time_verdict: str = metrics.NO_VERDICT
    speedup_ratio: float = math.nan
    speedup_ratio_ci_low: float = math.nan
    speedup_ratio_ci_high: float = math.nan
    speedup_verdict: str = metrics.NO_VERDICT
    a_spread_pct: float = math.nan
    b_spread_pct: float = math.nan
    too_spread: bool = False
    a_gpu_sm_clock_mhz: float = math.nan
    b_gpu_sm_clock_mhz: float = math.nan
    a_load_per_cpu: float = math.nan
    b_load_per_cpu: float = math.nan

    @property
    def verdict_word(self) -> str:
        return self.verdict.removesuffix(metrics.PREDICTED)


@dataclass
class Comparison:
    """The matched cells, the cells found on one side only, the sweeps each side read and their hosts' state."""

    a: Side
    b: Side
    tolerance: float
    cells: list[CellComparison] = field(default_factory=list)
    only_a: list[dict[str, Any]] = field(default_factory=list)
    only_b: list[dict[str, Any]] = field(default_factory=list)
    a_sweep_ids: list[str] = field(default_factory=list)
    b_sweep_ids: list[str] = field(default_factory=list)
    a_state: SideState = field(default_factory=lambda: SideState(math.nan, None))
    b_state: SideState = field(default_factory=lambda: SideState(math.nan, None))

    def counts(self) -> dict[str, int]:
        """Matched cells per verdict (``metrics.VERDICTS``, predicted ones counted with their word) and without."""
        counts = dict.fromkeys((*metrics.VERDICTS, metrics.NO_VERDICT), 0)
        for cell in self.cells:
            counts[cell.verdict_word] += 1
        return counts

    def summary(self) -> str:
        counts = self.counts()
        line = " / ".join(f"{counts[v]} {v}" for v in metrics.VERDICTS)
        if counts[metrics.NO_VERDICT]:
            line += f" ({counts[metrics.NO_VERDICT]} without an interval: no verdict)"
        return f"{len(self.cells)} cells matched: {line}"

    def warnings(self) -> list[str]:
        """What makes verdicts meaningless: cells whose reps spread beyond ``metrics.SPREAD_LIMIT_PCT`` (their
        verdict is ambiguous), a side whose host ran more tasks than it has CPUs."""
        lines = []
        spread = [c for c in self.cells if c.too_spread]
        if spread:
            widest = max(max(c.a_spread_pct, c.b_spread_pct) for c in spread)
            lines.append(f"warning: {len(spread)} of {len(self.cells)} cells' reps spread beyond "
                         f"{metrics.SPREAD_LIMIT_PCT:.0f} % of their median (up to {widest:.0f} %): no verdict on "
                         "them can be trusted (ambiguous); rerun both sides on a quiet machine")
        for name, state in (("A", self.a_state), ("B", self.b_state)):
            if state.load_per_cpu > 1:
                lines.append(f"warning: {name} ran on a busy host ({state}): its CPU-timed cells' times are "
                             "widened by their CPU share")
        return lines

    def table(self) -> pd.DataFrame:
        """One row per matched cell: the identity columns, then the figures (units in the names), as the CSV."""
        rows = [{**c.identity, **{k: v for k, v in asdict(c).items() if k != "identity"}} for c in self.cells]
        return pd.DataFrame(rows, columns=[*IDENTITY, *(f for f in CellComparison.__dataclass_fields__
                                                        if f != "identity")])


def _value(row: pd.Series | None, column: str) -> Any:
    value = None if row is None else row.get(column)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _figure(row: pd.Series | None, column: str) -> float:
    value = _value(row, column)
    return math.nan if value is None else float(value)


def _reps(row: pd.Series | None) -> list[float]:
    value = _value(row, "kernel_ms_reps")
    return [] if value is None else [float(v) for v in value]


def _sm_clock(row: pd.Series) -> float:
    """The cell's SM clock: the mean of its readings before and after (NaN on a CPU or without NVML)."""
    readings = [v for v in (_figure(row, "gpu_sm_clock_mhz_before"), _figure(row, "gpu_sm_clock_mhz_after"))
                if math.isfinite(v) and v > 0]
    return sum(readings) / len(readings) if readings else math.nan


def _host_log(a: pd.Series, b: pd.Series, a_state: SideState, b_state: SideState) -> float:
    """What the hosts' recorded state alone could make of the time ratio, in logs: a GPU cell's SM clock ratio, a
    CPU cell's CPU-share ratio (0 where neither is known)."""
    a_clock, b_clock = _sm_clock(a), _sm_clock(b)
    if math.isfinite(a_clock) and math.isfinite(b_clock):
        return abs(math.log(a_clock / b_clock))
    if _value(a, "device") == "cpu" or _value(b, "device") == "cpu":
        return abs(math.log(a_state.cpu_share / b_state.cpu_share))
    return 0.0


def _time_ratio(a: pd.Series, b: pd.Series, a_state: SideState, b_state: SideState,
                drift_sd: float) -> metrics.Ratio:
    """A's kernel time over B's: Welch's interval of the two samples of reps, widened by the between-run floor
    (each run's reps' spread and ``drift_sd``, the runs' drift over their other cells: ``metrics.between_runs``) and
    the hosts' difference (``_host_log``); without a drift estimate (NaN), no interval."""
    a_reps, b_reps = _reps(a), _reps(b)
    ratio = metrics.independent_ratio(a_reps, b_reps)
    if math.isnan(drift_sd):
        return metrics.Ratio(ratio.point, math.nan, math.nan, ratio.samples, ratio.outliers)
    sds = [metrics.log_sd(np.log(reps)) for reps in (a_reps, b_reps)]
    return metrics.between_runs(ratio, [*sds, drift_sd], _host_log(a, b, a_state, b_state))


def _own_speedup(row: pd.Series, baseline: pd.Series | None) -> tuple[metrics.Ratio, float] | None:
    """The cell's speedup over the original timed beside it in its own run, and the robust sd of its per-rep log
    ratios (the between-run floor of that speedup); None without both reps."""
    reps, base = _reps(row), _reps(baseline)
    if not reps or not base:
        return None
    if bool(_value(row, "paired")) and bool(_value(baseline, "paired")) and len(reps) == len(base):
        return metrics.paired_ratio(base, reps), metrics.log_sd(np.log(base) - np.log(reps))
    sd = math.hypot(metrics.log_sd(np.log(base)), metrics.log_sd(np.log(reps)))
    return metrics.independent_ratio(base, reps), sd


def _speedup_ratio(a: tuple[metrics.Ratio, float], b: tuple[metrics.Ratio, float]) -> metrics.Ratio:
    """B's speedup over its own original divided by A's, with each run's interval added in quadrature and widened
    by both runs' per-rep ratio spread (``metrics.between_runs``); host drift cancels within each run's pairs."""
    (ra, sd_a), (rb, sd_b) = a, b
    point = rb.point / ra.point
    if any(math.isnan(v) for v in (ra.low, ra.high, rb.low, rb.high)):
        return metrics.Ratio(point, math.nan, math.nan, min(ra.samples, rb.samples))
    own = math.hypot(*((math.log(r.high) - math.log(r.low)) / 2 for r in (ra, rb)))
    centre = math.log(point)
    joined = metrics.Ratio(point, math.exp(centre - own), math.exp(centre + own), min(ra.samples, rb.samples))
    return metrics.between_runs(joined, [sd_a, sd_b])


def compare_cell(a: pd.Series, b: pd.Series, tolerance: float, a_baseline: pd.Series | None = None,
                 b_baseline: pd.Series | None = None, a_state: SideState = SideState(math.nan, None),
                 b_state: SideState = SideState(math.nan, None), drift_sd: float = math.nan) -> CellComparison:
    """One cell judged by what two runs can support (``metrics`` module docstring, "Two runs of one cell"):

    - its speedup over the original each run timed beside it (``a_baseline``, ``b_baseline``: the same side's
      original of the cell's group), B's over A's, where both runs have one: drift that slowed a whole run cancels;
    - its kernel times A over B, for every cell, with the between-run noise floor: each run one draw as wide as its
      reps, the drift ``drift_sd`` both runs' other cells show (``metrics.run_drift_sd``; NaN: too few cells to
      tell, and the times give no verdict), plus what the hosts' recorded state (CPU share, GPU clock) could explain.

    The verdict is the speedup's where there is one, else the times'; ambiguous whenever a sample behind it spreads
    beyond ``metrics.SPREAD_LIMIT_PCT``. Rows without reps compare their medians (no verdict); simulated rows their
    predicted points."""
    simulated = bool(_value(a, "simulated") or _value(b, "simulated"))
    a_ms, b_ms = _figure(a, "kernel_ms_median"), _figure(b, "kernel_ms_median")
    sides = {f"{name}_{column}": _figure(row, column) for name, row in (("a", a), ("b", b))
             for column in ("speedup_vs_original", "speedup_ci_low", "speedup_ci_high")}
    state = dict(a_gpu_sm_clock_mhz=_sm_clock(a), b_gpu_sm_clock_mhz=_sm_clock(b),
                 a_load_per_cpu=a_state.load_per_cpu, b_load_per_cpu=b_state.load_per_cpu)
    identity = {k: _value(b, k) for k in IDENTITY}
    if simulated or not _reps(a) or not _reps(b):
        point = metrics.speedup(a_ms, b_ms)
        judged = metrics.verdict(math.nan, math.nan, tolerance, point=point if simulated else math.nan)
        return CellComparison(identity, simulated, a_ms, b_ms, point, math.nan, math.nan, judged, **sides,
                              time_verdict=judged, **state)
    time = _time_ratio(a, b, a_state, b_state, drift_sd)
    time_verdict = metrics.verdict(time.low, time.high, tolerance) if not math.isnan(drift_sd) else "ambiguous"
    a_spreads = [metrics.spread_pct(_reps(a))]
    b_spreads = [metrics.spread_pct(_reps(b))]
    speedup = metrics.Ratio(math.nan, math.nan, math.nan, 0)
    speedup_verdict, basis = metrics.NO_VERDICT, "time"
    own_a = None if variants.of_row(b).is_baseline else _own_speedup(a, a_baseline)
    own_b = None if own_a is None else _own_speedup(b, b_baseline)
    if own_a is not None and own_b is not None:
        speedup = _speedup_ratio(own_a, own_b)
        speedup_verdict = metrics.verdict(speedup.low, speedup.high, tolerance)
        if speedup_verdict != metrics.NO_VERDICT:
            basis = "speedup"
            a_spreads.append(metrics.spread_pct(_reps(a_baseline)))
            b_spreads.append(metrics.spread_pct(_reps(b_baseline)))
    spread = metrics.too_spread(*a_spreads, *b_spreads)
    judged = speedup_verdict if basis == "speedup" else time_verdict
    if spread and judged != metrics.NO_VERDICT:
        judged = "ambiguous"
    return CellComparison(identity, simulated, a_ms, b_ms, time.point, time.low, time.high, judged, **sides,
                          basis=basis, time_verdict=time_verdict, speedup_ratio=speedup.point,
                          speedup_ratio_ci_low=speedup.low, speedup_ratio_ci_high=speedup.high,
                          speedup_verdict=speedup_verdict, a_spread_pct=_widest(a_spreads),
                          b_spread_pct=_widest(b_spreads), too_spread=spread, **state)


def _widest(spreads: list[float]) -> float:
    known = [s for s in spreads if math.isfinite(s)]
    return max(known, default=math.nan)


def _drift_sds(pairs: list[tuple[pd.Series, pd.Series]]) -> list[float]:
    """Per matched pair of rows, the runs' drift over the other measured pairs of its hardware
    (``metrics.run_drift_sd`` of their log time ratios, leaving the cell itself out: a cell that changed must not
    hide its own change)."""
    logs = [math.log(_figure(a, "kernel_ms_median") / _figure(b, "kernel_ms_median"))
            if _reps(a) and _reps(b) and not _value(a, "simulated") and not _value(b, "simulated")
            and _figure(a, "kernel_ms_median") > 0 and _figure(b, "kernel_ms_median") > 0 else math.nan
            for a, b in pairs]
    hardware = [str(_value(b, "hardware")) for _, b in pairs]
    return [metrics.run_drift_sd([other for j, other in enumerate(logs) if j != i and hardware[j] == hardware[i]])
            for i in range(len(pairs))]


def _baselines(rows: pd.DataFrame) -> dict[str, pd.Series]:
    """Each group's original row (``Variant.is_baseline``), by ``group_id``: the one a cell's speedup refers to."""
    return {row["group_id"]: row for _, row in rows.iterrows() if variants.of_row(row).is_baseline}


def _by_identity(rows: pd.DataFrame) -> dict[tuple[str, ...], pd.Series]:
    """Each row keyed by its ``IDENTITY`` values as text (sorted as text: a missing value is "None")."""
    return {tuple(str(row[k]) for k in IDENTITY): row for _, row in rows.iterrows()}


def _natural(key: tuple[str, ...]) -> tuple:
    """Identities in reading order: lengths by number (512 before 1024), the rest as text."""
    return tuple((0, int(v), "") if v.isdigit() else (1, 0, v) for v in key)


def compare(a: Side, b: Side, tolerance: float = metrics.TOLERANCE) -> Comparison:
    """Read both sides (``done_rows``) and compare every cell they share; the rest are listed per side."""
    metrics.verdict(math.nan, math.nan, tolerance)  # a tolerance outside [0, 1) is refused before any reading
    rows_a, rows_b = done_rows(a, "RUN_ROOT_A"), done_rows(b, "RUN_ROOT_B")
    by_a, by_b = _by_identity(rows_a), _by_identity(rows_b)
    base_a, base_b = _baselines(rows_a), _baselines(rows_b)
    a_ids, b_ids = sorted(rows_a["sweep_id"].unique()), sorted(rows_b["sweep_id"].unique())
    result = Comparison(a, b, tolerance, a_sweep_ids=a_ids, b_sweep_ids=b_ids, a_state=side_state(a, a_ids),
                        b_state=side_state(b, b_ids))
    shared = [key for key in sorted(by_a.keys() | by_b.keys(), key=_natural) if key in by_a and key in by_b]
    drifts = _drift_sds([(by_a[key], by_b[key]) for key in shared])
    for found in sorted(by_a.keys() | by_b.keys(), key=_natural):
        if found in by_a and found in by_b:
            row_a, row_b = by_a[found], by_b[found]
            result.cells.append(compare_cell(row_a, row_b, tolerance, base_a.get(row_a["group_id"]),
                                             base_b.get(row_b["group_id"]), result.a_state, result.b_state,
                                             drifts[shared.index(found)]))
        else:
            row = by_a.get(found, by_b.get(found))
            (result.only_a if found in by_a else result.only_b).append({k: _value(row, k) for k in IDENTITY})
    return result


def cell_labels(identities: list[dict[str, Any]]) -> list[str]:
    """Each cell named by the identity columns whose values differ among ``identities`` (method and launch order
    always), so a label is short where most of the cells share their hardware, backend and the like: the variant and
    reorderer as one launch order's name, as the summary writes it (``records.order_name``: ``wavealign[minhash]``),
    the params only where the cells need them to tell apart. The CSV keeps every identity column whole."""
    named = [{**{k: v for k, v in i.items() if k != "reorderer"}, "variant": order_name(i["variant"], i["reorderer"])}
             for i in identities]

    def label(keys: list[str]) -> list[str]:
        varying = [k for k in keys if k in ("method", "variant") or len({str(i[k]) for i in named}) > 1]
        return [" ".join(str(i[k]) for k in varying if i[k] not in (None, "{}")) for i in named]

    keys = [k for k in IDENTITY if k != "reorderer"]
    short = label([k for k in keys if not k.endswith("_params")])  # params follow the method and reorderer
    return short if len(set(short)) == len(short) else label(keys)


def rich_table(comparison: Comparison, one_line: bool = False):
    """The matched cells as a rich Table: the cell, A/B of the kernel times with its widened interval, B's speedup
    over its original relative to A's with its interval, and the verdict with its basis. ``one_line``: every figure
    on one line (for a pipe or a file, where no terminal width applies: a cell is never folded); else each interval
    under its point, to fit a terminal. Each side's own speedups are in the CSV."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="B against A (> 1: B faster)")
    table.add_column("cell", overflow="fold", no_wrap=one_line)
    for header in ("time A/B [95 %]", "speedup B/A [95 %]", "verdict"):
        table.add_column(header, no_wrap=True)
    labels = cell_labels([c.identity for c in comparison.cells])
    split = (lambda text: text) if one_line else (lambda text: text.replace(" [", "\n[").replace(" (", "\n("))
    for label, c in zip(labels, comparison.cells, strict=True):
        said = c.verdict == metrics.NO_VERDICT or c.verdict.endswith(metrics.PREDICTED)
        verdict = c.verdict if said else f"{c.verdict} ({c.basis})"
        table.add_row(label, split(metrics.interval_text(c.ratio, c.ratio_ci_low, c.ratio_ci_high)),
                      split(metrics.interval_text(c.speedup_ratio, c.speedup_ratio_ci_low, c.speedup_ratio_ci_high)),
                      split(verdict))
    return table


def one_sided_lines(comparison: Comparison) -> list[str]:
    """The cells found on one side only, one line each, named as among all the cells of both sides."""
    one_sided = [*comparison.only_a, *comparison.only_b]
    labels = cell_labels([*(c.identity for c in comparison.cells), *one_sided])[len(comparison.cells):]
    sides = ["A"] * len(comparison.only_a) + ["B"] * len(comparison.only_b)
    return [f"only in {side}: {label}" for side, label in zip(sides, labels, strict=True)]


def ratio_figure(comparison: Comparison):
    """One bar per matched cell from 1 to its ratio, with the interval as error bars, the band of ``1 +-
    tolerance`` shaded, a mark on same (=) and ambiguous (?) cells, simulated cells hatched."""
    import matplotlib.pyplot as plt

    cells = comparison.cells
    labels = cell_labels([c.identity for c in cells])
    fig, ax = plt.subplots(figsize=(7.5, 1.2 + 0.45 * max(1, len(cells))))
    ax.axvspan(1 - comparison.tolerance, 1 + comparison.tolerance, color="0.9", zorder=0)
    ax.axvline(1.0, color="0.4", linewidth=0.8)
    for y, c in enumerate(cells):
        colour = {"faster": "tab:green", "slower": "tab:red"}.get(c.verdict_word, "tab:gray")
        ax.barh(y, c.ratio - 1, left=1, color=colour, **bar_style(c.simulated))
        if not math.isnan(c.ratio_ci_low):
            ax.errorbar(c.ratio, y, xerr=[[c.ratio - c.ratio_ci_low], [c.ratio_ci_high - c.ratio]], color="black",
                        capsize=3, linewidth=1)
        mark = {"same": "=", "ambiguous": "?"}.get(c.verdict_word)
        if mark:
            ax.annotate(mark, (c.ratio, y), xytext=(8, 0), textcoords="offset points", va="center", fontsize=12,
                        fontweight="bold")
    ax.set_yticks(range(len(cells)), [f"{label} (simulated)" if c.simulated else label
                                      for label, c in zip(labels, cells, strict=True)], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("A's kernel time / B's (> 1: B faster)")
    ax.set_title(f"A = {comparison.a}  vs  B = {comparison.b}", fontsize=9)
    fig.tight_layout()
    return fig


@dataclass(frozen=True)
class ComparisonFiles:
    csv: Path
    html: Path


def write(comparison: Comparison, out_dir: Path) -> ComparisonFiles:
    """``compare.csv`` (one row per matched cell) and ``compare.html`` (the table, the figure as an embedded PNG,
    the one-sided cells and the verdict rule) in ``out_dir``."""
    import io

    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    table = comparison.table()
    csv = out_dir / "compare.csv"
    # written whole under a new name and renamed into place: a link planted at compare.csv is replaced, never
    # followed to overwrite what it names
    files.write_whole(csv, table.to_csv(index=False))
    fig = ratio_figure(comparison)
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=FIGURE_DPI)
    plt.close(fig)
    one_sided = "".join(f"<li>{html.escape(line)}</li>" for line in one_sided_lines(comparison)) or "<li>none</li>"
    body = (f"<h1>A = {html.escape(str(comparison.a))} vs B = {html.escape(str(comparison.b))}</h1>"
            f"<p>{html.escape(comparison.summary())}</p>"
            + "".join(f"<p>{html.escape(line)}</p>" for line in (*comparison.warnings(), *rules(comparison)))
            + f'<img alt="ratio per cell" src="data:image/png;base64,{base64.b64encode(png.getvalue()).decode()}" '
            'style="max-width:100%">'
            + table.to_html(index=False, escape=True, na_rep=readable(math.nan),
                            formatters={c: readable for c in table.columns})
            + f"<h2>Cells on one side only</h2><ul>{one_sided}</ul>")
    page = out_dir / "compare.html"
    files.write_whole(page, "<!DOCTYPE html><html><head><meta charset='utf-8'><title>wavealign compare</title><style>"
                    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:13px}"
                    "td,th{border:1px solid #ccc;padding:3px 6px}</style></head><body>" + body + "</body></html>")
    return ComparisonFiles(csv, page)


def rules(comparison: Comparison) -> list[str]:
    """How the verdicts were reached, as printed under the table and on the page; and each side's host."""
    return [metrics.VERDICT_RULE.format(tol=comparison.tolerance), COMPARE_RULE,
            metrics.SPREAD_RULE.format(limit=metrics.SPREAD_LIMIT_PCT),
            f"A: {comparison.a_state}; B: {comparison.b_state}"]


COMPARE_RULE = ("compare: a cell timed beside its original in both runs is judged by B's speedup over it against "
                "A's (drift between runs cancels), any other by its kernel times; both intervals widened by a "
                "between-run floor (each run one draw as wide as its reps, plus the hosts' CPU share or GPU clock "
                "ratio); at most 5 % of cells that did not change are called faster or slower")
COMPARE_TAG = "wavealign.compare."


def log_to_mlflow(comparison: Comparison, files: ComparisonFiles, tracking_uri: str,
                  experiment: str = "wavealign") -> str:
    """Log the comparison as one run (kind ``compare``) of ``experiment``: tags naming both sides, their sweep ids
    and sweep parent runs (looked up in ``tracking_uri`` and in each run root's own store), the verdict counts as
    metrics, the CSV and HTML as artifacts; returns its run id."""
    from mlflow.tracking import MlflowClient

    from analysis.load import SWEEP_KIND_TAG
    tags = {SWEEP_KIND_TAG: "compare", f"{COMPARE_TAG}tolerance": str(comparison.tolerance)}
    for name, side, sweep_ids in (("a", comparison.a, comparison.a_sweep_ids),
                                  ("b", comparison.b, comparison.b_sweep_ids)):
        root = RunRoot(side.run_root)
        stores = dict.fromkeys([tracking_uri, *([root.tracking_uri] if root.store.is_file() else [])])
        parents = dict.fromkeys(run for store in stores for run in sweep_parent_runs(store, sweep_ids))
        tags.update({f"{COMPARE_TAG}{name}_run_root": str(side.run_root.resolve()),
                     f"{COMPARE_TAG}{name}_sweep_ids": ",".join(sweep_ids),
                     f"{COMPARE_TAG}{name}_parent_run": ",".join(parents)})
    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    # a local store keeps the artifacts beside the comparison (MLflow's default is ./mlruns, wherever it runs)
    local = not tracking_uri.startswith(("http://", "https://", "databricks"))
    location = RunRoot(files.csv.parent).artifact_uri if local else None
    experiment_id = found.experiment_id if found else client.create_experiment(experiment, artifact_location=location)
    run = client.create_run(experiment_id, run_name=f"compare {comparison.a.run_root.name} "
                                                    f"{comparison.b.run_root.name}", tags=tags)
    run_id = run.info.run_id
    for verdict, count in comparison.counts().items():
        client.log_metric(run_id, f"n_{'no_verdict' if verdict == metrics.NO_VERDICT else verdict}", count)
    client.log_metric(run_id, "n_only_a", len(comparison.only_a))
    client.log_metric(run_id, "n_only_b", len(comparison.only_b))
    for path in (files.csv, files.html):
        client.log_artifact(run_id, str(path), "compare")
    client.set_terminated(run_id)
    return run_id
