"""Dataset rows written in an earlier vocabulary, in today's fields: ``dataset.read`` (and ``dataset.upgrade_frame``)
pass every row through here once, so behind them code sees only today's names.

- rows of schema v4 and before: their ``cell_json`` in today's fields (``upgrade_cell``: backend ``sim`` is the
  kernel it modelled measured ``simulated``, ``ncu: true`` is measure ``ncu``, else measure ``timed``), and the
  columns of those fields taken from it;
- without ``run_seq`` (v5 and before): 0, older than any run that numbers its rows;
- without ``seq_k`` (v1): the length run, in thousands of tokens;
- without ``generator`` (before cells named it), a model preset's: the cluster generator, which drew them whatever
  the library's default is today;
- without ``reorderer`` (before cells named it): WaveAlign's own Stage 1 where the variant has a spatial stage, else
  none;
- a field renamed since (``RENAMED_FIELDS``: ``skip_mode`` is ``skip``): its column taken from ``cell_json``, whose
  key is renamed too.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from wavealign.records import DEFAULT_REORDERER, NO_REORDERER, SPATIAL_STAGES

# the first spelling of a simulated cell: backend sim, modelling its backend_params' kernel (flex unless given)
SIM_BACKEND, SIM_KERNEL, SIM_DEFAULT_KERNEL = "sim", "kernel", "flex"
NCU_SWITCH = "ncu"  # the first spelling of measure ncu, a grid's switch
GENERATOR_BEFORE_NAMED = "clusters"  # what drew a model preset's Q/K/V before cells named their generator
MEASURERS_SINCE = 5  # the dataset schema version whose rows name their measurer
# the columns an upgrade may change, and the ones it reads to do so
UPGRADED_COLUMNS = ("backend", "backend_params", "measure", "measure_params", "cell_json", "run_seq", "seq_k",
                    "generator", "reorderer", "skip")
SOURCE_COLUMNS = ("schema_version", "cell_json", "seq_len_tokens", "model", "captured", "stages")


def json_text(value: Any) -> str:
    """A dict or list column's value as the dataset writes it."""
    return json.dumps(value, sort_keys=True, default=str)


def upgrade_cell(cell: dict[str, Any]) -> dict[str, Any]:
    """A cell's flat view (``cell_json``) written before dataset v5 in today's fields."""
    cell = dict(cell)
    profiled = bool(cell.pop(NCU_SWITCH, False))
    if cell.get("backend") == SIM_BACKEND:
        options = dict(cell.get("backend_params") or {})
        cell.update(backend=options.pop(SIM_KERNEL, SIM_DEFAULT_KERNEL), backend_params={}, measure="simulated",
                    measure_params=options)
    cell.setdefault("measure", "ncu" if profiled else "timed")
    cell.setdefault("measure_params", {})
    return cell


def upgrade_table(table: pa.Table) -> pa.Table:
    """Dataset rows (as read, with whichever of ``SOURCE_COLUMNS`` a rule needs) in today's fields: the module
    docstring lists the rules. A rule whose columns ``table`` lacks is left out; a table with no old row comes back
    with the same values."""
    table = _renamed_fields(_measured_cells(table))
    names = table.column_names
    if "run_seq" in names:
        table = _set(table, "run_seq", pc.coalesce(table.column("run_seq"), pa.scalar(0, pa.int64())))
    if "seq_len_tokens" in names:
        tokens = pc.divide(pc.cast(table.column("seq_len_tokens"), pa.float64()), 1000.0)
        table = _set(table, "seq_k", pc.coalesce(table.column("seq_k"), tokens) if "seq_k" in names else tokens)
    if {"generator", "model", "captured"} <= set(names):
        generator = table.column("generator")
        drawn = pc.and_(pc.and_(pc.is_null(generator), pc.is_valid(table.column("model"))),
                        pc.is_null(table.column("captured")))
        table = _set(table, "generator", pc.if_else(drawn, GENERATOR_BEFORE_NAMED, generator))
    if {"reorderer", "stages"} <= set(names):
        spatial = pc.is_in(table.column("stages"), pa.array(SPATIAL_STAGES))
        table = _set(table, "reorderer", pc.coalesce(table.column("reorderer"),
                                                     pc.if_else(spatial, DEFAULT_REORDERER, NO_REORDERER)))
    return table


def _set(table: pa.Table, name: str, values: Any) -> pa.Table:
    """``table`` with column ``name`` set to ``values`` (added where it lacks one), keeping the column's type."""
    if name not in table.column_names:
        return table.append_column(name, values)
    return table.set_column(table.column_names.index(name), name, pc.cast(values, table.schema.field(name).type))


def _measured_cells(table: pa.Table) -> pa.Table:
    """``table`` with its rows of schema v4 and before as v5 writes them: their ``cell_json`` through
    ``upgrade_cell``, and the columns of its fields taken from it."""
    if table.num_rows == 0 or not {"schema_version", "cell_json"} <= set(table.column_names):
        return table
    versions = table.column("schema_version").to_pylist()
    old = [i for i, v in enumerate(versions) if v is not None and v < MEASURERS_SINCE]
    if not old:
        return table
    fields = ("backend", "backend_params", "measure", "measure_params", "cell_json")
    columns = {name: table.column(name).to_pylist() for name in fields if name in table.column_names}
    cells = table.column("cell_json").to_pylist()
    for i in old:
        cell = upgrade_cell(json.loads(cells[i]))
        for name in columns:
            value = cell if name == "cell_json" else cell[name]
            columns[name][i] = json_text(value) if isinstance(value, dict) else value
    for name, values in columns.items():
        table = table.set_column(table.column_names.index(name), name,
                                 pa.array(values, type=table.schema.field(name).type))
    return table


# a field renamed: AttentionSpec.skip_mode is ``skip`` (Variant.skip's one name); a row written before carries it
# under its first name in ``cell_json`` only (the dataset's schema has no ``skip_mode`` column to read)
RENAMED_FIELDS = {"skip_mode": "skip"}


def _renamed_fields(table: pa.Table) -> pa.Table:
    """``table`` with the rows written before a ``RENAMED_FIELDS`` rename in today's names: each such column taken
    from the row's ``cell_json``, whose keys are renamed too."""
    names = set(table.column_names)
    renamed = [new for new in RENAMED_FIELDS.values() if new in names]
    if table.num_rows == 0 or not renamed or "cell_json" not in names:
        return table
    old = [i for i, missing in enumerate(pc.is_null(table.column(renamed[0])).to_pylist()) if missing]
    if not old:
        return table
    columns = {name: table.column(name).to_pylist() for name in (*renamed, "cell_json")}
    for i in old:
        if columns["cell_json"][i] is None:
            continue
        cell = json.loads(columns["cell_json"][i])
        for first, new in RENAMED_FIELDS.items():
            if first in cell:
                cell[new] = cell.pop(first)
                if new in columns:
                    columns[new][i] = cell[new]
        columns["cell_json"][i] = json_text(cell)
    for name, values in columns.items():
        table = table.set_column(table.column_names.index(name), name,
                                 pa.array(values, type=table.schema.field(name).type))
    return table
