"""The results dataset: one Parquet row per cell, a fixed versioned schema, hive-partitioned by hardware
and method under ``<run_root>/results/``.

Files are written whole to a hidden temporary name and renamed, so a crash never leaves half a file, and
readers (``read``) ignore temporaries. A file is read only once it has been read whole and its schema checked
against ours (``trusted_files``); any other file is moved to ``results/_quarantine/`` with its reason.
Analysis reads one GPU type or method cheaply through the partitioning:
``read(root, filter=(ds.field("hardware") == "h100"))``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import os
import re
import time
import types
import typing
import uuid
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from orchestrator import dataset_compat, files
from orchestrator.dataset_compat import json_text as _json
from orchestrator.run_root import RunRoot
from wavealign.records import Cell, CellResult, Environment

if TYPE_CHECKING:
    import pandas as pd

SCHEMA_VERSION = 7  # 2: generated from wavealign.records; seq_k, launch_plan_ms, net speedup, ncu occupancy, repro;
#                    3: reorder_cost and host_reorder_ms (the reorderer columns joined late in v2);
#                    4: inputs_prefetched;
#                    5: measure and measure_params (wavealign.measurers): a simulated row names the backend it
#                    models (no backend sim), and Nsight Compute is measure ncu (no ncu_requested column). Rows of
#                    v4 and before are read as v5 writes them (``dataset_compat``);
#                    6: run_seq, the run of the run root that recorded a row: rows are ordered by it, not by a clock;
#                    7: per-rep kernel times, paired timing, speedup intervals and verdicts, the GPU's clocks, power,
#                    temperature and throttle reasons (older rows read them as missing: no interval, no verdict)
PARTITION_COLUMNS = ("hardware", "method")
STATUSES = ("done", "failed", "unschedulable")

_TS = pa.timestamp("ms", tz="UTC")
_ARROW = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}
_log = logging.getLogger(__name__)
# a sweep's id (``plan.sweep_id``): it names the folder sweeps/<sweep_id>, so an id read from a file is used only if
# it is one of ours
SWEEP_ID_FORMAT = "16 lowercase hex digits"
_SWEEP_ID = re.compile(r"[0-9a-f]{16}")


def is_sweep_id(value: Any) -> bool:
    return isinstance(value, str) and _SWEEP_ID.fullmatch(value) is not None


def _arrow_type(where: str, hint: Any) -> pa.DataType:
    """The column type of a record field: scalars as themselves (``X | None`` nullable), a ``list[float]`` as a
    list of doubles, other lists and dicts as JSON."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = typing.get_origin(hint) or hint
    if args and base in (typing.Union, types.UnionType):
        base = typing.get_origin(args[0]) or args[0]
    if base is list and typing.get_args(hint) == (float,):
        return pa.list_(pa.float64())  # a series of figures (kernel_ms_reps): read back as numbers, not text
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
    *[(name, _arrow_type(f"Cell.{name}", hint)) for name, hint in Cell.column_hints().items()],
    *_record_fields(CellResult, skip=("cell_id", "group_id", "environment")),
    *_record_fields(Environment),
    ("ray_node_id", pa.string()), ("worker_pid", pa.int64()), ("started_at", _TS), ("finished_at", _TS),
    ("recorded_at", _TS), ("run_seq", pa.int64()), ("cell_json", pa.string()), ("repro_command", pa.string()),
], metadata={"wavealign.schema_version": str(SCHEMA_VERSION)})
FILE_SCHEMA = pa.schema([f for f in SCHEMA if f.name not in PARTITION_COLUMNS], metadata=SCHEMA.metadata)
CELL_COLUMNS = Cell.columns()
# Which of two rows is newer: the later run of the run root (``run_seq``: 1, 2, ... per driver run, from what the run
# root holds, ``next_run_seq``), then, within a run or between rows written before v6 (run_seq 0), the later
# ``recorded_at``. Never the wall clock first: a host whose clock ran a year ahead once would otherwise have its
# rows stay the newest over every later re-measurement.
ORDER_COLUMNS = ("run_seq", "recorded_at")


def order_key(row: dict[str, Any]) -> tuple:
    """A row's place in ``ORDER_COLUMNS`` order (the newest sorts last)."""
    return row.get("run_seq") or 0, row["recorded_at"]


def newest_per_cell(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The newest row (``order_key``) of each ``cell_id`` among ``rows``."""
    latest: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["cell_id"] not in latest or order_key(row) >= order_key(latest[row["cell_id"]]):
            latest[row["cell_id"]] = row
    return latest


def next_run_seq(run_root: str | Path, seen: int = 0) -> int:
    """The ``run_seq`` of a new run of ``run_root``: one more than any its rows hold and ``seen`` (the largest a
    caller found elsewhere, in the run records)."""
    column = read(run_root, columns=["run_seq"]).column("run_seq")
    return max(pc.max(column).as_py() or 0, seen) + 1


# the most one row costs on disk while its sweep runs, before the end merges the sweep's files: a results file of one
# row (a group of one cell, or batch_cells=1) is 33.2 KB, nearly all the footer of the schema's columns (measured
# 2026-12-02: 1 row 33,206 bytes, 3 rows 33,761, 10 rows 35,597)
ROW_BYTES = 34_000


def make_row(cell: Cell, result: CellResult | None, *, sweep_id: str, sweep_name: str, status: str | None = None,
             error: str | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One dataset row from a cell and its result (None for cells that never ran, e.g. unschedulable)."""
    row: dict[str, Any] = {name: None for name in SCHEMA.names}
    config = cell.flat()
    for key, value in config.items():
        row[key] = _json(value) if isinstance(value, dict | list) else value
    if result is not None:
        for key, value in dataclasses.asdict(result).items():
            if key == "environment":
                row.update(value)
            else:
                row[key] = _json(value) if SCHEMA.field(key).type == pa.string() and isinstance(value, list) else value
    if status is not None:
        row["status"] = status
    if error is not None:
        row["error"] = error
    row.update(extra or {})
    row.update(schema_version=SCHEMA_VERSION, result_id=row.get("result_id") or uuid.uuid4().hex,
               sweep_id=sweep_id, sweep_name=sweep_name, cell_json=_json(config),
               recorded_at=row.get("recorded_at") or time.time())
    if not is_sweep_id(sweep_id):
        raise ValueError(f"sweep_id must be {SWEEP_ID_FORMAT}, got {sweep_id!r}")
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
    return RunRoot(run_root).results


def file_name(sweep_id: str, result_ids: list[str]) -> str:
    """A results file's name, from its rows' sweep and result ids: writing the same rows again (a flush retried
    after an interrupt between its rename and the buffer's clearing) replaces the file instead of adding one."""
    digest = hashlib.sha256("\n".join(sorted(result_ids)).encode()).hexdigest()[:16]
    return f"part-{sweep_id}-{digest}.parquet"


def write(run_root: str | Path, rows: list[dict[str, Any]]) -> list[Path]:
    """Write ``rows`` as one file per (hardware, method) partition, each whole (``files.write_whole``: a temporary
    name, then a rename), with page checksums that ``read`` verifies; raises ``files.StorageError``."""
    by_partition: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_partition[(row["hardware"], row["method"])].append(row)
    written = []
    for (hardware, method), part in by_partition.items():
        folder = results_dir(run_root) / f"hardware={hardware}" / f"method={method}"
        written.append(_write_file(folder, part[0]["sweep_id"], to_table(part, FILE_SCHEMA)))
    return written


def _write_file(folder: Path, sweep_id: str, table: pa.Table) -> Path:
    """``table`` (of ``FILE_SCHEMA``) as one results file in ``folder``, named from its result ids."""
    path = folder / file_name(sweep_id, table.column("result_id").to_pylist())
    files.write_whole(path, lambda tmp: pq.write_table(table, tmp, write_page_checksum=True))
    _TRUSTED[path.resolve()] = _version(path)  # made here from our schema: no need to read it back
    return path


def compact(paths: list[Path], chunk: int = 256) -> list[Path]:
    """Merge results files this driver wrote (``paths``, all of one sweep) into one per partition folder, ``chunk``
    files at a time (so that no more than a chunk is read at once), removing each file once its rows are in a
    merged one; returns the files left. A sweep of many small groups writes a file per group as they finish, and
    every later read of the folder pays per file (a 10,000-cell sweep: 3,000 files, 1 GB of reader memory). A driver
    stopped between writing a merged file and removing what it merged leaves those rows twice: ``read`` keeps each
    result once (``distinct``). A file damaged or removed meanwhile is left out of the merge (``read_written``)."""
    by_folder: dict[Path, list[Path]] = defaultdict(list)
    for path in dict.fromkeys(paths):
        if path.is_file():
            by_folder[path.parent].append(path)
    left = []
    for folder, level in by_folder.items():
        while len(level) > 1:
            merged = []
            for start in range(0, len(level), chunk):
                part = level[start:start + chunk]
                if len(part) == 1:
                    merged += part
                    continue
                table = read_written(folder.parents[2], part).select(FILE_SCHEMA.names)  # <root>/results/h=/m=
                if table.num_rows == 0:
                    continue
                target = _write_file(folder, table.column("sweep_id")[0].as_py(), table.cast(FILE_SCHEMA))
                for path in part:
                    if path != target:
                        path.unlink(missing_ok=True)
                merged.append(target)
            level = merged
        left += level
    return left


QUARANTINE = "_quarantine"
REASON_SUFFIX = ".reason.txt"  # beside a quarantined file: why it was moved
# columns of earlier versions that this one dropped, in their files (v1-v4's ncu_requested: measure ncu since v5;
# skip_mode: AttentionSpec.skip since, its value read from cell_json by dataset_compat)
RETIRED_COLUMNS = ("ncu_requested", "skip_mode")
# identity columns a row cannot be without, whatever version of the schema wrote it
REQUIRED_COLUMNS = ("schema_version", "result_id", "sweep_id", "cell_id", "group_id", "status", "recorded_at")
# the fewest bytes a row of ours takes in a results file: its result id alone is a uuid4's 122 random bits, which no
# encoding stores in under 15 bytes (a crafted 374 KB file of 3,000,000 rows took 27 s and 3 GB to read)
MIN_FILE_BYTES_PER_ROW = 8
# what our rows decompress to at most: numbers, ids and the odd traceback, which compress about 10x; a file that
# claims more than 100x its size, beyond 64 MiB, was made to expand (a 4 MB file read until memory ran out)
MAX_EXPANSION, MIN_EXPANSION_BYTES = 100, 64 * 2 ** 20
NEWER = "written by a newer wavealign"  # how a file of a later schema version is named: left where it is, unread
_TRUSTED: dict[Path, tuple[int, int, int]] = {}  # files read whole and found ours, by (inode, size, mtime_ns)
_CHECKSUMS = ds.ParquetFileFormat(
    default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True))
_PARTITIONING = ds.partitioning(pa.schema([SCHEMA.field(name) for name in PARTITION_COLUMNS]), flavor="hive")


def _version(path: Path) -> tuple[int, int, int]:
    stat = path.stat()
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _newer_version(path: Path) -> str | None:
    """``NEWER`` and its schema version where the file's rows are of a later dataset schema than this code reads (its
    ``schema_version`` column alone, read before the rest), else None."""
    if "schema_version" not in pq.read_schema(path).names:
        return None
    versions = set(pq.read_table(path, columns=["schema_version"]).column("schema_version").to_pylist())
    later = sorted(v for v in versions if isinstance(v, int) and v > SCHEMA_VERSION)
    return f"{NEWER} (dataset schema v{later[-1]}; this one reads v1 to v{SCHEMA_VERSION})" if later else None


def untrusted_reason(path: Path, relative: Path) -> str | None:
    """Why the results file ``path`` (at ``relative`` under ``results/``) cannot be trusted, or None: it is
    trusted only once it was read whole (every page, checksums verified) and found to be ours: in a
    ``hardware=<id>/method=<name>`` folder, every column one of our schema's with our type, no identity column
    missing or empty, a known schema version and status, and sweep ids of our own format."""
    if path.suffix != ".parquet":
        return "not a .parquet file"
    keys = [part.partition("=")[0] for part in relative.parts[:-1]]
    if keys != list(PARTITION_COLUMNS) or any(not part.partition("=")[2] for part in relative.parts[:-1]):
        return f"not in a {'/'.join(f'{k}=<value>' for k in PARTITION_COLUMNS)} folder"
    try:
        metadata = pq.read_metadata(path)  # the footer alone: a file made to expand is refused unread
        rows, size = metadata.num_rows, path.stat().st_size
        if rows * MIN_FILE_BYTES_PER_ROW > size:
            return (f"{rows:,} rows in {size:,} bytes, under {MIN_FILE_BYTES_PER_ROW} bytes a row: "
                    "less than a row's own result id (a random uuid) takes, so made to expand when read")
        expanded = sum(metadata.row_group(g).column(c).total_uncompressed_size
                       for g in range(metadata.num_row_groups) for c in range(metadata.num_columns))
        if expanded > max(MAX_EXPANSION * size, MIN_EXPANSION_BYTES):
            return (f"{size:,} bytes that decompress to {expanded:,}, over {MAX_EXPANSION}x: made to expand when "
                    "read (a 4 MB file read until memory ran out)")
        if (newer := _newer_version(path)) is not None:
            return newer
        table = pq.read_table(path, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as exc:
        return f"unreadable: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
    for field in table.schema:
        if field.name in RETIRED_COLUMNS:
            continue
        if field.name not in FILE_SCHEMA.names:
            return f"column {field.name!r} is not in dataset schema v{SCHEMA_VERSION}"
        expected = FILE_SCHEMA.field(field.name).type
        if field.type != expected:
            return f"column {field.name!r} is {field.type}; expected {expected}"
    for name in REQUIRED_COLUMNS:
        if name not in table.column_names:
            return f"no {name!r} column"
        if table.column(name).null_count:
            return f"{table.column(name).null_count} rows have no {name!r}"
    versions = set(table.column("schema_version").to_pylist())
    if not versions <= set(range(1, SCHEMA_VERSION + 1)):
        return f"schema_version {sorted(versions)}; expected 1 to {SCHEMA_VERSION}"
    statuses = set(table.column("status").to_pylist())
    if not statuses <= set(STATUSES):
        return f"status {sorted(statuses - set(STATUSES))}; expected one of {STATUSES}"
    bad_ids = sorted(s for s in set(table.column("sweep_id").to_pylist()) if not is_sweep_id(s))
    if bad_ids:
        return f"sweep_id {bad_ids[0]!r} is not a sweep id ({SWEEP_ID_FORMAT})"
    return None


def trusted_files(run_root: str | Path, recheck: bool = False) -> list[Path]:
    """The results files ``read`` may read: each checked once per version (``untrusted_reason``, remembered for
    this process; ``recheck`` forgets), the others moved to ``results/_quarantine/`` with their reason, in a
    warning and in a ``.reason.txt`` beside them. Hidden files (a writer's temporaries) and the quarantine itself are
    left alone. The cells a quarantined file held are not done, so a resumed sweep runs them again."""
    folder = results_dir(run_root)
    trusted = []
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        relative = path.relative_to(folder)
        if any(part.startswith((".", "_")) for part in relative.parts) or not (path.is_file() or path.is_symlink()):
            continue
        if _trusted(folder, path, recheck):
            trusted.append(path)
    return trusted


def _trusted(folder: Path, path: Path, recheck: bool) -> bool:
    """Whether the results file ``path`` under ``folder`` may be read (checked once per version, unless
    ``recheck``); one that may not is quarantined (``_quarantine``), one gone meanwhile is only left out."""
    if path.is_symlink():  # a link planted under results/ is never read through: its target is not ours
        _quarantine(folder, path.relative_to(folder), "a symbolic link (not followed)")
        return False
    key = path.resolve()
    try:
        version = _version(path)
    except FileNotFoundError:  # moved away (quarantined by another reader, removed) since the listing
        return False
    if not recheck and _TRUSTED.get(key) == version:
        return True
    reason = untrusted_reason(path, path.relative_to(folder))
    if reason is not None and reason.startswith(NEWER):
        # another version's record, not damage: never moved (a resumed older sweep or a compare would have hidden
        # it in the quarantine); only left out here
        _log.warning("results: left out %s (%s; upgrade wavealign to read it)", path, reason)
        return False
    if reason is not None:
        _quarantine(folder, path.relative_to(folder), reason)
        return False
    _TRUSTED[key] = version
    return True


def read_written(run_root: str | Path, paths: list[Path], columns: list[str] | None = None) -> pa.Table:
    """The rows of ``paths``, results files this driver wrote, as far as they are still there whole: one removed
    since (``results/`` deleted) is left out, one changed since is checked again and, damaged, quarantined with
    its warning (``_trusted``), so that the sweep reading its own files (MLflow's logging, the end's merge) goes
    on with the rest instead of failing as bad input (pyarrow's ``ArrowInvalid`` is a ``ValueError``). A file
    damaged without a change to its size or time fails its page checksums: every path is then checked again."""
    folder = results_dir(run_root)
    try:
        return read_files(run_root, [p for p in paths if _trusted(folder, p, False)], columns)
    except (pa.ArrowException, OSError):
        return read_files(run_root, [p for p in paths if _trusted(folder, p, True)], columns)


def _quarantine(folder: Path, relative: Path, reason: str) -> None:
    """Move an untrusted file aside with its reason; where the folder cannot be written (a results folder read
    where it is, read-only) it is only left out, with the same warning."""
    target = folder / QUARANTINE / relative
    try:
        files.make_dir(target.parent)
        os.replace(folder / relative, target)
        files.write_whole(target.with_name(target.name + REASON_SUFFIX), reason + "\n")
    except FileNotFoundError:
        return  # quarantined by another reader meanwhile
    except OSError as exc:  # files.StorageError too
        _log.warning("results: left out %s (%s; it could not be moved aside: %s)", folder / relative, reason,
                     getattr(exc, "strerror", None) or exc)
        return
    _log.warning("results: moved %s to %s (%s)", folder / relative, target, reason)


def read(run_root: str | Path, columns: list[str] | None = None, filter: ds.Expression | None = None) -> pa.Table:
    """Every row of the trusted files under ``<run_root>/results`` (``trusted_files``; an empty table of the schema
    if there are none), older rows in today's fields (``dataset_compat``), each result once (``distinct``). A
    file damaged after its check (its pages fail their checksums) sends every file through the check again, once."""
    upgrading = columns is None or any(c in dataset_compat.UPGRADED_COLUMNS for c in columns)
    needed = [*(dataset_compat.SOURCE_COLUMNS if upgrading else []), "result_id"]
    read_columns = None if columns is None else list(dict.fromkeys([*columns, *needed]))
    try:
        found = read_files(run_root, trusted_files(run_root), read_columns, filter)
    except (pa.ArrowException, OSError):
        found = read_files(run_root, trusted_files(run_root, recheck=True), read_columns, filter)
    found = distinct(dataset_compat.upgrade_table(found) if upgrading else found)
    return found if columns is None else found.select(columns)


def upgrade_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A pandas frame of rows made elsewhere than ``read`` (which upgrades what it reads) in today's fields: the
    columns ``dataset_compat``'s rules read or write, through ``dataset_compat.upgrade_table``."""
    rules = (*dataset_compat.SOURCE_COLUMNS, *dataset_compat.UPGRADED_COLUMNS)
    present = [c for c in dict.fromkeys(rules) if c in frame]
    types = pa.schema([SCHEMA.field(c) for c in present])
    upgraded = dataset_compat.upgrade_table(pa.Table.from_pandas(frame[present], schema=types, preserve_index=False))
    out = frame.copy()
    for name in set(upgraded.column_names) & set(dataset_compat.UPGRADED_COLUMNS):
        out[name] = upgraded.column(name).to_pandas().to_numpy()
    return out


def read_files(run_root: str | Path, paths: list[Path], columns: list[str] | None = None,
               filter: ds.Expression | None = None) -> pa.Table:
    """The rows of ``paths``, results files of ``run_root`` already trusted (``trusted_files``, or written here)."""
    if not paths:
        return SCHEMA.empty_table().select(columns or SCHEMA.names)
    dataset = ds.dataset([str(p) for p in paths], schema=SCHEMA, format=_CHECKSUMS, partitioning=_PARTITIONING,
                         partition_base_dir=str(results_dir(run_root)))
    return dataset.to_table(columns=columns, filter=filter)


def distinct(table: pa.Table) -> pa.Table:
    """``table`` with each ``result_id`` once (its first row): a result id names one row, and the same row in two
    files (``compact`` stopped between writing the merged file and removing the ones it merged, or a file copied
    under another name) is one result."""
    ids = table.column("result_id")
    if pc.count_distinct(ids).as_py() == table.num_rows:
        return table
    seen: set[str] = set()
    first = [i for i, rid in enumerate(ids.to_pylist()) if not (rid in seen or seen.add(rid))]
    return table.take(first)


def done_cell_ids(run_root: str | Path) -> set[str]:
    """Cells already finished (status ``done``) in the dataset: what ``resume`` skips."""
    table = read(run_root, columns=["cell_id"], filter=ds.field("status") == "done")
    return set(table.column("cell_id").to_pylist())
