"""`wavealign validate-sim`: reads an NCU-style table, regenerates masks, reports MAE, DRAM ratio, rankings.

The "measurements" here are fabricated inside the fixture from the simulator itself (plus a known
perturbation), only to exercise the script; they are not results.
"""

from __future__ import annotations

import csv
import json

import pytest
import torch

from jobs import validate_sim
from wavealign import hardware, reorder, sim, synthetic
from wavealign.sim import packed

STAGES = ("none", "spatial", "temporal", "both")


def _fabricated_rows(tmp_path, l2_shift_pts: float = 0.0, dram_scale: float = 1.0) -> list[dict]:
    """NCU-shaped rows whose 'measured' values are h200 simulations, shifted by known amounts."""
    h200 = hardware.get("h200")
    rows = []
    method_mask = synthetic.planted_mask(2, 24, 24, 0.3, seed=9)
    packed.save(tmp_path / "xattention.npz", method_mask)
    cases = [("random", 0, 2048, ""), ("planted", 1, 2048, ""), ("xattention", 9, 3072,
                                                                 str(tmp_path / "xattention.npz"))]
    for kind, seed, seq_len, mask_file in cases:
        mask = (packed.load(mask_file) if mask_file
                else validate_sim.cell_mask(validate_sim.Cell("flex", "none", kind, seq_len, 2, 128, 128, 0.3,
                                                              seed, 0.0, 0.0, 0.0)))
        for stages in STAGES:
            order = reorder.plan(mask, wave_size=h200.wave_size("flex"), stages=stages)
            r = sim.simulate(mask, order, hardware=h200, backend="flex")
            rows.append({"backend": "flex", "stages": stages, "mask_kind": kind, "seq_len": seq_len, "heads": 2,
                         "block_size": 128, "head_dim": 128, "density": 0.3, "seed": seed,
                         "l2_hit_pct": r.l2_hit_pct + l2_shift_pts, "dram_read_bytes": r.hbm_read_bytes * dram_scale,
                         "kernel_ms": r.kernel_time_s * 1e3, "mask_file": mask_file})
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
        validate_sim.read_cells(_write_csv(tmp_path / "ncu.csv", rows)), hardware.get("h200")))
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
        validate_sim.read_cells(_write_csv(tmp_path / "ncu.csv", rows)), hardware.get("h200")))
    verdicts = {g: v["l2_rank_preserved"] for g, v in summary["groups"].items()}
    assert verdicts == {"flex/planted/2048/2/0.3/1": False, "flex/random/2048/2/0.3/0": True,
                        "flex/xattention/3072/2/0.3/9": True}
    assert not summary["ranking_goal_met"]


def test_json_lines_and_variant_names_are_accepted(tmp_path):
    rows = _fabricated_rows(tmp_path)[:4]
    for row, variant in zip(rows, ("original", "spatial", "temporal", "wavealign"), strict=True):
        row["stages"] = variant
    path = tmp_path / "ncu.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert [c.stages for c in validate_sim.read_cells(path)] == list(STAGES)


def test_a_row_without_a_required_column_is_rejected(tmp_path):
    rows = _fabricated_rows(tmp_path)[:1]
    del rows[0]["dram_read_bytes"]
    with pytest.raises(ValueError, match=r"lacks columns \['dram_read_bytes'\]"):
        validate_sim.read_cells(_write_csv(tmp_path / "ncu.csv", rows))


def test_a_method_mask_without_a_mask_file_is_rejected():
    cell = validate_sim.Cell("flex", "none", "minference", 1024, 1, 128, 128, 0.3, 0, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="needs a mask_file"):
        validate_sim.cell_mask(cell)


def test_packed_masks_round_trip(tmp_path):
    mask = synthetic.random_mask(3, 5, 13, 0.4, seed=1)
    packed.save(tmp_path / "m.npz", mask)
    assert torch.equal(packed.load(tmp_path / "m.npz"), mask)


def test_masks_regenerate_exactly_as_bench_kernels_made_them():
    # bench-kernels records the realised density; the generator was asked for --density with its own defaults
    cell = validate_sim.Cell("triton", "none", "planted", 2048, 2, 128, 128, 0.2449, 0, 50.0, 1e9, 1.0,
                             mask_density=0.25)
    assert torch.equal(validate_sim.cell_mask(cell), synthetic.planted_mask(2, 16, 16, 0.25, seed=0))
