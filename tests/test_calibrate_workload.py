"""calibrate-workload: the fit finds a planted answer, sampling is seeded, and the CLI leaves a generator that
loads as the default one would, with its provenance and residuals."""

from __future__ import annotations

import concurrent.futures
import json
from dataclasses import replace

import lab_studies
import pytest
import torch
import yaml

from analysis.paper import TABLE_I_DENSITY, TABLE_I_L2_HIT_PCT
from wavealign import workloads
from wavealign.workloads.clusters import HEAD_TYPES, GeneratorConfig

cal = lab_studies.study("calibrate_workload")

TINY = ["--model", "wan2.1-1.3b", "--frames", "5", "--resolution", "480p", "--block-size", "64", "--device", "cpu",
        "--workers", "1"]


@pytest.fixture(autouse=True)
def user_home(tmp_path, monkeypatch):
    """The user's folder of each test is its own, never the real home's."""
    monkeypatch.setenv("WAVEALIGN_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def planted_rows(true_candidate: tuple[float, float], setting: str = "{}", random_hit: float = 0.106,
                 ) -> list[cal.SampleRow]:
    """Every type's ``true_candidate`` gives exactly Table I (and its random control ``random_hit``); the other
    candidates are far off."""
    rows = []
    for t in HEAD_TYPES:
        for cand in [(0.5, 0.1), true_candidate, (2.0, 0.35)]:
            for m in cal.METHODS:
                exact = cand == true_candidate
                density = TABLE_I_DENSITY[m] if exact else 0.9
                hit = TABLE_I_L2_HIT_PCT[m] / 100 if exact else 0.8
                rows.append(cal.SampleRow(setting, t, *cand, 0, 0, 0, 0, m, density, hit * 1e6, 1e6,
                                          random_hit * 1e6, 1e6))
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


def test_the_relative_fit_matches_the_ratios_to_the_random_control_whatever_its_level():
    """With the random control at twice Table I's level, absolute L2 hit rates are off but the ratios exact: the
    relative target fits them exactly, the absolute one cannot."""
    rows = [replace(r, l2_hit_bytes=2 * r.l2_hit_bytes, random_l2_hit_bytes=2 * r.random_l2_hit_bytes)
            for r in planted_rows((1.0, 0.1))]
    relative = cal.fit(rows, mix_step=0.25, restarts=4, seed=0, l2_target="relative")
    assert relative.loss == pytest.approx(0.0, abs=1e-9)
    for m in cal.METHODS:
        assert relative.predicted_l2_ratio[m] == pytest.approx(cal.table_i_l2_ratio(m))
    assert cal.fit(rows, mix_step=0.25, restarts=4, seed=0, l2_target="absolute").loss > 10


def test_the_fit_picks_the_searched_setting_that_reaches_the_targets():
    far = [replace(r, density=min(1.0, r.density + 0.2)) for r in planted_rows((1.0, 0.1), '{"objects": 4}')]
    rows = far + planted_rows((1.0, 0.1), '{"objects": 12}')
    fitted = cal.fit(rows, mix_step=0.25, restarts=4, seed=0)
    assert fitted.setting == {"objects": 12} and fitted.loss == pytest.approx(0.0, abs=1e-9)


def test_searched_settings_are_the_product_of_the_lists_checked_against_the_generators_ranges():
    base = workloads.SceneConfig()
    settings = cal.search_settings(["objects=4,8", "ground_sharpness=0.5,1"], base)
    assert settings == [{"objects": 4, "ground_sharpness": 0.5}, {"objects": 4, "ground_sharpness": 1.0},
                        {"objects": 8, "ground_sharpness": 0.5}, {"objects": 8, "ground_sharpness": 1.0}]
    assert cal.search_settings([], base) == [{}]
    with pytest.raises(ValueError, match="ground_sharpness must be > 0"):
        cal.search_settings(["ground_sharpness=0"], base)
    with pytest.raises(ValueError, match=r"--search 'mix_first_layer=1': expected KEY=V1,V2"):
        cal.search_settings(["mix_first_layer=1"], base)
    with pytest.raises(ValueError, match="--search objects takes integers"):
        cal.search_settings(["objects=2.5"], base)


@pytest.mark.parametrize(("measured", "target"), [(97.0, "relative"), (80.0, "relative"), (50.0, "absolute"),
                                                 (30.0, "absolute")])
def test_a_dense_hit_rate_near_lock_step_makes_the_l2_target_relative(measured, target):
    assert cal.l2_target_for(measured, dense_lockstep_pct=98.4) == target


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


SIM = cal.SimSettings("h100", "fa4", 128, 64, cal.SIM_PAPER_ROW_JITTER)


@pytest.mark.parametrize("base", [GeneratorConfig(), workloads.SceneConfig()], ids=["clusters", "scene"])
def test_sampling_is_seeded(base):
    wl = workloads.preset("wan2.1-1.3b", 5, "480p")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        runs = [cal.sample(wl, base, [{}], [1.0], [0.1], replicates=1, layers=[0, 3], steps=[0, 20], seed=7,
                           block_size=64, device=torch.device("cpu"), sim_settings=SIM, pool=pool,
                           log=lambda *a, **k: None) for _ in range(2)]
    assert runs[0] == runs[1]
    assert {r.method for r in runs[0]} == set(cal.METHODS) and {r.head_type for r in runs[0]} == set(HEAD_TYPES)
    assert all(0 < r.density <= 1 and 0 <= r.l2_hit_bytes <= r.l2_lookup_bytes for r in runs[0])
    assert all(0 <= r.random_l2_hit_bytes <= r.random_l2_lookup_bytes for r in runs[0])


def test_a_launch_of_several_heads_counts_each_head_apart():
    """Heads run one after another in one launch: each head's counts come apart, and the first head of a launch of
    iid masks hits more than the ones after it (its rows start in lock-step; later ones drift apart)."""
    shape = (3000, 3000)  # 3000 K/V blocks of 64 tokens: 96 MB, more than the H100's 50 MB L2
    per_head = cal.random_launch_l2([0.25] * 4, shape, SIM, seed=0)
    assert per_head.shape == (4, 2) and (per_head[:, 0] <= per_head[:, 1]).all()
    assert per_head[0, 0] / per_head[0, 1] > per_head[-1, 0] / per_head[-1, 1]


def test_a_primed_head_hits_as_a_later_head_of_a_launch_and_the_primer_is_not_counted():
    shape = (3000, 3000)
    launch = cal.random_launch_l2([0.25] * 4, shape, SIM, seed=0)
    alone, primed = (cal.random_launch_l2([0.25], shape, SIM, seed=0, primer=p)[0] for p in (False, True))
    hit = {name: h / lookups for name, (h, lookups) in
           {"alone": alone, "primed": primed, "last of four": launch[-1]}.items()}
    assert hit["primed"] < hit["alone"]
    assert abs(hit["primed"] - hit["last of four"]) < abs(hit["alone"] - hit["last of four"])
    assert cal.random_launch_l2([0.25, 0.25], shape, SIM, seed=0, primer=True).shape == (2, 2)


def test_the_cli_writes_a_loadable_generator_with_provenance_and_residuals(tmp_path, capsys):
    argv = ["--out", str(tmp_path), *TINY, "--generator", "clusters", "--sharpness", "0.7,1.4", "--noise", "0.1",
            "--replicates", "1", "--layers", "0", "--steps", "0", "--verify-at", "0:0", "--mix-step", "0.25",
            "--restarts", "2"]
    assert cal.main(argv) == 0
    doc = yaml.safe_load((tmp_path / "calibrated.yaml").read_text())
    cfg = GeneratorConfig.from_dict(doc["generator"])
    assert set(cfg.mix_first_layer) == set(HEAD_TYPES)
    assert doc["provenance"]["command"].startswith("python lab/calibrate_workload.py --out")
    assert set(doc["provenance"]["residuals"]) == {*cal.METHODS, "random"}
    verify = (tmp_path / "verify.csv").read_text().splitlines()
    assert len(verify) == 1 + len(cal.METHODS) + 1  # header, a row per method of the one layer, the random control
    assert json.loads((tmp_path / "fit.json").read_text())["loss"] >= 0
    assert "| xattention |" in capsys.readouterr().out


def test_the_cli_fits_the_scene_generator_over_a_searched_knob_and_verifies_over_seeds(tmp_path, capsys):
    argv = ["--out", str(tmp_path), *TINY, "--generator", "scene", "--search", "ground_sharpness=0.5,1",
            "--sharpness", "1", "--noise", "0.1", "--replicates", "1", "--layers", "0", "--steps", "0",
            "--verify-at", "0:0,3:10", "--verify-seeds", "0,1", "--mix-step", "0.5", "--restarts", "1",
            "--l2-target", "relative"]
    assert cal.main(argv) == 0
    doc = yaml.safe_load((tmp_path / "scene.yaml").read_text())
    cfg = workloads.SceneConfig.from_dict(doc["generator"])
    fitted = json.loads((tmp_path / "fit.json").read_text())
    assert cfg.ground_sharpness == fitted["setting"]["ground_sharpness"] in (0.5, 1.0)
    assert doc["provenance"]["generator"] == "scene" and "relative" in doc["provenance"]["targets"]
    verify = (tmp_path / "verify.csv").read_text().splitlines()
    assert len(verify) == 1 + 2 * 2 * len(cal.METHODS) + 1  # 2 seeds x 2 (layer, step), and the random control
    assert doc["provenance"]["residuals"]["xattention"]["layers"] == 4
    assert "Spread over the 4 verified layers" in capsys.readouterr().out
    assert not (tmp_path / "calibrated.yaml").exists()


def test_install_writes_the_fit_to_the_users_folder_which_wins_over_the_package(tmp_path, user_home, capsys):
    packaged = GeneratorConfig.CALIBRATED_PATH.read_bytes()
    argv = ["--out", str(tmp_path / "out"), *TINY, "--generator", "clusters", "--sharpness", "3", "--noise", "0.2",
            "--replicates", "1", "--layers", "0", "--steps", "0", "--verify-at", "0:0", "--mix-step", "0.5",
            "--restarts", "1", "--install"]
    assert cal.main(argv) == 0
    installed = user_home / "workloads" / "calibrated.yaml"
    assert installed.read_text() == (tmp_path / "out" / "calibrated.yaml").read_text()
    assert f"installed as the clusters generator's values (read before the packaged {GeneratorConfig.CALIBRATED_PATH}" \
           f"): {installed}" in capsys.readouterr().out
    assert GeneratorConfig.CALIBRATED_PATH.read_bytes() == packaged  # the package is never written
    fitted = GeneratorConfig.from_dict(yaml.safe_load(installed.read_text())["generator"])
    assert GeneratorConfig.calibrated_path() == installed and workloads.generator("clusters") == fitted
    assert fitted != GeneratorConfig.from_dict(yaml.safe_load(packaged)["generator"])


def test_the_cli_verifies_a_given_generator_yaml_without_fitting(tmp_path):
    config_path = tmp_path / "given.yaml"
    config_path.write_text(yaml.safe_dump({"generator": workloads.SceneConfig(objects=3).to_dict()}))
    argv = ["--out", str(tmp_path / "out"), *TINY, "--generator", "scene", "--verify-config", str(config_path),
            "--verify-at", "0:0", "--verify-seeds", "2"]
    assert cal.main(argv) == 0
    assert not (tmp_path / "out" / "samples.csv").exists() and not (tmp_path / "out" / "scene.yaml").exists()
    rows = (tmp_path / "out" / "verify.csv").read_text().splitlines()
    assert rows[1].startswith("2,0,0,")  # seed 2, layer 0, step 0
    provenance = json.loads((tmp_path / "out" / "verify.json").read_text())["provenance"]
    assert provenance["verified_config"] == str(config_path)


def test_a_density_only_verification_reports_densities_and_leaves_the_l2_unsimulated(tmp_path, capsys):
    config_path = tmp_path / "given.yaml"
    config_path.write_text(yaml.safe_dump({"generator": workloads.SceneConfig(objects=3).to_dict()}))
    argv = ["--out", str(tmp_path / "out"), *TINY, "--generator", "scene", "--verify-config", str(config_path),
            "--verify-at", "0:0,3:10", "--density-only"]
    assert cal.main(argv) == 0
    found = json.loads((tmp_path / "out" / "verify.json").read_text())["provenance"]["residuals"]
    assert found["xattention"]["layers"] == 2 and 0 < found["xattention"]["density_pct"] <= 100
    assert not any(key.startswith("l2") for key in found["xattention"])
    assert "| xattention |" in capsys.readouterr().out and "- | - | - | - | - | - |" in \
        (tmp_path / "out" / "summary.md").read_text()


def test_the_cli_refuses_density_only_for_a_fit(tmp_path):
    with pytest.raises(ValueError, match=r"--density-only without --verify-config"):
        cal.main(["--out", str(tmp_path / "out"), *TINY, "--layers", "0", "--verify-at", "0:0", "--density-only"])
    assert not (tmp_path / "out").exists()


def test_the_cli_refuses_a_yaml_of_another_generator_to_verify(tmp_path):
    config_path = tmp_path / "clusters.yaml"
    config_path.write_text(yaml.safe_dump({"generator": GeneratorConfig().to_dict()}))
    with pytest.raises(ValueError, match=r"--verify-config .*expected a scene generator YAML"):
        cal.main(["--out", str(tmp_path / "out"), *TINY, "--generator", "scene", "--verify-config", str(config_path)])
    assert not (tmp_path / "out").exists()


def test_the_cli_refuses_a_layer_outside_the_model_before_any_work(tmp_path):
    with pytest.raises(ValueError, match=r"--layers has \[99\]"):
        cal.main(["--out", str(tmp_path), *TINY, "--layers", "99", "--verify-at", "0:0"])
