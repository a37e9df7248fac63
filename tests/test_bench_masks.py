"""``python lab/bench_masks.py``: its arguments refused before any work (on any machine), and on a GPU a small run's
rows, each mask checked against the method's torch code and rebuilt the same."""

import json

import lab_studies
import pytest

bench_masks = lab_studies.study("bench_masks")


@pytest.mark.parametrize("argv, message", [
    (["--methods", "xattention,magic"], "--methods: ['magic'] not in"),
    (["--frames", "81,many"], "--frames must be comma-separated integers, got '81,many'"),
    (["--heads", "41"], "--heads must be at most 40 (Wan2.1-14B's), got 41"),
    (["--builds", "0"], "--builds must be >= 1, got 0"),
    (["--backend", "sim"], "--backend 'sim': expected a backend that computes attention"),
    (["--device", "cpu"], "the benchmark times GPU kernels; expected a CUDA device"),
])
def test_bad_arguments_are_refused_before_any_work(argv, message, capsys):
    with pytest.raises(ValueError) as refused:
        bench_masks.main(argv)
    assert message in str(refused.value)


@pytest.mark.gpu
def test_a_small_run_times_every_method_and_checks_each_mask(tmp_path):
    out = tmp_path / "out"
    assert bench_masks.main(["--frames", "81", "--heads", "2", "--builds", "2", "--reps", "2", "--backend", "triton",
                             "--out", str(out)]) == 0
    rows = json.loads((out / "bench_masks.json").read_text())["rows"]
    assert [r["method"] for r in rows] == list(bench_masks.METHODS)
    for r in rows:
        assert r["tokens"] == 75600 and 0 < r["density"] < 1
        assert r["same_mask_every_build"]
        assert 0 <= r["differing_blocks_vs_reference"] <= 1e-4 * r["blocks"]  # rounding at a threshold at most
        assert r["cached_build_ms"] > 0 and r["attention_ms"] > 0
    assert "| xattention | 81 | 75,600 |" in (out / "bench_masks.md").read_text()
