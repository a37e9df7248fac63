"""The mask-fidelity job runs end to end on a CPU at a small shape and leaves its records and pictures."""

from __future__ import annotations

import json

import pytest

from jobs import mask_fidelity


def test_mask_fidelity_writes_rows_summary_tuned_configs_and_one_png_per_method(tmp_path, capsys):
    argv = ["--out", str(tmp_path), "--model", "wan2.1-1.3b", "--frames", "5", "--resolution", "480p",
            "--heads", "1", "--layer", "0", "--device", "cpu", "--block-size", "64", "--sample-blocks", "4"]
    assert mask_fidelity.main(argv) == 0
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert {r["method"] for r in rows} == set(mask_fidelity.METHODS)
    assert all(0.0 < r["density"] <= 1.0 for r in rows)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["command"].startswith("wavealign mask-fidelity --out")
    for method in mask_fidelity.METHODS:
        assert (tmp_path / f"mask_{method}.png").is_file()
    assert (tmp_path / "spargeattn_tuned.json").is_file() and (tmp_path / "minference_tuned.json").is_file()
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("| spargeattn |")


def test_mask_fidelity_rejects_heads_outside_the_model():
    with pytest.raises(ValueError, match="--heads"):
        mask_fidelity.main(["--model", "wan2.1-1.3b", "--frames", "5", "--resolution", "480p", "--heads", "0,12",
                            "--device", "cpu"])
