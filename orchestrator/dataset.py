"""The results dataset: one Parquet row per cell, a fixed versioned schema, hive-partitioned by hardware
and method under ``<run_root>/results/``.

Files are written whole to a hidden temporary name and renamed, so a crash never leaves half a file, and
readers (``read``) ignore temporaries. Analysis reads one GPU type or method cheaply through the
partitioning: ``read(root, filter=(ds.field("hardware") == "h100"))``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
import types
import typing
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from wavealign.records import Cell, CellResult, Environment

SCHEMA_VERSION = 5  # 2: generated from wavealign.records; seq_k, launch_plan_ms, net speedup, ncu occupancy, repro;
#                    3: reorder_cost and host_reorder_ms (the reorderer columns joined late in v2);
#                    4: inputs_prefetched;
#                    5: measure and measure_params (wavealign.measurers): a simulated row names the backend it
#                    models (no backend sim), and Nsight Compute is measure ncu (no ncu_requested column). Rows of
#                    v4 and before are read as v5 writes them (``upgraded``)
PARTITION_COLUMNS = ("hardware", "method")
STATUSES = ("done", "failed", "unschedulable")

_TS = pa.timestamp("ms", tz="UTC")
_ARROW = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}
_log = logging.getLogger(__name__)


def _arrow_type(where: str, hint: Any) -> pa.DataType:
    """The column type of a record field: scalars as themselves (``X | None`` nullable), lists and dicts as JSON."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = typing.get_origin(hint) or hint
    if args and base in (typing.Union, types.UnionType):
        base = typing.get_origin(args[0]) or args[0]
    if base in (list, dict):
        return pa.string()
    if base not in _ARROW:
        raise TypeError(f"{where} has type {hint!r}, which has no Parquet column type")
    return _ARROW[base]


def _record_fields(record: type, skip: tuple[str, ...] = ()) -> list[tuple[str, pa.DataType]]:
    hints = typing.get_type_hints(record)
    return [(f.name, _arrow_type(f"{record.__name__}.{f.name}", hints[f.name]))
            for f in dataclasses.fields(record) if f.name not in skip]


# Generated from the records: one column per field of Cell, CellResult and Environment, between the identity and
# orchestration columns. Units are in the names: *_ms milliseconds, *_s seconds, *_bytes bytes, *_pct percent.
SCHEMA = pa.schema([
    ("schema_version", pa.int32()), ("result_id", pa.string()), ("sweep_id", pa.string()),
    ("sweep_name", pa.string()),
    *_record_fields(Cell),
    *_record_fields(CellResult, skip=("cell_id", "group_id", "environment")),
    *_record_fields(Environment),
    ("ray_node_id", pa.string()), ("worker_pid", pa.int64()), ("started_at", _TS), ("finished_at", _TS),
    ("recorded_at", _TS), ("cell_json", pa.string()), ("repro_command", pa.string()),
], metadata={"wavealign.schema_version": str(SCHEMA_VERSION)})
FILE_SCHEMA = pa.schema([f for f in SCHEMA if f.name not in PARTITION_COLUMNS], metadata=SCHEMA.metadata)
CELL_COLUMNS = tuple(name for name, _ in _record_fields(Cell))


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def make_row(cell: Cell, result: CellResult | None, *, sweep_id: str, sweep_name: str, status: str | None = None,
             error: str | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One dataset row from a cell and its result (None for cells that never ran, e.g. unschedulable)."""
    row: dict[str, Any] = {name: None for name in SCHEMA.names}
    config = dataclasses.asdict(cell)
    for key, value in config.items():
        row[key] = _json(value) if isinstance(value, dict | list) else value
    if result is not None:
        for key, value in dataclasses.asdict(result).items():
            if key == "environment":
                row.update(value)
            else:
                row[key] = value
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


QUARANTINE = "_quarantine"


def quarantine_unreadable(run_root: str | Path) -> list[Path]:
    """Move every file under ``results/`` that is not a readable Parquet file (truncated, empty, a stray note)
    to ``results/_quarantine/``, warning with each name; return where they went. Hidden files (a writer's
    temporaries) and the quarantine itself are left alone. The cells such a file held are simply not done, so
    a resumed sweep runs them again."""
    folder = results_dir(run_root)
    moved = []
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        relative = path.relative_to(folder)
        if not path.is_file() or any(part.startswith((".", "_")) for part in relative.parts):
            continue
        try:
            if path.suffix != ".parquet":
                raise ValueError("not a .parquet file")
            pq.read_metadata(path)
        except (pa.ArrowInvalid, OSError, ValueError) as exc:
            target = folder / QUARANTINE / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
            _log.warning("results: moved unreadable %s to %s (%s)", path, target, str(exc).splitlines()[0])
            moved.append(target)
    return moved


def read(run_root: str | Path, columns: list[str] | None = None, filter: ds.Expression | None = None) -> pa.Table:
    """Every row under ``<run_root>/results`` (an empty table of the schema if there is none), older rows
    ``upgraded``. A file that cannot be read is moved aside (``quarantine_unreadable``) and the rest read again: the
    probe of every file runs only when a read fails, not on each of the several reads a sweep makes."""
    folder = results_dir(run_root)
    if not folder.is_dir():
        return SCHEMA.empty_table().select(columns or SCHEMA.names)
    upgrading = columns is None or any(c in UPGRADED_COLUMNS for c in columns)
    read_columns = columns if columns is None or not upgrading else list(
        dict.fromkeys([*columns, "schema_version", "cell_json"]))

    def table() -> pa.Table:
        dataset = ds.dataset(folder, format="parquet", schema=SCHEMA, partitioning="hive",
                             ignore_prefixes=[".", "_"])
        return dataset.to_table(columns=read_columns, filter=filter)

    try:
        found = table()
    except (pa.ArrowInvalid, OSError):
        if not quarantine_unreadable(run_root):
            raise
        found = table()
    found = upgraded(found) if upgrading else found
    return found if columns is None else found.select(columns)


# the columns v5 changed the meaning of, and the first spelling of a simulated cell (backend sim, modelling its
# backend_params' kernel, flex unless given), which config.upgrade_first_spellings maps too
UPGRADED_COLUMNS = ("backend", "backend_params", "measure", "measure_params", "cell_json")
SIM_BACKEND, SIM_KERNEL, SIM_DEFAULT_KERNEL = "sim", "kernel", "flex"


def upgraded_cell(config: dict[str, Any]) -> dict[str, Any]:
    """A cell's config (``cell_json``) written before dataset v5 in today's fields: backend ``sim`` is its
    ``kernel`` measured ``simulated`` (the sim backend's other options its ``measure_params``); ``ncu: true`` is
    measure ``ncu``; else measure ``timed``."""
    config = dict(config)
    profiled = bool(config.pop("ncu", False))
    if config.get("backend") == SIM_BACKEND:
        options = dict(config.get("backend_params") or {})
        config.update(backend=options.pop(SIM_KERNEL, SIM_DEFAULT_KERNEL), backend_params={}, measure="simulated",
                      measure_params=options)
    config.setdefault("measure", "ncu" if profiled else "timed")
    config.setdefault("measure_params", {})
    return config


def upgraded(table: pa.Table) -> pa.Table:
    """``table`` with its rows of schema v4 and before (``schema_version``) as v5 writes them: their ``cell_json``
    through ``upgraded_cell``, and the columns of ``UPGRADED_COLUMNS`` taken from it."""
    if table.num_rows == 0 or "schema_version" not in table.column_names or "cell_json" not in table.column_names:
        return table
    versions = table.column("schema_version").to_pylist()
    old = [i for i, v in enumerate(versions) if v is not None and v < 5]
    if not old:
        return table
    columns = {name: table.column(name).to_pylist() for name in UPGRADED_COLUMNS if name in table.column_names}
    configs = table.column("cell_json").to_pylist()
    for i in old:
        config = upgraded_cell(json.loads(configs[i]))
        for name in columns:
            value = config if name == "cell_json" else config[name]
            columns[name][i] = _json(value) if isinstance(value, dict) else value
    for name, values in columns.items():
        table = table.set_column(table.column_names.index(name), name, pa.array(values, type=SCHEMA.field(name).type))
    return table


def done_cell_ids(run_root: str | Path) -> set[str]:
    """Cells already finished (status ``done``) in the dataset: what ``resume`` skips."""
    table = read(run_root, columns=["cell_id"], filter=ds.field("status") == "done")
    return set(table.column("cell_id").to_pylist())
