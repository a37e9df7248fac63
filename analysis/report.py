"""The sweep report: every figure as a PNG and one self-contained HTML page (figures embedded as base64,
tables inline), so the page opens alone, e.g. as an MLflow artifact."""

from __future__ import annotations

import base64
import html
import numbers
import time
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from analysis.figures import FIGURES
from analysis.load import is_unplaced
from analysis.plotting import left_out_because
from analysis.tables import TABLE_TITLES, TABLES, tolerance
from wavealign import metrics

FIGURE_DPI = 110


@dataclass
class ReportFiles:
    """What ``write_report`` wrote: the page, each figure's PNG and the table of what it drew (``figure_rows``:
    ``<figure>.csv``, one row per drawn point or bar), and each table's CSV."""

    html: Path
    figures: dict[str, Path] = field(default_factory=dict)
    figure_rows: dict[str, Path] = field(default_factory=dict)
    tables: dict[str, Path] = field(default_factory=dict)

    def all_paths(self) -> list[Path]:
        return [self.html, *self.figures.values(), *self.figure_rows.values(), *self.tables.values()]


@dataclass
class WrittenFigures:
    """What ``write_figures`` wrote: each figure's PNG and rows' CSV by name, each figure's title, and each figure
    left out for want of data with the reason (``plotting.left_out_because``)."""

    pngs: dict[str, Path] = field(default_factory=dict)
    rows: dict[str, Path] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)


def write_figures(frame: pd.DataFrame, out_dir: Path) -> WrittenFigures:
    """Each of ``FIGURES`` that has data as ``<out_dir>/<name>.png``, and beside it ``<name>.csv``: the rows it drew
    (``PaperFigure.rows``, the very frame its drawing read; ``NO_VALUE`` where a figure does not apply)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = WrittenFigures()
    for name, figure in FIGURES.items():
        rows = figure.rows(frame)
        fig = figure.draw(rows)
        suptitle = fig._suptitle.get_text() if fig._suptitle is not None else ""
        written.titles[name] = suptitle or (fig.axes[0].get_title() if fig.axes else name)
        png, csv = out_dir / f"{name}.png", out_dir / f"{name}.csv"
        if (reason := left_out_because(fig)) is not None:
            written.left_out[name] = reason
            png.unlink(missing_ok=True)  # an earlier report's, of other results
            csv.unlink(missing_ok=True)
        else:
            fig.savefig(png, dpi=FIGURE_DPI)
            rows.to_csv(csv, index=False, na_rep=NO_VALUE)
            written.pngs[name], written.rows[name] = png, csv
        plt.close(fig)
    return written


# how the report spells a column name's words, and the units its suffix carries
_WORDS = {"hbm": "HBM", "sol": "SOL", "l2": "L2", "ncu": "NCU", "dram": "DRAM", "tflops": "TFLOP/s", "gb": "GB",
          "iqr": "IQR", "cv": "CV", "nnz": "NNZ", "ctas": "CTAs", "sm": "SM", "seq": "sequence", "len": "length",
          "num": ""}
_UNITS = {"ms": "ms", "pct": "%", "gb": "GB", "bytes": "bytes", "tokens": "tokens", "s": "s"}


def column_label(name: str) -> str:
    """A column name as a reader reads it: ``kernel_ms`` -> "kernel (ms)", ``hbm_sol_pct`` -> "HBM SOL (%)"."""
    words = str(name).split("_")
    unit = _UNITS.get(words[-1]) if len(words) > 1 else None
    if unit is not None:
        words = words[:-1]
    text = " ".join(word for word in (_WORDS.get(w, w) for w in words) if word)
    return f"{text} ({unit})" if unit else text


# decimals by magnitude: at least three significant digits, a ratio such as 1.181 read to the thousandth
_DECIMALS = ((1000, 0), (100, 1), (10, 2), (0.01, 3), (0.0, 6))


NO_VALUE = "-"  # a figure that does not apply (a simulated cell's interval) or was not measured, in the HTML and CSVs


def readable(value: object) -> str:
    """A number as a reader reads it: thousands separated, decimals by size, never an exponent; NaN as ``NO_VALUE``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return "" if value is None else str(value)
    if value != value:
        return NO_VALUE
    if isinstance(value, numbers.Integral) or value == 0:
        return f"{int(value):,}"
    decimals = next(d for floor, d in _DECIMALS if abs(value) >= floor)
    return f"{value:,.{decimals}f}"


def _table_html(table: pd.DataFrame) -> str:
    shown = table.rename(columns=column_label)
    return shown.to_html(index=False, escape=True, na_rep=readable(float("nan")),
                         formatters={c: readable for c in shown.columns})


def _summary(frame: pd.DataFrame) -> str:
    """The placed cells counted by status, hardware, backend, method, variant and measurer."""
    placed = frame[~is_unplaced(frame)]
    if placed.empty:
        return "<p>No placed cells.</p>"
    parts = [f"<b>cells</b>: {len(placed)}"]
    for column in ("status", "hardware", "backend", "method", "variant", "simulated"):
        if column in placed:
            counts = placed[column].astype(str).value_counts().sort_index()
            parts.append(f"<b>{column}</b>: " + ", ".join(f"{html.escape(k)} {v}" for k, v in counts.items()))
    return "<p>" + "<br>".join(parts) + "</p>"


def _failures(frame: pd.DataFrame) -> str:
    """The placed cells that failed, with their errors."""
    if "status" not in frame or "error" not in frame:
        return ""
    failed = frame[(frame["status"] != "done") & ~is_unplaced(frame)]
    if failed.empty:
        return ""
    columns = [c for c in ("status", "hardware", "backend", "method", "variant", "seq_len_tokens", "error")
               if c in failed]
    return "<h2>Cells that did not finish</h2>" + _table_html(failed[columns].head(50))


def _unplaced(frame: pd.DataFrame) -> str:
    """The cells no node could take, apart from the counts: how many per GPU type and backend, and why."""
    unplaced = frame[is_unplaced(frame)]
    if unplaced.empty:
        return ""
    keys = [c for c in ("hardware", "backend", "error") if c in unplaced]
    groups = unplaced.groupby(keys, dropna=False).size().reset_index(name="cells")
    return (f"<h2 id=\"not-placed\">Cells no node could take ({len(unplaced)}): not counted above</h2>"
            + _table_html(groups))


def render_html(frame: pd.DataFrame, figures: dict[str, Path], tables: dict[str, pd.DataFrame],
                title: str, figure_titles: dict[str, str] | None = None, left_out: dict[str, str] | None = None) -> str:
    """The report page: sources, cell counts, tables, then the figures embedded as base64 PNGs, and once, the figures
    left out for want of data with why."""
    sources = ", ".join(html.escape(str(r)) for r in frame.attrs.get("run_roots", [])) or "a results frame"
    sweeps = sorted(frame["sweep_id"].dropna().unique()) if "sweep_id" in frame else []
    body = [f"<h1>{html.escape(title)}</h1>",
            f"<p>Generated {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} from {sources}; "
            f"sweeps: {', '.join(html.escape(s) for s in sweeps) or 'none'}. "
            "Simulated cells are hatched, dashed or hollow and labelled &ldquo;simulated&rdquo;. Error bars span a "
            "speedup's 95 % interval; ~ marks a verdict of same, ? an ambiguous one; - : no value (a prediction has "
            f"no interval). {html.escape(metrics.VERDICT_RULE.format(tol=tolerance(frame)))}; "
            f"{html.escape(metrics.AGGREGATE_RULE)}. Beside each figure's PNG, its CSV holds the rows it drew.</p>",
            _summary(frame)]
    for name, table in tables.items():
        body.append(f'<h2 id="{html.escape(name)}">{html.escape(TABLE_TITLES.get(name, name))}</h2>')
        body.append(_table_html(table))
    for name, path in figures.items():
        encoded = base64.b64encode(path.read_bytes()).decode("ascii")
        heading = html.escape((figure_titles or {}).get(name, name))
        body.append(f'<h2 id="{html.escape(name)}">{heading}</h2><img alt="{heading}" src="data:image/png;base64,'
                    f'{encoded}" style="max-width:100%">')
    if left_out:
        items = "".join(f"<li>{html.escape((figure_titles or {}).get(n, n))}: {html.escape(why)}</li>"
                        for n, why in left_out.items())
        body.append(f'<h2 id="left-out">Figures left out: these results lack their data</h2><ul>{items}</ul>')
    body.append(_failures(frame))
    body.append(_unplaced(frame))
    style = ("body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;"
             "font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>")


def write_report(frame: pd.DataFrame, out_dir: str | Path, title: str = "WaveAlign sweep report") -> ReportFiles:
    """Write the figures (PNG) with the rows each drew (CSV), the tables (CSV) and ``report.html`` into
    ``out_dir``."""
    out_dir = Path(out_dir)
    figures = write_figures(frame, out_dir)
    tables = {name: make(frame) for name, make in TABLES.items()}
    table_paths = {}
    for name, table in tables.items():
        table_paths[name] = out_dir / f"{name}.csv"
        table.to_csv(table_paths[name], index=False, na_rep=NO_VALUE)
    page = out_dir / "report.html"
    page.write_text(render_html(frame, figures.pngs, tables, title, figures.titles, figures.left_out))
    return ReportFiles(html=page, figures=figures.pngs, figure_rows=figures.rows, tables=table_paths)


def log_to_sweep_runs(files: ReportFiles, frame: pd.DataFrame, tracking_uri: str,
                      artifact_path: str = "report") -> list[str]:
    """Log the report's files as artifacts of each sweep parent run whose cells the frame holds; returns
    the run ids logged to (none when the store has no parent run of those sweeps)."""
    from mlflow.tracking import MlflowClient

    from analysis.load import sweep_parent_runs

    sweep_ids = sorted(frame["sweep_id"].dropna().unique()) if "sweep_id" in frame else []
    if not sweep_ids:
        return []
    client = MlflowClient(tracking_uri=tracking_uri)
    logged = sweep_parent_runs(tracking_uri, sweep_ids)
    for run_id in logged:
        for path in files.all_paths():
            client.log_artifact(run_id, str(path), artifact_path)
    return logged
