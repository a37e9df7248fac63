"""Skip features and the provisional per-hardware policy."""

import math
import os

import pytest
import torch

from wavealign import hardware, skip
from wavealign.masks import synthetic


@pytest.fixture(autouse=True)
def user_home(tmp_path, monkeypatch):
    """The user's folder of each test is its own, never the real home's."""
    monkeypatch.setenv("WAVEALIGN_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_features_of_a_hand_made_mask():
    mask = torch.tensor([[[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1]]], dtype=torch.bool)
    f = skip.features(mask, "h100", block_size=64, head_dim=64, wave_size=2)
    assert (f.num_q_blocks, f.num_kv_blocks, f.seq_len_tokens) == (3, 4, 192)
    assert f.density == pytest.approx(0.5)
    assert f.nnz_mean == pytest.approx(2.0) and f.nnz_cv == pytest.approx(0.0)
    assert f.adjacent_jaccard == pytest.approx(0.5)  # (1 + 0) / 2
    block_bytes = 2 * 64 * 64 * 2
    assert f.wave_working_set_bytes == pytest.approx((2 + 2) / 2 * block_bytes)  # waves {0,1} and {2}
    assert f.working_set_over_l2 == pytest.approx(f.wave_working_set_bytes / (50 << 20))


def test_features_run_on_kv_index_form_and_batched_masks():
    mask = synthetic.random_mask(2, 30, 30, 0.3, seed=1)
    from wavealign import blockmask
    assert skip.features(blockmask.to_kv_indices(mask), "a40") == skip.features(mask, "a40")
    assert skip.features(mask.unsqueeze(0), "a40") == skip.features(mask, "a40")


@pytest.mark.parametrize("hardware", ["h100", "h200", "a40"])
def test_each_paper_gpu_ships_a_profile_either_provisional_or_fitted_with_provenance(hardware):
    profile = skip.load_profile(hardware)
    assert profile.hardware == hardware
    if profile.provisional:
        assert profile.models is None and profile.rule
    else:
        assert set(profile.models) == {"kernel_original_ms", "kernel_wavealign_ms", "reorder_ms"}
        assert profile.provenance["hardware"] == hardware and profile.provenance["sweeps"]


def test_provisional_rule_skips_short_sparse_and_local_masks_and_reorders_the_rest():
    policy = skip.SkipPolicy("h100")
    long_scattered = skip.features(synthetic.planted_mask(1, 1500, 1500, 0.25), "h100")
    short = skip.features(synthetic.planted_mask(1, 300, 300, 0.25), "h100")
    sparse = skip.features(synthetic.random_mask(1, 1500, 1500, 0.03), "h100")
    local = skip.features(torch.ones(1, 1500, 1500, dtype=torch.bool), "h100")
    decision = policy.decide(long_scattered)
    assert decision.reorder and math.isnan(decision.predicted_gain_ms)
    for feats, why in ((short, "sequence"), (sparse, "density"), (local, "already local")):
        reorder, reason, _ = policy.decide(feats)
        assert not reorder and why in reason


def test_fitted_model_decides_by_predicted_gain(tmp_path):
    n = len(skip.MODEL_FEATURES)
    base = skip.load_profile("h100").to_dict()
    base["provisional"] = False
    base["models"] = {
        "kernel_original_ms": {"coef": [math.log(10.0)] + [0.0] * n},
        "kernel_wavealign_ms": {"coef": [math.log(8.0)] + [0.0] * n},
        "reorder_ms": {"coef": [math.log(0.5)] + [0.0] * n},
    }
    path = skip.Profile.from_dict(base).save(tmp_path / "h100.yaml")
    decision = skip.SkipPolicy(path).decide(skip.features(synthetic.random_mask(1, 40, 40, 0.5), "h100"))
    assert decision.reorder and decision.predicted_gain_ms == pytest.approx(1.5)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(schema_version=99), "schema_version"),
    (lambda d: d.pop("rule"), "lacks"),
    (lambda d: d.update(models={"kernel_original_ms": {"coef": [1.0]}}), "coef must list"),
])
def test_malformed_profiles_are_rejected_with_the_reason(edit, message):
    data = skip.load_profile("h100").to_dict()
    edit(data)
    with pytest.raises(ValueError, match=message):
        skip.Profile.from_dict(data)


def test_unknown_hardware_and_missing_profile_are_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown hardware 'tpu'"):
        skip.features(torch.ones(1, 2, 2, dtype=torch.bool), "tpu")
    monkeypatch.setenv("WAVEALIGN_PROFILE_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="no skip profile for 'h100'"):
        skip.load_profile("h100")


def test_features_count_the_heads_a_call_runs():
    mask = synthetic.random_mask(3, 20, 20, 0.3, seed=2)
    assert skip.features(mask, "h100").num_heads == 3
    assert skip.features(mask.unsqueeze(0).expand(2, -1, -1, -1), "h100").num_heads == 6


def test_schema_1_fitted_profiles_still_load_with_no_head_term(tmp_path):
    n_v1 = len(skip.MODEL_FEATURES) - 1
    data = skip.load_profile("h100").to_dict() | {"schema_version": 1, "provisional": False, "models": {
        name: {"coef": [math.log(ms)] + [0.0] * n_v1}
        for name, ms in (("kernel_original_ms", 10.0), ("kernel_wavealign_ms", 8.0), ("reorder_ms", 0.5))}}
    profile = skip.Profile.from_dict(data)
    assert all(len(m["coef"]) == len(skip.MODEL_FEATURES) + 1 and m["coef"][-1] == 0.0
               for m in profile.models.values())
    decision = skip.SkipPolicy(profile).decide(skip.features(synthetic.random_mask(4, 40, 40, 0.5), "h100"))
    assert decision.reorder and decision.predicted_gain_ms == pytest.approx(1.5)


def test_a_changed_profile_file_is_reloaded_not_served_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WAVEALIGN_PROFILE_DIR", str(tmp_path))
    provisional = skip.Profile.load(skip.PROFILE_DIR / "h100.yaml")
    provisional.save(tmp_path / "h100.yaml")
    assert skip.load_profile("h100") is skip.load_profile("h100")  # cached
    changed = skip.Profile.from_dict(provisional.to_dict() | {"version": "2"})
    path = changed.save(tmp_path / "h100.yaml")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    assert skip.load_profile("h100").version == "2"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the path without CUDA")
def test_current_profile_needs_a_cuda_device():
    with pytest.raises(ValueError, match="needs a CUDA device"):
        skip.current_profile()


@pytest.mark.gpu
def test_current_profile_is_this_gpus_or_the_nearest():
    profile = skip.current_profile()
    detected = hardware.detect()
    assert detected is None or profile.hardware in (detected.name, skip.nearest_profiled(detected.name))


def test_a_profile_in_the_users_folder_wins_over_the_packaged_one(user_home, monkeypatch):
    monkeypatch.delenv("WAVEALIGN_PROFILE_DIR", raising=False)
    packaged = skip.Profile.load(skip.PROFILE_DIR / "h100.yaml")
    assert skip.load_profile("h100") == packaged  # nothing installed: the packaged default
    assert skip.profile_dir() == user_home / "profiles"  # where refresh-profiles installs
    mine = skip.Profile.from_dict(packaged.to_dict() | {"version": "mine"}).save(skip.profile_dir() / "h100.yaml")
    assert skip.profile_path("h100") == mine and skip.load_profile("h100").version == "mine"
    assert skip.load_profile("a40") == skip.Profile.load(skip.PROFILE_DIR / "a40.yaml")  # the others stay packaged


def test_wavealign_profile_dir_replaces_the_users_and_the_packaged_folders(tmp_path, user_home, monkeypatch):
    skip.Profile.load(skip.PROFILE_DIR / "h100.yaml").save(user_home / "profiles" / "h100.yaml")
    monkeypatch.setenv("WAVEALIGN_PROFILE_DIR", str(tmp_path / "fetched"))
    assert skip.profile_dir() == tmp_path / "fetched" and skip.profiled_hardware() == []
    with pytest.raises(ValueError, match=r"no skip profile for 'h100' in \S*fetched"):
        skip.load_profile("h100")
