"""The mask-fidelity job runs end to end on a CPU at a small shape, leaves its records and pictures, and builds
exactly the masks a sweep cell of the same workload builds."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import lab_studies
import pytest
import torch

from orchestrator import config, grid
from wavealign import inputs, masks, workloads

mask_fidelity = lab_studies.study("mask_fidelity")

SMALL = ["--model", "wan2.1-1.3b", "--frames", "5", "--resolution", "480p"]


def test_mask_fidelity_writes_rows_summary_and_one_png_per_method(tmp_path, capsys):
    argv = ["--out", str(tmp_path), *SMALL, "--heads", "1", "--layer", "0", "--block-size", "64",
            "--set", "spargeattn.sample_blocks=4", "--set", "minference.sample_blocks=4"]
    assert mask_fidelity.main(argv) == 0
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert {r["method"] for r in rows} == set(mask_fidelity.METHODS)
    assert all(0.0 < r["density"] <= 1.0 for r in rows)
    assert json.loads(next(r for r in rows if r["method"] == "spargeattn")["params"]) == {"sample_blocks": 4}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["command"].startswith("python lab/mask_fidelity.py --out")
    for method in mask_fidelity.METHODS:
        assert (tmp_path / f"mask_{method}.png").is_file()
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("| spargeattn |")


def test_mask_fidelity_rejects_heads_outside_the_model():
    with pytest.raises(ValueError, match="--heads"):
        mask_fidelity.main([*SMALL, "--heads", "0,12"])


def test_mask_fidelity_rejects_an_override_the_method_does_not_have(tmp_path):
    with pytest.raises(ValueError, match=r"--set 'xattention.gamma=0.5'.*threshold"):
        mask_fidelity.main(["--out", str(tmp_path), *SMALL, "--set", "xattention.gamma=0.5"])


def test_mask_fidelity_runs_the_cells_a_sweep_of_the_same_workload_runs(tmp_path: Path):
    """Its cells and a grid's cells of the same workload, layer, step and head agree on everything that builds
    the mask (method, its params, model, shape, layer, step, head, seed), the per-head tuned methods included."""
    (tmp_path / "workload").mkdir(parents=True)
    for group in ("method", "backend", "measure", "reorderer", "sweep"):
        (tmp_path / group).symlink_to(config.CONF_DIR / group)
    (tmp_path / "config.yaml").symlink_to(config.CONF_DIR / "config.yaml")
    (tmp_path / "workload" / "tiny.yaml").write_text(
        "name: tiny\nmodel: wan2.1-1.3b\nresolution: 480p\nheads: [7]\nlayer: 5\nstep: 30\n")
    cfg = config.load(["~sweep", "grid.hardware=[h100]", "grid.backend=[fa4]", "grid.measure=[simulated]",
                       f"grid.method=[{','.join(mask_fidelity.METHODS)}]", "grid.workload=[tiny]",
                       "grid.seq_k=[4.6]", "grid.variant=[original]"], conf_dir=tmp_path)
    swept = {c.inputs.method: c for c in grid.expand(cfg, conf_dir=tmp_path).cells}
    block_size = swept["xattention"].attention.geometry.block_size
    args = argparse.Namespace(model="wan2.1-1.3b", resolution="480p", frames=swept["xattention"].inputs.frames, seed=0,
                              block_size=block_size, layer=5, step=30, hardware="h100", kernel="fa4",
                              generator=workloads.DEFAULT_GENERATOR)
    wl = workloads.preset("wan2.1-1.3b", args.frames, "480p")
    ours = mask_fidelity.head_inputs(args, wl, [7], list(mask_fidelity.METHODS), {m: {} for m in mask_fidelity.METHODS})
    builds_the_mask = ("method", "model", "resolution", "frames", "seq_len_tokens", "num_heads", "head_dim",
                       "heads", "layer", "step", "seed", "generator")
    for spec in ours:
        swept_spec = swept[spec.method].inputs
        assert {f: getattr(spec, f) for f in builds_the_mask} == {f: getattr(swept_spec, f) for f in builds_the_mask}
        # the grid spells out the method's defaults, mask-fidelity only its overrides: the same params either way
        # (the workload identity a per-head tuned method declares is filled from the cell by build_for_heads)
        defaults = {k: v for k, v in masks.get(spec.method).params.items() if k not in masks.IDENTITY_PARAMS}
        assert {**defaults, **spec.method_params} == dict(swept_spec.method_params)
    densities = {}
    cpu = torch.device("cpu")
    for spec in ours:  # the same masks, which must not be trivially dense for the comparison to mean anything
        mask, _ = inputs.build(inputs.InputRequest(spec, block_size, cpu, with_qkv=False))
        swept_request = inputs.InputRequest(swept[spec.method].inputs, block_size, cpu, with_qkv=False)
        assert torch.equal(mask, inputs.build(swept_request)[0]), spec.method
        densities[spec.method] = mask.float().mean().item()
    assert any(0 < d < 1 for d in densities.values()), densities


def test_mask_fidelity_at_the_papers_scale_on_a_cpu_states_its_estimate_and_asks_for_yes_before_any_work(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert lab_studies.run("mask_fidelity", []) == 2
    out, error = capsys.readouterr()
    assert out == "" and "32 masks of 363,600 tokens on the CPU: about" in error and "add --yes" in error
    # the estimate is this machine's: hours on a loaded CI runner, tens of minutes on a quiet one
    value, unit = re.search(r"about ([\d.]+) (h|min|s)\b", error).groups()
    assert float(value) * {"h": 3600, "min": 60, "s": 1}[unit] > mask_fidelity.CONFIRM_ABOVE_S
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []  # nothing began (--out is checked, and made, first)


def test_mask_fidelity_at_a_small_scale_prints_its_estimate_and_runs_without_yes(tmp_path, capsys):
    argv = ["--out", str(tmp_path), "--model", "wan2.1-1.3b", "--frames", "9", "--resolution", "480p", "--heads", "1",
            "--methods", "xattention"]
    assert mask_fidelity.main(argv) == 0
    assert "1 mask of" in capsys.readouterr().out and (tmp_path / "rows.csv").is_file()


@pytest.mark.parametrize(("argv", "message"), [
    (["--set", "xattention.threshold=5"], "--set xattention: threshold"),
    (["--picture-head", "-1"], "--picture-head -1: expected one of the heads measured"),
], ids=["threshold", "picture-head"])
def test_mask_fidelity_checks_its_values_before_the_first_head(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    err = lab_studies.refusal("mask_fidelity", ["--heads", "1", "--out", str(out), *argv], capsys)
    assert message in err and not out.exists()
