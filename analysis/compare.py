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

import pandas as pd

from wavealign import metrics
from wavealign.analysis.load import (
    is_run_root,
    latest_per_configuration,
    load,
    run_root_state,
    sweep_parent_runs,
)
from wavealign.analysis.plotting import bar_style
from wavealign.analysis.report import readable
from wavealign.orchestrator import dataset
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
        root, sweep = Path(text), None
        if not is_run_root(root) and ":" in text:
            head, _, tail = text.rpartition(":")
            root, sweep = Path(head), tail or None
        if not is_run_root(root):
            raise ValueError(f"{argument} {text!r}: {root} {run_root_state(root)}; expected a sweep's run root, "
                             f"optionally :SWEEP (its sweep_name or sweep_id)")
        return cls(root, sweep)

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
class CellComparison:
    """One cell of both sides: its identity, each side's kernel time and speedup over its own original, and the
    ratio A/B (> 1: B faster) with its interval (NaN without one) and verdict."""

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

    @property
    def verdict_word(self) -> str:
        return self.verdict.removesuffix(metrics.PREDICTED)


@dataclass
class Comparison:
    """The matched cells, the cells found on one side only, and the sweeps each side read."""

    a: Side
    b: Side
    tolerance: float
    cells: list[CellComparison] = field(default_factory=list)
    only_a: list[dict[str, Any]] = field(default_factory=list)
    only_b: list[dict[str, Any]] = field(default_factory=list)
    a_sweep_ids: list[str] = field(default_factory=list)
    b_sweep_ids: list[str] = field(default_factory=list)

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

    def table(self) -> pd.DataFrame:
        """One row per matched cell: the identity columns, then the figures (units in the names), as the CSV."""
        rows = [{**c.identity, **{k: v for k, v in asdict(c).items() if k != "identity"}} for c in self.cells]
        return pd.DataFrame(rows, columns=[*IDENTITY, *(f for f in CellComparison.__dataclass_fields__
                                                        if f != "identity")])


def _value(row: pd.Series, column: str) -> Any:
    value = row.get(column)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _figure(row: pd.Series, column: str) -> float:
    value = _value(row, column)
    return math.nan if value is None else float(value)


def _reps(row: pd.Series) -> list[float]:
    value = _value(row, "kernel_ms_reps")
    return [] if value is None else [float(v) for v in value]


def compare_cell(a: pd.Series, b: pd.Series, tolerance: float) -> CellComparison:
    """The ratio of A's kernel time to B's and its verdict (``metrics``): an interval from both samples of per-rep
    times when both have two or more, else the medians' point (a prediction's verdict for simulated rows)."""
    simulated = bool(_value(a, "simulated") or _value(b, "simulated"))
    a_ms, b_ms = _figure(a, "kernel_ms_median"), _figure(b, "kernel_ms_median")
    a_reps, b_reps = _reps(a), _reps(b)
    if not simulated and a_reps and b_reps:
        ratio = metrics.independent_ratio(a_reps, b_reps)
        point, low, high = ratio.point, ratio.low, ratio.high
    else:
        point, low, high = metrics.speedup(a_ms, b_ms), math.nan, math.nan
    verdict = metrics.verdict(low, high, tolerance, point=point if simulated else math.nan)
    sides = {f"{name}_{column}": _figure(row, column) for name, row in (("a", a), ("b", b))
             for column in ("speedup_vs_original", "speedup_ci_low", "speedup_ci_high")}
    return CellComparison({k: _value(b, k) for k in IDENTITY}, simulated, a_ms, b_ms, point, low, high, verdict,
                          **sides)


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
    result = Comparison(a, b, tolerance, a_sweep_ids=sorted(rows_a["sweep_id"].unique()),
                        b_sweep_ids=sorted(rows_b["sweep_id"].unique()))
    for found in sorted(by_a.keys() | by_b.keys(), key=_natural):
        if found in by_a and found in by_b:
            result.cells.append(compare_cell(by_a[found], by_b[found], tolerance))
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


def rich_table(comparison: Comparison):
    """The matched cells as a rich Table that fits 80 columns: the cell, A/B with its interval, the verdict, and each
    side's speedup over its own original."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="B's speedup over A (A's kernel time / B's)")
    table.add_column("cell", overflow="fold", min_width=12)
    table.add_column("A/B [95 %]", no_wrap=True)
    table.add_column("verdict")
    for header in ("A vs orig", "B vs orig"):
        table.add_column(header, no_wrap=True)
    labels = cell_labels([c.identity for c in comparison.cells])
    for label, c in zip(labels, comparison.cells, strict=True):
        table.add_row(label, _two_lines(c.ratio, c.ratio_ci_low, c.ratio_ci_high), c.verdict.replace(" (", "\n("),
                      _two_lines(c.a_speedup_vs_original, c.a_speedup_ci_low, c.a_speedup_ci_high),
                      _two_lines(c.b_speedup_vs_original, c.b_speedup_ci_low, c.b_speedup_ci_high))
    return table


def _two_lines(point: float, low: float, high: float) -> str:
    """A speedup with its interval under it (``metrics.interval_text`` split), to keep the column narrow."""
    return metrics.interval_text(point, low, high).replace(" [", "\n[")


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
    table.to_csv(csv, index=False)
    fig = ratio_figure(comparison)
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=FIGURE_DPI)
    plt.close(fig)
    one_sided = "".join(f"<li>{html.escape(line)}</li>" for line in one_sided_lines(comparison)) or "<li>none</li>"
    body = (f"<h1>A = {html.escape(str(comparison.a))} vs B = {html.escape(str(comparison.b))}</h1>"
            f"<p>{html.escape(comparison.summary())}</p>"
            f"<p>{html.escape(metrics.VERDICT_RULE.format(tol=comparison.tolerance))}</p>"
            f'<img alt="ratio per cell" src="data:image/png;base64,{base64.b64encode(png.getvalue()).decode()}" '
            'style="max-width:100%">'
            + table.to_html(index=False, escape=True, na_rep=readable(math.nan),
                            formatters={c: readable for c in table.columns})
            + f"<h2>Cells on one side only</h2><ul>{one_sided}</ul>")
    page = out_dir / "compare.html"
    page.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'><title>wavealign compare</title><style>"
                    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:13px}"
                    "td,th{border:1px solid #ccc;padding:3px 6px}</style></head><body>" + body + "</body></html>")
    return ComparisonFiles(csv, page)


COMPARE_TAG = "wavealign.compare."


def log_to_mlflow(comparison: Comparison, files: ComparisonFiles, tracking_uri: str,
                  experiment: str = "wavealign") -> str:
    """Log the comparison as one run (kind ``compare``) of ``experiment``: tags naming both sides, their sweep ids
    and sweep parent runs (looked up in ``tracking_uri`` and in each run root's own store), the verdict counts as
    metrics, the CSV and HTML as artifacts; returns its run id."""
    from mlflow.tracking import MlflowClient

    from wavealign.analysis.load import SWEEP_KIND_TAG
    from wavealign.orchestrator.tracking import default_tracking_uri

    tags = {SWEEP_KIND_TAG: "compare", f"{COMPARE_TAG}tolerance": str(comparison.tolerance)}
    for name, side, sweep_ids in (("a", comparison.a, comparison.a_sweep_ids),
                                  ("b", comparison.b, comparison.b_sweep_ids)):
        stores = dict.fromkeys([tracking_uri, *([default_tracking_uri(side.run_root)]
                                                if (side.run_root / "mlflow.db").is_file() else [])])
        parents = dict.fromkeys(run for store in stores for run in sweep_parent_runs(store, sweep_ids))
        tags.update({f"{COMPARE_TAG}{name}_run_root": str(side.run_root.resolve()),
                     f"{COMPARE_TAG}{name}_sweep_ids": ",".join(sweep_ids),
                     f"{COMPARE_TAG}{name}_parent_run": ",".join(parents)})
    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    # a local store keeps the artifacts beside the comparison (MLflow's default is ./mlruns, wherever it runs)
    local = not tracking_uri.startswith(("http://", "https://", "databricks"))
    location = (files.csv.parent / "mlartifacts").resolve().as_uri() if local else None
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
