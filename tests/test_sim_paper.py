"""`python lab/sim_paper.py` on a miniature cell: it writes the table beside the paper's figures."""

from __future__ import annotations

import json

import lab_studies

sim_paper = lab_studies.study("sim_paper")



def test_sim_paper_writes_predictions_beside_the_papers_figures(tmp_path):
    assert sim_paper.main(["--out", str(tmp_path), "--heads", "2", "--blocks", "48",
                           "--calibration-steps", "2"]) == 0
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    # 4 settings x (dense original + two random kinds and planted, original and reordered)
    assert len(rows) == 4 * 7
    dense = [r for r in rows if r["mask_kind"] == "dense"]
    assert {r["paper_l2_hit_pct"] for r in dense} == {"46.5"}
    assert {r["paper_l2_hit_pct"] for r in rows if r["stages"] == "both"} == {"79-89"}
    assert (tmp_path / "results.csv").exists() and "predicted L2 hit" in (tmp_path / "table.md").read_text()
