"""Skip-profile fitting on synthetic sweeps whose ground truth is known, MLflow registration, and the
runtime and the next sweep deciding with the refreshed profile."""

import math
import shutil

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from sweeps import run_test_sweep

import analysis
from analysis import profiles, skipfit
from jobs import refresh_profiles
from orchestrator import dataset
from wavealign import hardware, skip
from wavealign.pipeline import Cell, CellResult

HARDWARE = "h100"
SEQ_K = (25, 50, 75, 100, 125, 150, 175, 200, 250, 300, 364)
DENSITIES = (0.02, 0.05, 0.1, 0.2, 0.3, 0.45, 0.6)
METHODS = ("planted", "random")
A_MS = 2e-6  # original-order kernel ms per (q block x kv block x density)
SPEEDUP = 0.8  # WaveAlign kernel time / original


def reorder_ms_per_q_block(threshold_tokens: int, density: float = 0.25) -> float:
    """The reorder cost per q block that makes reordering pay exactly above ``threshold_tokens`` at
    ``density``: (1 - SPEEDUP) A MB^2 rho = B MB  <=>  MB rho = B / ((1 - SPEEDUP) A)."""
    return (1 - SPEEDUP) * A_MS * (threshold_tokens / 128) * density


def feature_values(mb: int, density: float, nnz_cv: float = 0.3, jaccard: float = 0.15) -> dict:
    working_set = min(1.0, density * 20) * mb * 2 * 128 * 128 * 2
    return dict(num_q_blocks=mb, num_kv_blocks=mb, density=density, nnz_mean=density * mb, nnz_cv=nnz_cv,
                adjacent_jaccard=jaccard, wave_working_set_bytes=working_set,
                working_set_over_l2=working_set / hardware.get(HARDWARE).l2_bytes)


def ground_truth_rows(threshold_tokens: int, noise: float = 0.03, seed: int = 0) -> list[dict]:
    """Dataset rows (schema v1) of original and forced-WaveAlign cells whose times follow the known model
    with 3% log-normal noise; nnz_cv and the adjacent Jaccard vary but do not matter."""
    rng = np.random.default_rng(seed)
    per_block = reorder_ms_per_q_block(threshold_tokens)
    rows = []
    for seq_k in SEQ_K:
        for density in DENSITIES:
            for method in METHODS:
                mb = math.ceil(seq_k * 1000 / 128)
                feats = feature_values(mb, density, rng.uniform(0.1, 0.5), rng.uniform(0.02, 0.3))
                original = A_MS * mb * mb * density * math.exp(rng.normal(0, noise))
                aligned = SPEEDUP * A_MS * mb * mb * density * math.exp(rng.normal(0, noise))
                cost = per_block * mb * math.exp(rng.normal(0, noise))
                group = f"{seq_k}-{density}-{method}"
                for variant, stages, kernel_ms, reorder_ms in (("original", "none", original, 0.0),
                                                               ("wavealign", "both", aligned, cost)):
                    cell = Cell.from_flat(dict(cell_id=f"{group}-{variant}", group_id=group, hardware=HARDWARE,
                                               profile_hardware=HARDWARE, backend="triton", method=method,
                                               variant=variant, stages=stages, skip="force", workload="shape-4h",
                                               seq_len_tokens=seq_k * 1000, num_heads=4, head_dim=128, block_size=128,
                                               wave_size=132, method_params={"density": density}))
                    result = CellResult(cell_id=cell.cell_id, group_id=group, status="done",
                                        kernel_ms_median=kernel_ms, reorder_ms=reorder_ms,
                                        total_ms=kernel_ms + reorder_ms, stages_applied=stages,
                                        reorder_applied=stages != "none", **feats)
                    rows.append(dataset.make_row(cell, result, sweep_id=f"{threshold_tokens:016x}",
                                                 sweep_name="ground-truth"))
    return rows


@pytest.fixture
def profile_dir(tmp_path, monkeypatch):
    """A runtime profile folder holding copies of the packaged (provisional) profiles."""
    folder = tmp_path / "profiles"
    shutil.copytree(skip.PROFILE_DIR, folder)
    monkeypatch.setenv("WAVEALIGN_PROFILE_DIR", str(folder))
    return folder


def make_runs(root, threshold_tokens: int):
    dataset.write(root, ground_truth_rows(threshold_tokens))
    return root


def refresh(runs, profile_dir, *extra: str) -> int:
    return refresh_profiles.main(["--hardware", HARDWARE, "--profile-dir", str(profile_dir), f"run_root={runs}",
                                  *extra])


def first_reordering_length(profile: skip.Profile, density: float) -> int:
    """The shortest sequence (1K-token steps) at which ``profile`` decides to reorder at ``density``."""
    policy = skip.SkipPolicy(profile)
    for tokens in range(10_000, 700_000, 1_000):
        mb = math.ceil(tokens / 128)
        feats = skip.SkipFeatures(seq_len_tokens=tokens, num_heads=4, **feature_values(mb, density))
        if policy.decide(feats).reorder:
            return tokens
    return -1


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """One ``refresh-profiles`` run on the 150K-threshold ground truth: (run root, installed profile folder)."""
    root = tmp_path_factory.mktemp("fitted")
    runs, installed = make_runs(root / "runs", threshold_tokens=150_000), root / "installed"
    assert refresh(runs, installed) == 0
    return runs, installed


@pytest.mark.parametrize(("density", "true_threshold_tokens"), [(0.25, 150_000), (0.5, 75_000)])
def test_fitted_profile_recovers_the_known_threshold(fitted, density, true_threshold_tokens):
    profile = skip.load_profile(fitted[1] / "h100.yaml")
    assert not profile.provisional and profile.models is not None
    found = first_reordering_length(profile, density)
    assert abs(found - true_threshold_tokens) / true_threshold_tokens < 0.10, found


@pytest.mark.parametrize("split", ["seq_len", "method"])
def test_held_out_policy_meets_the_regret_goal_and_beats_both_fixed_policies(fitted, split):
    frame = analysis.load(fitted[0])
    evaluation = skipfit.evaluate(skipfit.paired_cells(frame, HARDWARE), HARDWARE, split=split)
    m = evaluation.metrics
    assert m["cells"] == len(SEQ_K) * len(DENSITIES) * len(METHODS)
    assert m["regret_pct"] <= 1.0
    assert m["total_policy_ms"] <= min(m["total_always_ms"], m["total_never_ms"])
    assert m["goal_met"] == 1.0


def test_fit_from_one_hardware_ignores_the_cells_of_another(tmp_path):
    rows = ground_truth_rows(150_000)
    other = [dict(r, hardware="a40", cell_id="a40-" + r["cell_id"], group_id="a40-" + r["group_id"],
                  result_id="a40-" + r["result_id"],
                  kernel_ms_median=r["kernel_ms_median"] * 100) for r in rows]
    dataset.write(tmp_path, rows + other)
    pairs = skipfit.paired_cells(analysis.load(tmp_path), HARDWARE)
    assert len(pairs) == len(rows) // 2 and not pairs["group_id"].str.startswith("a40-").any()


def _registry(runs) -> MlflowClient:
    uri = f"sqlite:///{runs / 'mlflow.db'}"
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def test_each_fit_is_an_mlflow_run_and_the_newest_takes_the_current_alias(fitted, tmp_path):
    runs, _ = fitted
    client = _registry(runs)
    before = int(client.get_model_version_by_alias("wavealign-skip-h100", "current").version)
    assert refresh(runs, tmp_path / "installed") == 0
    current = client.get_model_version_by_alias("wavealign-skip-h100", "current")
    assert int(current.version) == before + 1
    run = client.get_run(current.run_id)
    assert run.data.params["hardware"] == HARDWARE and "regret_pct" in run.data.metrics
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"evaluation.csv", "evaluation.png",
                                                                         "profile"}
    assert skip.Profile.load(tmp_path / "installed" / "h100.yaml").version == str(before + 1)


def test_registered_profile_reads_back_through_the_alias(fitted, tmp_path):
    runs, _ = fitted
    current = _registry(runs).get_model_version_by_alias("wavealign-skip-h100", "current")
    fetched = skip.Profile.load(profiles.fetch(HARDWARE, f"sqlite:///{runs / 'mlflow.db'}", dst_dir=tmp_path))
    assert fetched.version == str(current.version) and not fetched.provisional
    assert fetched.provenance["sweeps"] == [f"{150_000:016x}"] and fetched.provenance["hardware"] == HARDWARE
    assert fetched.provenance["mlflow"]["run_id"] == current.run_id


def test_fetch_fills_a_folder_with_registered_profiles_and_packaged_ones_elsewhere(fitted, tmp_path):
    assert refresh_profiles.main(["--fetch", str(tmp_path), f"run_root={fitted[0]}"]) == 0
    assert not skip.Profile.load(tmp_path / "h100.yaml").provisional
    assert skip.Profile.load(tmp_path / "a40.yaml").provisional


def test_runtime_decisions_change_once_the_profile_is_refreshed(tmp_path, profile_dir):
    # 200K tokens at 15% density: the provisional rule reorders, the ground truth (MB * rho < 293) does not
    feats = skip.SkipFeatures(seq_len_tokens=200_000, num_heads=4, **feature_values(1563, 0.15))
    before = skip.SkipPolicy(skip.load_profile(HARDWARE)).decide(feats)
    assert refresh(make_runs(tmp_path / "runs", threshold_tokens=150_000), profile_dir) == 0
    after = skip.SkipPolicy(skip.load_profile(HARDWARE)).decide(feats)
    assert before.reorder and "provisional" in before.reason
    assert not after.reorder and "fitted model (h100 v1)" in after.reason


def test_gpus_without_a_profile_fall_back_to_the_nearest_with_a_warning(profile_dir, caplog):
    with caplog.at_level("WARNING", logger="wavealign.skip"):
        profile = skip.load_profile("b200")
    assert profile.hardware == "h200"  # nearest to B200 in L2, bandwidth, SMs and peak among h100/h200/a40
    assert "no skip profile for b200" in caplog.text
    with pytest.raises(ValueError, match="no skip profile for 'b200'"):
        skip.load_profile("b200", fallback=False)


NEXT_SWEEP = """# @package _global_
name: next-sweep
grid:  # reference-kernel cells on this CPU that plan, and ask the skip policy, as an H100 would
  hardware: [cpu]
  backend: [reference]
  method: [planted]
  workload: [shape-2h]
  seq_k: [4]
  variant: [original, adaptive]
  cpu_profile: h100
  reps: 1
"""


def test_next_sweep_decides_with_the_refreshed_profile(tmp_path, profile_dir):
    # a hardware where reordering pays from 2K tokens on, where the provisional rule (>= 150K tokens) skips
    assert refresh(make_runs(tmp_path / "truth", threshold_tokens=2_000), profile_dir) == 0
    # the embedded Ray inherits WAVEALIGN_PROFILE_DIR
    runs, outcome = run_test_sweep(tmp_path / "sweep", "next_sweep", NEXT_SWEEP, "mlflow.enabled=false", cpus=1)
    assert outcome.counts == {"done": 2}
    adaptive = analysis.load(runs).query("variant == 'adaptive'").iloc[0]
    assert adaptive["skip_reorder"] and adaptive["stages_applied"] == "both"
    assert "fitted model (h100 v1)" in adaptive["skip_reason"]
    provisional = skip.SkipPolicy(skip.Profile.load(skip.PROFILE_DIR / "h100.yaml"))
    assert not provisional.decide(skipfit.skip_features(adaptive)).reorder


@pytest.mark.parametrize(("argv", "message"), [
    (["hardwares=h100"], "did you mean --hardware h100?"), (["split=method"], "use --split method"),
    (["--split", "random"], "invalid choice: 'random'"), (["--hardware", "tpu"], "unknown hardware 'tpu'"),
    (["--run-root", "x"], "expected run_root=x")])
def test_refresh_rejects_unknown_arguments_naming_the_spelling_it_takes(argv, message):
    with pytest.raises(ValueError) as refused:
        refresh_profiles.main(argv)
    assert message in str(refused.value)


def test_fitting_without_paired_cells_names_the_problem(tmp_path):
    rows = [r for r in ground_truth_rows(150_000) if r["variant"] == "original"]
    dataset.write(tmp_path, rows)
    with pytest.raises(ValueError, match="0 paired"):
        refresh_profiles.fit_one(analysis.load(tmp_path), HARDWARE, refresh_profiles.parse_args([]), None, None)


@pytest.mark.parametrize("flags, hint", [([], True), (["--include-simulated"], False)])
def test_the_simulated_cells_hint_appears_only_while_they_are_left_out(tmp_path, flags, hint):
    rows = [r for r in ground_truth_rows(150_000) if r["variant"] == "original"]
    dataset.write(tmp_path, rows)
    args = refresh_profiles.parse_args(flags)
    with pytest.raises(ValueError, match="0 paired") as raised:
        refresh_profiles.fit_one(analysis.load(tmp_path), HARDWARE, args, None, None)
    assert ("--include-simulated" in str(raised.value)) is hint
