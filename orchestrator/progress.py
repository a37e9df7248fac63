"""What the user sees: a live per-GPU-type progress display with an ETA (on a terminal; elsewhere, a plain line every
few seconds), and the final summary, as a table and as records (``summary_lines``)."""

from __future__ import annotations

import json
import math
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from wavealign import metrics, variants
from wavealign.records import order_name

COUNTS = ("done", "running", "failed", "unschedulable")
PLAIN_EVERY_S = 10.0  # how often a console that is not a terminal (a log file, CI) gets a progress line


class SweepProgress:
    """Cells per placement (a GPU type, or ``cpu``): done, running, failed, unschedulable, with an ETA. On a terminal,
    a live display; on a console that is not one, a plain ``progress:`` line every ``every_s`` seconds of ``clock``
    (as cells change, and from a heartbeat between) and once at the end, so that a log shows the sweep moving."""

    def __init__(self, totals: dict[str, int], console: Console, enabled: bool = True,
                 every_s: float = PLAIN_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        if not every_s > 0:
            raise ValueError(f"every_s must be > 0, got {every_s}")
        self.counts = {k: dict.fromkeys(COUNTS, 0) for k in totals}
        self.totals = totals
        self._console, self._clock, self._every_s = console, clock, every_s
        self._plain = enabled and not console.is_terminal
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._started_s = self._next_s = clock()
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeRemainingColumn(), console=console, disable=not enabled or self._plain,
                                  transient=False)
        self._tasks = {k: self._progress.add_task(k, total=n) for k, n in totals.items()}
        self._refresh_all()

    def __enter__(self) -> SweepProgress:
        self._started_s = self._clock()
        self._next_s = self._started_s + self._every_s
        self._progress.start()
        if self._plain:
            threading.Thread(target=self._heartbeat, name="sweep-progress", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        self._progress.stop()
        if self._plain:
            with self._lock:
                self._print_plain()

    def add(self, placement: str, **deltas: int) -> None:
        for key, delta in deltas.items():
            self.counts[placement][key] += delta
        self._refresh(placement)
        self.tick()

    def tick(self) -> None:
        """Print the plain line if one is due (a console that is not a terminal only)."""
        if not self._plain:
            return
        with self._lock:
            now = self._clock()
            if now < self._next_s:
                return
            self._next_s = now + self._every_s
            self._print_plain()

    def _heartbeat(self) -> None:
        while not self._stopped.wait(self._every_s):
            self.tick()

    def plain_line(self) -> str:
        """``progress: done D/T failed F running R eta Ns`` over all placements (with each one's done/total when there
        are several); the ETA assumes the cells left take as long as the finished ones did, ``-`` before any."""
        total = sum(self.totals.values())
        summed = {key: sum(c[key] for c in self.counts.values()) for key in COUNTS}
        finished = summed["done"] + summed["failed"] + summed["unschedulable"]
        elapsed_s = self._clock() - self._started_s
        eta = f"{elapsed_s / finished * (total - finished):.0f}s" if finished else "-"
        line = (f"progress: done {summed['done']}/{total} failed {summed['failed']} running {summed['running']} "
                f"eta {eta}")
        if summed["unschedulable"]:
            line += f" unschedulable {summed['unschedulable']}"
        if len(self.totals) > 1:
            line += " (" + ", ".join(f"{k} {c['done']}/{self.totals[k]}" for k, c in self.counts.items()) + ")"
        return line

    def _print_plain(self) -> None:
        self._console.print(self.plain_line(), markup=False, highlight=False, soft_wrap=True)

    def _refresh_all(self) -> None:
        for placement in self.totals:
            self._refresh(placement)

    def _refresh(self, placement: str) -> None:
        c = self.counts[placement]
        finished = c["done"] + c["failed"] + c["unschedulable"]
        text = (f"{placement:<5} done {c['done']}  running {c['running']}  failed {c['failed']}  "
                f"unschedulable {c['unschedulable']}")
        self._progress.update(self._tasks[placement], completed=finished, description=text)


@dataclass(frozen=True)
class SummaryLine:
    """One line of a sweep's summary: the done cells of one (hardware, backend, measurer, method, workload, sequence
    length, launch order), their median kernel time and their speedup over the original variant timed beside them,
    with its interval at ``metrics.LEVEL`` (NaN where none applies) and verdict (``metrics.VERDICT_RULE``; over
    several cells ``metrics.AGGREGATE_RULE``; ``metrics.BASELINE`` on the original's own line, ``-`` without a
    speedup). ``variant`` is the launch order's name
    (``records.order_name``)."""

    hardware: str
    backend: str
    measure: str | None
    method: str
    workload: str | None
    tokens: int | None
    variant: str
    cells_done: int
    kernel_ms: float
    speedup: float
    ci_low: float
    ci_high: float
    verdict: str
    simulated: bool
    # the widest spread (IQR, % of median: metrics.spread_pct) among the reps behind the speedup, its cells' and
    # their originals'; beyond metrics.SPREAD_LIMIT_PCT the verdict is ambiguous (metrics.SPREAD_RULE)
    spread_pct: float = math.nan

    @property
    def key(self) -> tuple:
        return (self.hardware, self.backend, self.measure, self.method, self.workload, self.tokens, self.variant)


def _median(values: list[float | None]) -> float:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def _fmt_ms(value: float) -> str:
    """Four significant digits, so a ratio of two printed times is right to about 0.1% (0.1782, 98.60, 1572)."""
    if value is None or math.isnan(value):
        return "-"
    decimals = 3 - math.floor(math.log10(abs(value))) if value else 3
    return f"{value:.{max(decimals, 0)}f}"


def _iqr_pct(iqr_ms: float, median_ms: float, simulated: bool) -> str:
    """The interquartile range as a share of the median: the spread a time's repetitions had (a prediction has
    none: ``-``, never 0.0)."""
    return "-" if simulated or math.isnan(iqr_ms) or not median_ms > 0 else f"{100 * iqr_ms / median_ms:.1f}"


def _finite(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _is_simulated(row: dict[str, Any]) -> bool:
    return bool(row.get("simulated")) or row.get("timer") == "simulated"


def _tolerance(done: list[dict[str, Any]]) -> float:
    """The verdicts' tolerance the line's cells were judged with (``metrics.recorded_tolerance``)."""
    return metrics.recorded_tolerance([r.get("verdict_tolerance") for r in done])


def _speedup(done: list[dict[str, Any]], baseline: bool, simulated: bool,
             spreads: list[float] = ()) -> metrics.Shown:
    """A line's speedup, its interval and verdict over its done cells, by the one rule for several cells
    (``metrics.aggregate``, ``spreads`` its reps' spreads): the report's tables and figures show the same for the
    same cells."""
    columns = ("speedup_vs_original", "speedup_ci_low", "speedup_ci_high")
    points, lows, highs = ([_finite(r.get(c)) for r in done] for c in columns)
    return metrics.aggregate(points, lows, highs, predicted=simulated, baseline=baseline,
                             tolerance=_tolerance(done), spreads_pct=spreads)


def _spreads(done: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[float]:
    """The spreads (``metrics.spread_pct``) of the reps behind a line's speedups: its cells' and the originals' of
    their groups among ``rows``."""
    groups = {r["group_id"] for r in done}
    originals = [r for r in rows if r["group_id"] in groups and variants.of_row(r).is_baseline
                 and r["status"] == "done"]
    return [metrics.spread_pct(r.get("kernel_ms_reps") or []) for r in (*done, *originals)
            if not _is_simulated(r)]


def _line_order(key: tuple, rows: list[dict[str, Any]]) -> tuple:
    """Where a line goes in the summary: by its key, the baseline's line first among its launch orders."""
    hardware, backend, measure, method, workload, tokens, order = key
    return (hardware, backend, str(measure), method, str(workload), -1 if tokens is None else tokens,
            not _is_baseline(rows), order)


def _is_baseline(rows: list[dict[str, Any]]) -> bool:
    """Whether a line's rows are all of the baseline variant (``Variant.is_baseline``)."""
    return all(variants.of_row(r).is_baseline for r in rows)


def _measure_labels(rows: list[dict[str, Any]]) -> list[str | None]:
    """Each row's measurer, with the parameters whose value differs between the rows of that measurer
    (``timed paired=false``): cells timed two ways in one sweep are two lines, never one interval over both."""
    params = [json.loads(r.get("measure_params") or "{}") for r in rows]
    values: dict[tuple, set[str]] = defaultdict(set)  # (measurer, parameter) -> its values, as JSON
    for row, given in zip(rows, params, strict=True):
        for key, value in given.items():
            values[row.get("measure"), key].add(json.dumps(value))
    labels = []
    for row, given in zip(rows, params, strict=True):
        name = row.get("measure")
        varying = [f"{k}={json.dumps(given[k])}" for k in sorted(given) if len(values[name, k]) > 1]
        labels.append(" ".join([name, *varying]) if varying else name)
    return labels


def _grouped(rows: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    """The rows per summary line (``SummaryLine.key``), in the summary's order."""
    grouped: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for row, measure in zip(rows, _measure_labels(rows), strict=True):
        order = order_name(row["variant"], row.get("reorderer"))
        grouped[(row["hardware"], row["backend"], measure, row["method"], row.get("workload"),
                 row.get("seq_len_tokens"), order)].append(row)
    return {key: grouped[key] for key in sorted(grouped, key=lambda k: _line_order(k, grouped[k]))}


def _summary_line(key: tuple, rows: list[dict[str, Any]], every_row: list[dict[str, Any]]) -> SummaryLine:
    """The line of ``rows`` (``every_row``: all the summary's rows, where their originals are)."""
    done = [r for r in rows if r["status"] == "done"]
    simulated = bool(done) and all(_is_simulated(r) for r in done)
    spreads = _spreads(done, every_row)
    shown = _speedup(done, _is_baseline(rows), simulated, spreads)
    widest = max((s for s in spreads if math.isfinite(s)), default=math.nan)
    return SummaryLine(*key, cells_done=len(done), kernel_ms=_median([r["kernel_ms_median"] for r in done]),
                       speedup=shown.point, ci_low=shown.low, ci_high=shown.high, verdict=shown.verdict,
                       simulated=simulated, spread_pct=widest)


def summary_lines(rows: list[dict[str, Any]]) -> list[SummaryLine]:
    """The summary's lines over ``rows`` (the latest row of each cell), in order."""
    return [_summary_line(key, group, rows) for key, group in _grouped(rows).items()]


def verdicts(rows: list[dict[str, Any]]) -> dict[tuple, str]:
    """Per summary line (``SummaryLine.key``), the verdict on its speedup."""
    return {line.key: line.verdict for line in summary_lines(rows)}


def _l2_hit(done: list[dict[str, Any]]) -> tuple[str, str | None]:
    """The median L2 hit of a line and where it comes from: Nsight Compute where measured, else the simulator."""
    for column, source in (("ncu_l2_hit_pct", "ncu"), ("l2_hit_pct", "sim")):
        value = _median([r.get(column) for r in done])
        if not math.isnan(value):
            return f"{value:.1f} ({source})", source
    return "-", None


_COUNT_HEADERS = {"failed": "failed", "unschedulable": "un-\nsched."}
# columns said in the title when one value
_SHARED = {"hardware": 0, "backend": 1, "measure": 2, "method": 3, "workload": 4}


def summary_table(rows: list[dict[str, Any]], title: str) -> Table:
    """One line per (hardware, backend, measurer, method, workload, sequence length, launch order): cell counts,
    median figures, and the speedup with its interval and verdict (``SummaryLine``); the order is the variant, with
    its reorderer where that is not WaveAlign's Stage 1 (``records.order_name``). The failed and unschedulable counts
    get a column only when some line has one. Values every line shares (hardware, backend, method, workload) are said
    once, in the title, and the timers in the notes, so that the table keeps to 80 columns where it can."""
    grouped = _grouped(rows)
    all_timers = {r.get("timer") for r in rows if r["status"] == "done"}
    counted = [c for c in ("failed", "unschedulable") if any(r["status"] == c for r in rows)]
    shared = {name: values.pop() for name, values in
              ((name, {str(key[i] or "-") for key in grouped}) for name, i in _SHARED.items()) if len(values) == 1}
    measure = _SHARED["measure"]
    if "measure" not in shared and len({k[:measure] + k[measure + 1:] for k in grouped}) == len(grouped):
        shared["measure"] = None  # the lines differ elsewhere too: the notes' timers say how each was measured
    if said := {name: value for name, value in shared.items() if value is not None}:
        # a value every line has is said once, in the title: the table keeps to 80 columns
        title += ": " + ", ".join(f"{name} {value}" for name, value in said.items())
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, padding=0)
    headers = [*(name for name in _SHARED if name not in shared), "tokens", "variant", "done",
               *(_COUNT_HEADERS[c] for c in counted),
               "kernel\nms", "IQR\n%", "speedup\n[95% CI]", "verdict", "reorder\nms", "L2 hit\n%"]
    for header in headers:
        text = header in (*_SHARED, "variant", "verdict")
        table.add_column(header, justify="left" if text else "right", overflow="fold")
    l2_sources, tolerances, timed_on = set(), set(), {}
    for key, group in grouped.items():
        line = _summary_line(key, group, rows)
        done = [r for r in group if r["status"] == "done"]
        for r in done:
            timed_on.setdefault(r.get("timer"), set()).add(f"{line.hardware}/{line.backend}")
        l2_value, l2_source = _l2_hit(done)
        l2_sources.add(l2_source)
        if line.verdict not in (metrics.NO_VERDICT, metrics.BASELINE):
            tolerances.add(_tolerance(done))
        cells = [*(str(getattr(line, name) or "-") for name in _SHARED if name not in shared),
                 "-" if line.tokens is None else f"{line.tokens:,}",
                 Text(line.variant),  # not markup: "wavealign[lsh]" is text
                 str(line.cells_done), *(str(sum(r["status"] == c for r in group)) for c in counted),
                 _fmt_ms(line.kernel_ms),
                 _iqr_pct(_median([r.get("kernel_ms_iqr") for r in done]), line.kernel_ms, line.simulated),
                 metrics.interval_text(line.speedup, line.ci_low, line.ci_high), line.verdict,
                 _fmt_ms(_median([r["reorder_ms"] for r in done])), l2_value]
        table.add_row(*cells)
    notes = ["speedup: the original variant's kernel time over the line's, both timed in the same group, with its "
             "95% interval over its repetitions; kernel ms: the median over the line's done cells; IQR %: the kernel "
             "time's interquartile range over its repetitions, as a share of its median"]
    notes += [metrics.VERDICT_RULE.format(tol=tol) for tol in sorted(tolerances)]
    if tolerances:
        notes.append(metrics.SPREAD_RULE.format(limit=metrics.SPREAD_LIMIT_PCT))
    if any(len([r for r in group if r["status"] == "done"]) > 1 for group in grouped.values()):
        notes.append(metrics.AGGREGATE_RULE)
    if len(all_timers) == 1:
        notes.append(f"timer: {next(iter(all_timers))} for every line")
    elif all_timers:
        notes.append("timer: " + "; ".join(f"{timer} on {', '.join(sorted(where))}"
                                            for timer, where in sorted(timed_on.items(), key=lambda t: str(t[0]))))
    if any("[" in key[-1] for key in grouped):
        notes.append("variant\\[reorderer]: that reorderer's grouping instead of WaveAlign's Stage 1 (spatial: alone; "
                     "wavealign: then Stage 2)")
    if "ncu" in l2_sources:
        notes.append("L2 hit % (ncu): measured by Nsight Compute on the backend's attention kernels")
    if "sim" in l2_sources:
        notes.append("L2 hit % (sim): predicted by wavealign.sim, not measured")
    if "wall_clock" in all_timers:
        notes.append("wall_clock: the exact reference kernel timed on a CPU, a check of the pipeline, not a GPU "
                     "figure")
    if "simulated" in all_timers:
        notes.append("simulated: wavealign.sim's prediction for that GPU (kernel ms, L2 hit), not a measurement; "
                     "its reorder ms is WaveAlign's plan time predicted for that GPU (wavealign.skip.plan_cost; "
                     "the host CPU's is the dataset's host_reorder_ms)")
    table.caption = "\n".join(notes)
    table.caption_justify = "left"
    return table
