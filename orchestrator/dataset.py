"""The results dataset: one Parquet row per cell, a fixed versioned schema, hive-partitioned by hardware
and method under ``<run_root>/results/``.

Files are written whole to a hidden temporary name and renamed, so a crash never leaves half a file, and
readers (``read``) ignore temporaries. Analysis reads one GPU type or method cheaply through the
partitioning: ``read(root, filter=(ds.field("hardware") == "h100"))``.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from wavealign.pipeline import Cell, CellResult

SCHEMA_VERSION = 1
PARTITION_COLUMNS = ("hardware", "method")
STATUSES = ("done", "failed", "unschedulable")

_S, _I, _F, _B = pa.string(), pa.int64(), pa.float64(), pa.bool_()
_TS = pa.timestamp("ms", tz="UTC")
# Units are in the names: *_ms milliseconds, *_s seconds, *_bytes bytes, *_pct percent.
SCHEMA = pa.schema([
    # identity and status
    ("schema_version", pa.int32()), ("result_id", _S), ("sweep_id", _S), ("sweep_name", _S), ("cell_id", _S),
    ("group_id", _S), ("status", _S), ("error", _S), ("traceback", _S),
    # the cell's resolved config
    ("hardware", _S), ("profile_hardware", _S), ("backend", _S), ("method", _S), ("variant", _S),
    ("stages", _S), ("skip_mode", _S), ("workload", _S), ("model", _S), ("resolution", _S), ("frames", _I),
    ("seq_len_tokens", _I), ("num_heads", _I), ("heads", _S), ("head_dim", _I), ("block_size", _I),
    ("wave_size", _I), ("seed", _I), ("layer", _I), ("step", _I), ("method_params", _S), ("backend_params", _S),
    ("reps", _I), ("warmup", _I), ("ncu_requested", _B),
    # measurements
    ("simulated", _B), ("device", _S), ("timer", _S), ("reps_done", _I), ("kernel_ms_median", _F),
    ("kernel_ms_iqr", _F), ("first_call_ms", _F), ("reorder_ms", _F), ("total_ms", _F), ("speedup_vs_original", _F),
    ("stages_applied", _S), ("reorder_applied", _B),
    # mask statistics and skip features, and the skip decision
    ("num_q_blocks", _I), ("num_kv_blocks", _I), ("density", _F), ("nnz_mean", _F), ("nnz_cv", _F),
    ("adjacent_jaccard", _F), ("wave_working_set_bytes", _F), ("working_set_over_l2", _F),
    ("reordered_wave_working_set_bytes", _F), ("skip_reorder", _B), ("skip_reason", _S),
    ("skip_predicted_gain_ms", _F),
    # cache figures: simulated (backend=sim), and Nsight Compute's when a cell asks (ncu_requested)
    ("l2_hit_pct", _F), ("hbm_read_bytes", _F),
    ("ncu_l2_hit_pct", _F), ("ncu_dram_read_bytes", _F), ("ncu_dram_write_bytes", _F),
    ("ncu_dram_throughput_pct", _F), ("ncu_sm_throughput_pct", _F), ("ncu_kernel_ms", _F), ("ncu_kernels", _I),
    ("ncu_unavailable", _S),
    ("mask_ms", _F), ("cell_wall_s", _F),
    # environment of the worker
    ("gpu_name", _S), ("driver_version", _S), ("cuda_version", _S), ("torch_version", _S),
    ("triton_version", _S), ("python_version", _S), ("host", _S), ("git_sha", _S), ("wavealign_version", _S),
    # orchestration
    ("ray_node_id", _S), ("worker_pid", _I), ("started_at", _TS), ("finished_at", _TS), ("recorded_at", _TS),
    ("cell_json", _S),
], metadata={"wavealign.schema_version": str(SCHEMA_VERSION)})
FILE_SCHEMA = pa.schema([f for f in SCHEMA if f.name not in PARTITION_COLUMNS], metadata=SCHEMA.metadata)
_RENAMED = {"reps": "reps_done"}  # CellResult field -> column where Cell has the same name
_CELL_RENAMED = {"ncu": "ncu_requested"}


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def make_row(cell: Cell, result: CellResult | None, *, sweep_id: str, sweep_name: str, status: str | None = None,
             error: str | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One dataset row from a cell and its result (None for cells that never ran, e.g. unschedulable)."""
    row: dict[str, Any] = {name: None for name in SCHEMA.names}
    config = asdict(cell)
    for key, value in config.items():
        row[_CELL_RENAMED.get(key, key)] = _json(value) if isinstance(value, dict | list) else value
    if result is not None:
        for key, value in asdict(result).items():
            if key == "environment":
                row.update(value)
            else:
                row[_RENAMED.get(key, key)] = value
    if status is not None:
        row["status"] = status
    if error is not None:
        row["error"] = error
    row.update(extra or {})
    row.update(schema_version=SCHEMA_VERSION, result_id=row.get("result_id") or uuid.uuid4().hex,
               sweep_id=sweep_id, sweep_name=sweep_name, cell_json=_json(config),
               recorded_at=row.get("recorded_at") or time.time())
    if row["status"] not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {row['status']!r}")
    return row


def _arrow_value(field: pa.Field, value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value) and not pa.types.is_floating(field.type)):
        return None
    if pa.types.is_timestamp(field.type) and isinstance(value, int | float):
        return int(value * 1000)
    return value


def to_table(rows: list[dict[str, Any]], schema: pa.Schema = SCHEMA) -> pa.Table:
    """Rows as a table of exactly ``schema`` (unknown keys are an error: the schema is fixed)."""
    for row in rows:
        unknown = set(row) - set(SCHEMA.names)
        if unknown:
            raise ValueError(f"row has columns {sorted(unknown)} not in dataset schema v{SCHEMA_VERSION}")
    columns = {f.name: pa.array([_arrow_value(f, r.get(f.name)) for r in rows], type=f.type) for f in schema}
    return pa.table(columns, schema=schema)


def results_dir(run_root: str | Path) -> Path:
    return Path(run_root) / "results"


def write(run_root: str | Path, rows: list[dict[str, Any]]) -> list[Path]:
    """Write ``rows`` as one file per (hardware, method) partition, each via a temporary name + rename."""
    by_partition: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_partition[(row["hardware"], row["method"])].append(row)
    written = []
    for (hardware, method), part in by_partition.items():
        folder = results_dir(run_root) / f"hardware={hardware}" / f"method={method}"
        folder.mkdir(parents=True, exist_ok=True)
        name = f"part-{part[0]['sweep_id']}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}.parquet"
        tmp = folder / f".{name}.tmp"
        pq.write_table(to_table(part, FILE_SCHEMA), tmp)
        os.replace(tmp, folder / name)
        written.append(folder / name)
    return written


def read(run_root: str | Path, columns: list[str] | None = None, filter: ds.Expression | None = None) -> pa.Table:
    """Every row under ``<run_root>/results`` (an empty table of the schema if there is none)."""
    folder = results_dir(run_root)
    if not folder.is_dir():
        return SCHEMA.empty_table().select(columns or SCHEMA.names)
    dataset = ds.dataset(folder, format="parquet", schema=SCHEMA, partitioning="hive",
                         ignore_prefixes=[".", "_"])
    return dataset.to_table(columns=columns, filter=filter)


def done_cell_ids(run_root: str | Path) -> set[str]:
    """Cells already finished (status ``done``) in the dataset: what ``resume`` skips."""
    table = read(run_root, columns=["cell_id"], filter=ds.field("status") == "done")
    return set(table.column("cell_id").to_pylist())
