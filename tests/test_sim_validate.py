"""`python lab/validate_sim.py`: measured cells (an NCU table, or a sweep's Parquet rows) run again on backend sim
through the pipeline; MAE, DRAM ratio and rankings are reported.

The "measurements" here are fabricated from the simulator itself (plus a known perturbation), only to
exercise the job; they are not results.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import lab_studies
import pytest
import torch

from orchestrator import dataset
from wavealign import inputs, kernels, launch_order, pipeline, sim
from wavealign.masks import npz, synthetic
from wavealign.records import Cell

validate_sim = lab_studies.study("validate_sim")

SWEEP = "0123456789abcdef"  # a sweep id of plan.sweep_id's format

STAGES = ("none", "spatial", "temporal", "both")
WAVE = kernels.get("flex").wave_size("h200")


def _fabricated_rows(tmp_path, l2_shift_pts: float = 0.0, dram_scale: float = 1.0) -> list[dict]:
    """NCU-shaped rows whose 'measured' values are h200 simulations of the generator's own masks, shifted."""
    rows = []
    npz.save(tmp_path / "xattention.npz", synthetic.planted_mask(2, 24, 24, 0.3, seed=9))
    cases = [("random", 0, 2048, synthetic.random_mask(2, 16, 16, 0.3, seed=0), ""),
             ("planted", 1, 2048, synthetic.planted_mask(2, 16, 16, 0.3, seed=1), ""),
             ("xattention", 9, 3072, None, str(tmp_path / "xattention.npz"))]
    for kind, seed, seq_len, mask, mask_path in cases:
        mask = npz.load(mask_path) if mask_path else mask
        for stages in STAGES:
            order = None if stages == "none" else launch_order.plan(mask, wave_size=WAVE, stages=stages)
            r = sim.simulate(mask, order, hardware="h200", backend="flex", block_size=128)
            rows.append({"backend": "flex", "stages": stages, "mask_kind": kind, "seq_len": seq_len, "heads": 2,
                         "block_size": 128, "head_dim": 128, "density": 0.3, "seed": seed,
                         "l2_hit_pct": r.l2_hit_pct + l2_shift_pts, "dram_read_bytes": r.hbm_read_bytes * dram_scale,
                         "kernel_ms": r.kernel_time_s * 1e3, "mask_file": mask_path})
    return rows


def _write_csv(path, rows):
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_a_table_the_simulator_would_produce_validates_with_zero_error(tmp_path):
    measured = _write_csv(tmp_path / "ncu.csv", _fabricated_rows(tmp_path))
    assert validate_sim.main([str(measured), "--out", str(tmp_path / "out")]) == 0
    rows = list(csv.DictReader((tmp_path / "out" / "validation.csv").open()))
    assert len(rows) == 12
    assert all(float(r["l2_hit_abs_err_pts"]) == pytest.approx(0.0, abs=1e-9) for r in rows)
    assert all(float(r["dram_ratio"]) == pytest.approx(1.0) for r in rows)
    report = (tmp_path / "out" / "validation.md").read_text()
    assert "L2 hit MAE: 0.00 points" in report and "rankings preserved: all groups" in report


def test_shifted_measurements_show_as_mae_and_dram_ratio(tmp_path):
    rows = _fabricated_rows(tmp_path, l2_shift_pts=-7.0, dram_scale=1.25)
    summary = validate_sim.summarize(validate_sim.validate(
        validate_sim.from_table(_write_csv(tmp_path / "ncu.csv", rows), "h200")))
    assert summary["l2_hit_mae_pts"] == pytest.approx(7.0)
    assert not summary["l2_hit_mae_goal_met"]
    assert summary["dram_ratio_max"] == pytest.approx(1 / 1.25)
    assert not summary["dram_goal_met"]
    assert summary["ranking_goal_met"]  # a uniform shift keeps every ranking


def test_a_reversed_ranking_is_reported(tmp_path):
    rows = _fabricated_rows(tmp_path)
    for row in rows:
        if row["mask_kind"] == "planted":
            row["l2_hit_pct"] = {"none": 90.0, "spatial": 60.0, "temporal": 40.0, "both": 20.0}[row["stages"]]
    summary = validate_sim.summarize(validate_sim.validate(
        validate_sim.from_table(_write_csv(tmp_path / "ncu.csv", rows), "h200")))
    verdicts = {g.split("/")[1]: v["l2_rank_preserved"] for g, v in summary["groups"].items()}
    assert verdicts == {"planted": False, "random": True, "xattention": True}
    assert not summary["ranking_goal_met"]


def test_json_lines_and_variant_names_are_accepted(tmp_path):
    rows = _fabricated_rows(tmp_path)[:4]
    for row, variant in zip(rows, ("original", "spatial", "temporal", "wavealign"), strict=True):
        row["stages"] = variant
    path = tmp_path / "ncu.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert [m.cell.attention.stages for m in validate_sim.from_table(path, "h200")] == list(STAGES)


def test_a_row_without_a_required_column_is_rejected(tmp_path):
    rows = _fabricated_rows(tmp_path)[:1]
    del rows[0]["dram_read_bytes"]
    with pytest.raises(ValueError, match=r"lacks columns \['dram_read_bytes'\]"):
        validate_sim.from_table(_write_csv(tmp_path / "ncu.csv", rows), "h200")


def test_a_method_mask_without_a_mask_file_is_rejected(tmp_path):
    rows = _fabricated_rows(tmp_path)[:1]
    rows[0].update(mask_kind="minference", mask_file="")
    with pytest.raises(ValueError, match="needs a mask_file"):
        validate_sim.from_table(_write_csv(tmp_path / "ncu.csv", rows), "h200")


def test_packed_masks_round_trip(tmp_path):
    mask = synthetic.random_mask(3, 5, 13, 0.4, seed=1)
    npz.save(tmp_path / "m.npz", mask)
    assert torch.equal(npz.load(tmp_path / "m.npz"), mask)


def test_masks_regenerate_exactly_as_bench_kernels_made_them(tmp_path):
    # bench-kernels recorded the realised density; the generator was asked for 0.25 with its own defaults
    row = {"backend": "triton", "stages": "none", "mask_kind": "planted", "seq_len": 2048, "heads": 2,
           "block_size": 128, "head_dim": 128, "density": 0.2449, "seed": 0, "l2_hit_pct": 50.0,
           "dram_read_bytes": 1e9, "kernel_ms": 1.0}
    [measured] = validate_sim.from_table(_write_csv(tmp_path / "ncu.csv", [row]), "h200", mask_density=0.25)
    cell = validate_sim.as_simulated(measured, None, 0.0)
    mask, _ = inputs.build(inputs.InputRequest(cell.inputs, cell.attention.geometry.block_size, torch.device("cpu"),
                                               with_qkv=False))
    assert torch.equal(mask, synthetic.planted_mask(2, 16, 16, 0.25, seed=0))


def test_a_sweeps_profiled_rows_validate_from_its_parquet(tmp_path):
    """Rows as a GPU sweep measuring ncu writes them (counters set to the simulator's own figures)."""
    rows = []
    for stages, variant in (("none", "original"), ("both", "wavealign")):
        cell = Cell.from_flat(dict(cell_id=variant, group_id="g", hardware="h200", profile_hardware="h200",
                                   backend="flex", method="planted", variant=variant, stages=stages, skip="force",
                                   workload="shape-2h", seq_len_tokens=2048, num_heads=2, head_dim=128, block_size=128,
                                   wave_size=WAVE, method_params={"density": 0.3, "seed": 4}, measure="ncu"))
        [predicted] = pipeline.run_group([cell.replaced(measure="simulated")])
        result = dataclasses.replace(predicted, simulated=False, timer="cuda_events",
                                     ncu_l2_hit_pct=predicted.l2_hit_pct + 3.0,
                                     ncu_dram_read_bytes=predicted.hbm_read_bytes, ncu_kernel_ms=1.0)
        rows.append(dataset.make_row(cell, result, sweep_id=SWEEP, sweep_name="t"))
    dataset.write(tmp_path / "runs", rows)
    assert validate_sim.main([str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 0
    report = (tmp_path / "out" / "validation.md").read_text()
    assert "L2 hit MAE: 3.00 points" in report and "| flex | planted | 2048 |" in report


def test_validate_sim_on_a_negative_length_is_one_line_naming_the_row_and_column(tmp_path, capsys):
    table = tmp_path / "ncu.csv"
    table.write_text("backend,stages,mask_kind,seq_len,heads,block_size,head_dim,density,seed,l2_hit_pct,"
                     "dram_read_bytes,kernel_ms\nflex,none,random,-5,2,128,64,0.5,0,50,1e6,1\n")
    err = lab_studies.refusal("validate_sim", [str(table), "--out", str(tmp_path / "out")], capsys)
    assert "row 0: seq_len='-5'; expected a whole number in [1, 4194304]" in err


def test_validate_sim_refuses_a_table_row_before_torch_loads(tmp_path):
    table = tmp_path / "ncu.csv"
    table.write_text("backend,stages,mask_kind,seq_len,heads,block_size,head_dim,density,seed,l2_hit_pct,"
                     "dram_read_bytes,kernel_ms\nflex,none,random,-5,2,128,64,0.5,0,50,1e6,1\n")
    code = ("import sys\nimport lab_studies\n"
            f"status = lab_studies.run('validate_sim', [{str(table)!r}, '--out', {str(tmp_path / 'out')!r}])\n"
            "print(status, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent)
    assert done.stdout.split() == ["2", "False"], done.stderr


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_a_validation_table_nested_deep_is_one_line(tmp_path, capsys, suffix):
    table = tmp_path / f"ncu{suffix}"
    table.write_text(("[" if suffix == ".json" else "") + "[" * 50_000 + "]" * 50_000 + ("]" if suffix == ".json"
                                                                                         else "\n"))
    err = lab_studies.refusal("validate_sim", [str(table), "--out", str(tmp_path / "out")], capsys)
    assert "nests JSON arrays and objects" in err and "expected at most 64" in err
