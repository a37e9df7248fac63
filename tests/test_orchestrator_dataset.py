"""The Parquet dataset: a fixed schema covering every cell and result field, atomic partitioned files."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

from orchestrator import dataset
from wavealign import pipeline
from wavealign.records import Cell, CellResult, Environment

DATA = Path(__file__).resolve().parent / "data"
SWEEP = "0123456789abcdef"  # a sweep id of plan.sweep_id's format


def tiny_cell(seed: int = 0, method: str = "random") -> Cell:
    return Cell.from_flat(dict(cell_id=f"c{seed}{method}", group_id=f"g{seed}", hardware="cpu", profile_hardware="h100",
                               backend="reference", method=method, variant="original", stages="none", skip="force",
                               workload="shape", seq_len_tokens=256, num_heads=1, head_dim=16, block_size=128,
                               wave_size=4, seed=seed, reps=1, warmup=0))


def test_every_cell_result_and_environment_field_has_a_column_of_its_type():
    columns = {f.name: f.type for f in dataset.SCHEMA}
    cell_fields = set(Cell.columns())
    result_fields = {f.name for f in dataclasses.fields(CellResult)} - {"environment"}
    env_fields = {f.name for f in dataclasses.fields(Environment)}
    assert (cell_fields | result_fields | env_fields) <= set(columns)
    assert columns["kernel_ms_median"] == pa.float64() and columns["reps_done"] == pa.int64()
    assert columns["heads"] == pa.string() and columns["reorder_applied"] == pa.bool_()  # a list as JSON text


def test_rows_round_trip_through_partitioned_files(tmp_path):
    cells = [tiny_cell(0), tiny_cell(1, "planted")]
    rows = [dataset.make_row(c, pipeline.run_cell(c), sweep_id=SWEEP, sweep_name="t") for c in cells]
    dataset.write(tmp_path, rows)
    table = dataset.read(tmp_path)
    assert table.schema.equals(dataset.SCHEMA)
    assert sorted(table.column("cell_id").to_pylist()) == sorted(c.cell_id for c in cells)
    folders = {p.parent.relative_to(dataset.results_dir(tmp_path)).as_posix()
               for p in dataset.results_dir(tmp_path).rglob("*.parquet")}
    assert folders == {"hardware=cpu/method=random", "hardware=cpu/method=planted"}


def test_one_partition_reads_alone(tmp_path):
    cells = [tiny_cell(0), tiny_cell(1, "planted")]
    dataset.write(tmp_path, [dataset.make_row(c, pipeline.run_cell(c), sweep_id=SWEEP, sweep_name="t") for c in cells])
    table = dataset.read(tmp_path, filter=ds.field("method") == "planted")
    assert table.column("cell_id").to_pylist() == [cells[1].cell_id]


def test_no_temporary_file_is_left_and_temporaries_are_never_read(tmp_path):
    cell = tiny_cell()
    dataset.write(tmp_path, [dataset.make_row(cell, pipeline.run_cell(cell), sweep_id=SWEEP, sweep_name="t")])
    folder = next(dataset.results_dir(tmp_path).rglob("*.parquet")).parent
    assert not list(folder.glob(".*"))
    (folder / ".part-crashed.parquet.tmp").write_bytes(b"half a file")
    assert dataset.read(tmp_path).num_rows == 1


def test_a_cell_that_never_ran_is_a_row_with_its_status_and_reason(tmp_path):
    row = dataset.make_row(tiny_cell(), None, sweep_id=SWEEP, sweep_name="t", status="unschedulable",
                           error="no H200 node")
    dataset.write(tmp_path, [row])
    got = dataset.read(tmp_path).to_pylist()[0]
    assert (got["status"], got["error"], got["kernel_ms_median"]) == ("unschedulable", "no H200 node", None)


def test_done_cell_ids_lists_only_finished_cells(tmp_path):
    done, failed = tiny_cell(0), tiny_cell(1)
    dataset.write(tmp_path, [dataset.make_row(done, pipeline.run_cell(done), sweep_id=SWEEP, sweep_name="t"),
                             dataset.make_row(failed, None, sweep_id=SWEEP, sweep_name="t", status="failed",
                                              error="x")])
    assert dataset.done_cell_ids(tmp_path) == {done.cell_id}


def test_rows_written_before_measurers_read_as_measured_by_ncu_or_timed(tmp_path):
    """Dataset v2 files as an H200 sweep wrote them (tests/data/dataset-v2): 2 rows asked for Nsight Compute
    (ncu_requested, a column v5 has no more), 1 did not."""
    shutil.copytree(DATA / "dataset-v2", tmp_path, dirs_exist_ok=True)  # a read may quarantine: never in the checkout
    table = dataset.read(tmp_path)
    assert set(table.column("schema_version").to_pylist()) == {2}
    measures = table.column("measure").to_pylist()
    assert (measures.count("ncu"), measures.count("timed")) == (2, 1)
    configs = [json.loads(c) for c in table.column("cell_json").to_pylist()]
    assert [c["measure"] for c in configs] == measures and not any("ncu" in c for c in configs)
    assert dataset.read(tmp_path, columns=["measure"]).column_names == ["measure"]


def test_a_row_of_backend_sim_reads_as_its_kernel_measured_simulated(tmp_path):
    cell = tiny_cell().replaced(hardware="h100", profile_hardware="h100")
    row = dataset.make_row(cell, None, sweep_id=SWEEP, sweep_name="t", status="failed", error="lost")
    first = {**cell.flat(), "backend": "sim", "backend_params": {"kernel": "fa4", "row_jitter": 0.1},
             "ncu": False}
    first.pop("measure"), first.pop("measure_params")
    row.update(schema_version=4, backend="sim", backend_params=json.dumps(first["backend_params"]), measure=None,
               measure_params=None, cell_json=json.dumps(first))
    dataset.write(tmp_path, [row])
    (read,) = dataset.read(tmp_path).to_pylist()
    assert (read["backend"], read["measure"]) == ("fa4", "simulated")
    assert json.loads(read["backend_params"]) == {} and json.loads(read["measure_params"]) == {"row_jitter": 0.1}
    assert Cell.from_flat(json.loads(read["cell_json"])) == Cell.from_flat(
        {**cell.flat(), "backend": "fa4", "measure": "simulated", "measure_params": {"row_jitter": 0.1}})
