"""``ncu``: timed as ``timed`` times (with its parameters), then one launch of each of the group's cells profiled by
Nsight Compute in one child process (``wavealign.instruments.ncu``; the child is ``_ncu_child``): the same mask,
order and launch the timed run used, the range of each opened by a marker kernel. The ``ncu_*`` figures are those
of the backend's attention kernels (its ``ncu_kernels``); where there are none, ``ncu_unavailable`` says why."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from wavealign import kernels, measurers
from wavealign.instruments import ncu
from wavealign.measurers import Measurement, timed


def time_and_profile(done: list[Measurement]) -> None:
    """The group timed as ``timed`` times it, then ``profile``."""
    timed.time_group(done)
    profile(done)


def _replayed(m: Measurement) -> dict[str, Any]:
    """What the child replays of a measured cell: the cell as the grid built it (its flat view), the stages it applied
    and the candidate the chooser picked (None unless its variant chooses), planned as the ``simulated`` measurer
    plans them: the launch that was timed, on the same inputs."""
    chosen = m.result.order_candidate if m.step.variant.skip == "choose" else None
    return {"cell": m.cell.flat(), "stages": m.result.stages_applied, "candidate": chosen}


def profile(done: list[Measurement]) -> None:
    """Profile one launch of each measured cell in a child process under ``ncu``, and fill its ``ncu_*`` figures."""
    if not done:
        return
    if done[0].device.type != "cuda":
        for m in done:
            m.result.ncu_unavailable = "Nsight Compute profiles GPU cells; this cell ran on the CPU"
        return
    replays = [_replayed(m) for m in done]
    with tempfile.TemporaryDirectory(prefix="wavealign-ncu-") as tmp:
        spec = Path(tmp) / "cells.json"
        spec.write_text(json.dumps({"launches": replays}))
        records, _ = ncu.collect([sys.executable, "-m", "wavealign.measurers._ncu_child", str(spec)],
                                 Path(tmp) / "cells", occupancy=True)
    if isinstance(records, ncu.NcuUnavailable):
        for m in done:
            m.result.ncu_unavailable = records.reason
        return
    per_cell = ncu.split_at_markers(records)
    if len(per_cell) != len(replays):
        for m in done:
            m.result.ncu_unavailable = f"ncu returned {len(per_cell)} marked launches for {len(replays)} cells"
        return
    for m, launches in zip(done, per_cell, strict=True):
        result = m.result
        if not launches:
            result.ncu_unavailable = "ncu profiled no kernel of this cell's launch"
            continue
        summary = ncu.summarize(launches, kernel_pattern=kernels.get(m.step.backend).ncu_kernels)
        result.ncu_kernel_ms, result.ncu_l2_hit_pct = summary.kernel_ms, summary.l2_hit_pct
        result.ncu_dram_throughput_pct, result.ncu_sm_throughput_pct = (summary.dram_throughput_pct,
                                                                        summary.sm_throughput_pct)
        result.ncu_dram_read_bytes, result.ncu_dram_write_bytes = summary.dram_read_bytes, summary.dram_write_bytes
        result.ncu_kernels, result.ncu_ctas_per_sm = summary.kernels, summary.ctas_per_sm
        result.ncu_registers_per_thread = summary.registers_per_thread


measurers.register(measurers.Measurer(
    name="ncu", measure=timed.measure, after_group=time_and_profile, alone_on_gpu=True,
    runs=lambda spec: timed.runs(spec) + 1,  # and the one launch profiled
    description="timed, then one launch per cell profiled by Nsight Compute (L2 hit, DRAM bytes, occupancy)"))
