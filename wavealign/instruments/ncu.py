"""Nsight Compute collector: run a program under ``ncu --clock-control none`` and parse its counters.

The program marks the launches to profile with ``torch.cuda.profiler.start()/stop()`` (ncu runs with
``--profile-from-start off``), optionally inside an NVTX range, and ncu keeps only kernels whose name
matches a regex. The report is exported, then read back as the raw CSV page with base units, and each
kernel becomes an ``NcuRecord``. Where counters can't be read, the result is ``NcuUnavailable`` with the
reason, never a record of zeros.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# record field -> ncu metric. The L2 hit rate counts 32-byte sectors of all L2 traffic (loads and stores).
METRICS = {
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "dram_throughput_pct": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "duration_ns": "gpu__time_duration.sum",
}
# theoretical residency: CTAs per SM is the least of the per-resource launch limits
OCCUPANCY_METRICS = {
    "limit_blocks": "launch__occupancy_limit_blocks",
    "limit_registers": "launch__occupancy_limit_registers",
    "limit_shared_mem": "launch__occupancy_limit_shared_mem",
    "limit_warps": "launch__occupancy_limit_warps",
    "registers_per_thread": "launch__registers_per_thread",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
}
# base units ncu prints with --print-units base, scaled to the record's units
_UNIT_SCALE = {"": 1.0, "%": 1.0, "byte": 1.0, "block": 1.0, "register/thread": 1.0, "warp": 1.0,
               "ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9,
               "second": 1e9, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}


@dataclass(frozen=True)
class NcuRecord:
    """One profiled kernel launch; residency fields are None unless occupancy metrics were collected."""

    kernel_name: str
    l2_hit_pct: float
    dram_read_bytes: float
    dram_write_bytes: float
    dram_throughput_pct: float
    sm_throughput_pct: float
    duration_ms: float
    grid_size: str = ""
    block_size: str = ""
    ctas_per_sm: int | None = None
    registers_per_thread: int | None = None
    achieved_occupancy_pct: float | None = None


@dataclass(frozen=True)
class NcuUnavailable:
    """Counters could not be read; ``reason`` says why (missing tool, permissions, no kernel matched...)."""

    reason: str


def ncu_command(program: list[str], report: str | Path, *, kernel_regex: str | None = None,
                nvtx_include: str | None = None, occupancy: bool = False, ncu: str = "ncu") -> list[str]:
    """The ncu command line that profiles ``program``'s start/stop regions into ``report`` (.ncu-rep)."""
    metrics = list(METRICS.values()) + (list(OCCUPANCY_METRICS.values()) if occupancy else [])
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
           "--metrics", ",".join(metrics), "--export", str(report), "--force-overwrite"]
    if kernel_regex:
        cmd += ["--kernel-name", f"regex:{kernel_regex}"]
    if nvtx_include:
        cmd += ["--nvtx", "--nvtx-include", nvtx_include]
    return [*cmd, *program]


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def parse_raw_csv(text: str) -> list[NcuRecord]:
    """Parse ``ncu --import R --csv --page raw --print-units base``: a header row of metric names,
    a row of units, then one row per kernel."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    start = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
    if start is None or len(rows) < start + 2:
        raise ValueError("ncu CSV text must have an 'ID' header row and a units row, got "
                         f"{text[:200]!r}")
    header, units = rows[start], rows[start + 1]
    column = {name: i for i, name in enumerate(header)}
    missing = [m for m in (*METRICS.values(), "Kernel Name") if m not in column]
    if missing:
        raise ValueError(f"ncu CSV lacks the columns {missing}; expected 'Kernel Name' and {sorted(METRICS)}")

    def value(row: list[str], metric: str) -> float:
        i = column[metric]
        if units[i] not in _UNIT_SCALE:  # a wrong scale would be a wrong number: refuse instead
            raise ValueError(f"ncu CSV gives {metric} in unknown unit {units[i]!r}; "
                             f"expected one of {sorted(_UNIT_SCALE)}")
        return _number(row[i]) * _UNIT_SCALE[units[i]]

    records = []
    for row in rows[start + 2:]:
        residency = {}
        if all(m in column for m in OCCUPANCY_METRICS.values()):
            limits = [value(row, OCCUPANCY_METRICS[k])
                      for k in ("limit_blocks", "limit_registers", "limit_shared_mem", "limit_warps")]
            residency = {"ctas_per_sm": int(min(limits)),
                         "registers_per_thread": int(value(row, OCCUPANCY_METRICS["registers_per_thread"])),
                         "achieved_occupancy_pct": value(row, OCCUPANCY_METRICS["achieved_occupancy_pct"])}
        records.append(NcuRecord(
            kernel_name=row[column["Kernel Name"]],
            l2_hit_pct=value(row, METRICS["l2_hit_pct"]),
            dram_read_bytes=value(row, METRICS["dram_read_bytes"]),
            dram_write_bytes=value(row, METRICS["dram_write_bytes"]),
            dram_throughput_pct=value(row, METRICS["dram_throughput_pct"]),
            sm_throughput_pct=value(row, METRICS["sm_throughput_pct"]),
            duration_ms=value(row, METRICS["duration_ns"]) / 1e6,
            grid_size=row[column["Grid Size"]] if "Grid Size" in column else "",
            block_size=row[column["Block Size"]] if "Block Size" in column else "",
            **residency,
        ))
    return records


def collect(program: list[str], report: str | Path, *, kernel_regex: str | None = None,
            nvtx_include: str | None = None, occupancy: bool = False, timeout_s: float = 600,
            ncu: str = "ncu", csv_path: str | Path | None = None) -> tuple[list[NcuRecord] | NcuUnavailable, str]:
    """Profile ``program`` and return (records in launch order, or why there are none; program stdout).
    ``csv_path`` keeps a copy of the raw CSV page."""
    exe = shutil.which(ncu)
    if exe is None:
        return NcuUnavailable(f"{ncu!r} is not on PATH"), ""
    cmd = ncu_command(program, report, kernel_regex=kernel_regex, nvtx_include=nvtx_include,
                      occupancy=occupancy, ncu=exe)
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return NcuUnavailable(f"ncu did not finish within {timeout_s:.0f} s"), ""
    report_file = Path(str(report) if str(report).endswith(".ncu-rep") else f"{report}.ncu-rep")
    if run.returncode != 0 or not report_file.exists():
        tail = (run.stderr or run.stdout).strip().splitlines()[-5:]
        return NcuUnavailable(f"ncu exited with {run.returncode}: {' | '.join(tail)}"), run.stdout
    text = subprocess.run([exe, "--import", str(report_file), "--csv", "--page", "raw", "--print-units", "base"],
                          capture_output=True, text=True, timeout=timeout_s).stdout
    if csv_path is not None:
        Path(csv_path).write_text(text)
    try:
        records = parse_raw_csv(text)
    except ValueError as err:
        return NcuUnavailable(f"no readable counters: {err}"), run.stdout
    if not records:
        return NcuUnavailable("ncu profiled no kernel (no launch matched the filters)"), run.stdout
    return records, run.stdout


# the kernel ``profile_one_launch(..., marker=True)`` launches first in its range; see ``ncu_marker``
MARKER_KERNEL = "wavealign_ncu_cell_marker"


def profile_one_launch(call, *, marker: bool = False) -> None:
    """Run ``call`` once to warm up, then once inside the profiler range ``ncu --profile-from-start off`` reads;
    with ``marker``, the range opens with the marker kernel, so ``split_at_markers`` can tell cells apart."""
    import torch

    target = None
    if marker:
        from wavealign.instruments import ncu_marker

        target = ncu_marker.buffer()
        ncu_marker.launch(target)  # compiled outside the range
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    if target is not None:
        ncu_marker.launch(target)
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def split_at_markers(records: list[NcuRecord]) -> list[list[NcuRecord]]:
    """The records of each marked range, in order, without the markers themselves."""
    if records and records[0].kernel_name != MARKER_KERNEL:
        raise ValueError(f"the first profiled kernel is {records[0].kernel_name!r}, not the marker "
                         f"{MARKER_KERNEL!r}: profile with marker=True and keep the marker in the kernel filter")
    groups: list[list[NcuRecord]] = []
    for record in records:
        if record.kernel_name == MARKER_KERNEL:
            groups.append([])
        else:
            groups[-1].append(record)
    return groups


@dataclass(frozen=True)
class NcuSummary:
    """One cell's counters over every launch of its attention kernels (see ``summarize``):
    times summed, ratios weighted by duration, so no figure describes one head only. DRAM bytes add up
    every profiled launch."""

    kernel_ms: float
    l2_hit_pct: float
    dram_read_bytes: float
    dram_write_bytes: float
    dram_throughput_pct: float
    sm_throughput_pct: float
    kernels: int
    ctas_per_sm: int | None
    registers_per_thread: int | None


def summarize(records: list[NcuRecord], kernel_pattern: str = "") -> NcuSummary:
    """The ``NcuSummary`` of one cell's records (at least one). Its attention kernels are those matching
    ``kernel_pattern`` (a backend's ``ncu_kernels``), or, when none match or no pattern is given, every launch
    of the longest-running kernel's name."""
    if not records:
        raise ValueError("no profiled launch to summarize")
    attention = [r for r in records if kernel_pattern and re.search(kernel_pattern, r.kernel_name)]
    if not attention:
        name = max(records, key=lambda r: r.duration_ms).kernel_name
        attention = [r for r in records if r.kernel_name == name]
    total_ms = sum(r.duration_ms for r in attention)

    def weighted(field: str) -> float:
        return sum(getattr(r, field) * r.duration_ms for r in attention) / total_ms

    return NcuSummary(kernel_ms=total_ms, l2_hit_pct=weighted("l2_hit_pct"),
                      dram_read_bytes=sum(r.dram_read_bytes for r in records),
                      dram_write_bytes=sum(r.dram_write_bytes for r in records),
                      dram_throughput_pct=weighted("dram_throughput_pct"),
                      sm_throughput_pct=weighted("sm_throughput_pct"), kernels=len(records),
                      ctas_per_sm=attention[0].ctas_per_sm, registers_per_thread=attention[0].registers_per_thread)
