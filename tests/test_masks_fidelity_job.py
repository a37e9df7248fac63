"""The mask-fidelity job runs end to end on a CPU at a small shape, leaves its records and pictures, and builds
exactly the masks a sweep cell of the same workload builds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from jobs import mask_fidelity
from orchestrator import config, grid
from wavealign import pipeline, workloads

SMALL = ["--model", "wan2.1-1.3b", "--frames", "5", "--resolution", "480p", "--device", "cpu"]


def test_mask_fidelity_writes_rows_summary_and_one_png_per_method(tmp_path, capsys):
    argv = ["--out", str(tmp_path), *SMALL, "--heads", "1", "--layer", "0", "--block-size", "64",
            "--set", "spargeattn.sample_blocks=4", "--set", "minference.sample_blocks=4"]
    assert mask_fidelity.main(argv) == 0
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert {r["method"] for r in rows} == set(mask_fidelity.METHODS)
    assert all(0.0 < r["density"] <= 1.0 for r in rows)
    assert json.loads(next(r for r in rows if r["method"] == "spargeattn")["params"]) == {"sample_blocks": 4}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["command"].startswith("wavealign mask-fidelity --out")
    for method in mask_fidelity.METHODS:
        assert (tmp_path / f"mask_{method}.png").is_file()
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("| spargeattn |")


def test_mask_fidelity_rejects_heads_outside_the_model():
    with pytest.raises(ValueError, match="--heads"):
        mask_fidelity.main([*SMALL, "--heads", "0,12"])


def test_mask_fidelity_rejects_an_override_the_method_does_not_have(tmp_path):
    with pytest.raises(ValueError, match=r"--set 'xattention.gamma=0.5'.*threshold"):
        mask_fidelity.main(["--out", str(tmp_path), *SMALL, "--set", "xattention.gamma=0.5"])


def test_a_sweep_cell_builds_exactly_the_masks_mask_fidelity_measures(tmp_path: Path):
    """The same workload, layer, step and heads through ``pipeline.build_mask`` (what every sweep cell runs) and
    through ``mask_fidelity.head_masks``: equal masks for every method, the per-head tuned ones included."""
    (tmp_path / "workload").mkdir(parents=True)
    for group in ("method", "backend", "hardware", "sweep"):
        (tmp_path / group).symlink_to(config.CONF_DIR / group)
    (tmp_path / "config.yaml").symlink_to(config.CONF_DIR / "config.yaml")
    (tmp_path / "workload" / "tiny.yaml").write_text(
        "name: tiny\nmodel: wan2.1-1.3b\nresolution: 480p\nheads: [3, 7]\nlayer: 5\nstep: 30\n")
    cfg = config.load(["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]",
                       f"grid.method=[{','.join(mask_fidelity.METHODS)}]", "grid.workload=[tiny]",
                       "grid.seq_k=[4.6]", "grid.variant=[original]"], conf_dir=tmp_path)
    cells = grid.expand(cfg, conf_dir=tmp_path).cells
    assert {c.method for c in cells} == set(mask_fidelity.METHODS)
    wl = workloads.preset("wan2.1-1.3b", cells[0].frames, "480p")
    from_fidelity = {}
    for spec, method, mask, _ in mask_fidelity.head_masks(wl, [3, 7], list(mask_fidelity.METHODS), layer=5,
                                                           step=30, seed=0, block_size=cells[0].block_size,
                                                           device=torch.device("cpu")):
        from_fidelity.setdefault(method, {})[spec.head] = mask
    for cell in cells:
        mask, _ = pipeline.build_inputs(cell, torch.device("cpu"))
        assert (cell.layer, cell.step, cell.heads) == (5, 30, [3, 7])
        assert torch.equal(mask, torch.stack([from_fidelity[cell.method][h] for h in (3, 7)])), cell.method
