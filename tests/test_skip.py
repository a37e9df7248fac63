"""Skip features and the provisional per-hardware policy."""

import math

import pytest
import torch

from wavealign import skip, synthetic


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
def test_provisional_profiles_ship_for_each_paper_gpu(hardware):
    profile = skip.load_profile(hardware)
    assert profile.provisional and profile.hardware == hardware and profile.models is None


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
