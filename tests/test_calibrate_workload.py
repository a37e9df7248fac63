"""calibrate-workload: the fit finds a planted answer, sampling is seeded, and the CLI leaves a generator that
loads as the default one would, with its provenance and residuals."""

from __future__ import annotations

import concurrent.futures
import json

import pytest
import yaml

from wavealign import workloads
from wavealign.jobs import calibrate_workload as cal
from wavealign.jobs._paper import TABLE_I_DENSITY, TABLE_I_L2_HIT_PCT
from wavealign.workloads.synthetic import HEAD_TYPES, GeneratorConfig

TINY = ["--model", "wan2.1-1.3b", "--frames", "5", "--resolution", "480p", "--block-size", "64", "--device", "cpu",
        "--workers", "1"]


def planted_rows(true_candidate: tuple[float, float]) -> list[cal.SampleRow]:
    """Every type's ``true_candidate`` gives exactly Table I; the other candidates are far off."""
    rows = []
    for t in HEAD_TYPES:
        for cand in [(0.5, 0.1), true_candidate, (2.0, 0.35)]:
            for m in cal.METHODS:
                exact = cand == true_candidate
                density = TABLE_I_DENSITY[m] if exact else 0.9
                hit = TABLE_I_L2_HIT_PCT[m] / 100 if exact else 0.8
                rows.append(cal.SampleRow(t, *cand, 0, 0, 0, 0, m, density, hit * 1e6, 1e6))
    return rows


def test_the_fit_finds_the_candidates_that_give_table_i_exactly():
    fitted = cal.fit(planted_rows((1.0, 0.1)), mix_step=0.25, restarts=4, seed=0)
    assert fitted.loss == pytest.approx(0.0, abs=1e-9)
    assert all(fitted.choice[t] == (1.0, 0.1) for t, share in fitted.mix.items() if share > 0)
    assert sum(fitted.mix.values()) == pytest.approx(1.0)
    for m in cal.METHODS:
        assert fitted.predicted_density[m] == pytest.approx(TABLE_I_DENSITY[m])
        assert fitted.predicted_l2_hit_pct[m] == pytest.approx(TABLE_I_L2_HIT_PCT[m])


def test_the_fit_reports_a_positive_loss_when_no_candidate_reaches_the_targets():
    rows = [r for r in planted_rows((1.0, 0.1)) if (r.sharpness_multiplier, r.noise) != (1.0, 0.1)]
    fitted = cal.fit(rows, mix_step=0.25, restarts=2, seed=0)
    assert fitted.loss > 100  # densities 90% against ~28%: far outside +-3 points


def test_a_fitted_config_scales_each_types_sharpness_and_sets_its_noise_and_one_mix():
    base = GeneratorConfig()
    choice = {t: (2.0, 0.3) for t in HEAD_TYPES}
    mix = {t: 0.2 for t in HEAD_TYPES}
    cfg = cal.fitted_config(base, choice, mix)
    for t in HEAD_TYPES:
        assert cfg.profiles[t].sharpness == (2 * base.profiles[t].sharpness[0], 2 * base.profiles[t].sharpness[1])
        assert cfg.profiles[t].noise == 0.3
    assert cfg.mix_first_layer == cfg.mix_last_layer == mix


def test_a_generator_config_survives_its_yaml_form():
    cfg = cal.fitted_config(GeneratorConfig(), {t: (1.4, 0.35) for t in HEAD_TYPES}, {t: 0.2 for t in HEAD_TYPES})
    assert GeneratorConfig.from_dict(yaml.safe_load(yaml.safe_dump(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="unknown key"):
        GeneratorConfig.from_dict({"sharpnes_scale": 1.0})


def test_sampling_is_seeded():
    wl = workloads.preset("wan2.1-1.3b", 5, "480p")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        runs = [cal.sample(wl, GeneratorConfig(), [1.0], [0.1], replicates=1, layers=[0, 3], steps=[0, 20], seed=7,
                           block_size=64, device=cal.torch.device("cpu"), hardware="h100", kernel="fa4", pool=pool,
                           log=lambda *a, **k: None) for _ in range(2)]
    assert runs[0] == runs[1]
    assert {r.method for r in runs[0]} == set(cal.METHODS) and {r.head_type for r in runs[0]} == set(HEAD_TYPES)
    assert all(0 < r.density <= 1 and 0 <= r.l2_hit_bytes <= r.l2_lookup_bytes for r in runs[0])


def test_the_cli_writes_a_loadable_generator_with_provenance_and_residuals(tmp_path, capsys):
    argv = ["--out", str(tmp_path), *TINY, "--sharpness", "0.7,1.4", "--noise", "0.1", "--replicates", "1",
            "--layers", "0", "--steps", "0", "--verify-at", "0:0", "--mix-step", "0.25", "--restarts", "2"]
    assert cal.main(argv) == 0
    doc = yaml.safe_load((tmp_path / "calibrated.yaml").read_text())
    cfg = GeneratorConfig.from_dict(doc["generator"])
    assert set(cfg.mix_first_layer) == set(HEAD_TYPES)
    assert doc["provenance"]["command"].startswith("wavealign calibrate-workload --out")
    assert set(doc["provenance"]["residuals"]) == {*cal.METHODS, "random"}
    verify = (tmp_path / "verify.csv").read_text().splitlines()
    assert len(verify) == 1 + len(cal.METHODS) + 1  # header, a row per method of the one layer, the random control
    assert json.loads((tmp_path / "fit.json").read_text())["loss"] >= 0
    assert "| xattention |" in capsys.readouterr().out


def test_the_cli_refuses_a_layer_outside_the_model_before_any_work(tmp_path):
    with pytest.raises(ValueError, match=r"--layers has \[99\]"):
        cal.main(["--out", str(tmp_path), *TINY, "--layers", "99", "--verify-at", "0:0"])
