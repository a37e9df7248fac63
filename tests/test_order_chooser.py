"""The order chooser and the scheduler-aware orders (issue 47): every candidate is exact, the choice is deterministic,
the static scheduler's orders balance its CTAs, the order limit bounds every order, and a sweep's auto rows record
the pick with its predicted and measured ranks."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from sweeps import run_test_sweep

from wavealign import kernels, launch_order, sim
from wavealign.attention import AttentionStep
from wavealign.blockmask import row_nnz
from wavealign.launch_order import candidates, chooser, pairing, stage2
from wavealign.masks import synthetic

pytest.importorskip("numba")

BS = 16
LATENT = (3, 4, 32)  # 384 tokens of a 3-frame 4 x 32 latent: 24 blocks of 16


def _mask(heads: int = 3, mb: int = 24, seed: int = 0) -> torch.Tensor:
    return synthetic.fixed_nnz_mask(heads, mb, mb, 0.3, nnz_spread=0.8, seed=seed)


def _cta_loads(nnz: torch.Tensor, perm: torch.Tensor, grid: int) -> torch.Tensor:
    """Each CTA's work when slot p of the g-th head is tile g * MB + p of a static stride of ``grid``."""
    lengths = torch.gather(nnz.long(), -1, perm).reshape(-1)
    return torch.zeros(grid, dtype=torch.long).index_add_(0, torch.arange(lengths.numel()) % grid, lengths)


@pytest.mark.parametrize("name", [c.name for c in candidates.CANDIDATES])
def test_every_candidate_s_output_is_bitwise_the_original_s_at_a_ragged_length(name):
    g = torch.Generator().manual_seed(1)
    n = 24 * BS - 5  # a ragged last block
    q, k, v = (torch.randn(1, 3, n, 32, generator=g) for _ in range(3))
    mask = _mask()
    step = AttentionStep(backend="reference", variant=launch_order_variant(), geometry=kernels.get(
        "reference").geometry("h200", BS, wave_size=5), latent=LATENT)
    order = step.plan_order(mask, "none" if name == "original" else candidates.get(name).stages, name)
    assert order.candidate == name
    reference = kernels.get("reference")
    assert torch.equal(reference(q, k, v, mask, order, block_size=BS), reference(q, k, v, mask, None, block_size=BS))


def launch_order_variant():
    from wavealign import variants

    return variants.get("auto")


def test_round_buckets_start_each_head_where_the_scheduler_s_rounds_cut_it():
    nnz = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 3, 4, 5]])
    order = torch.arange(5).expand(2, 5)
    # grid 3: head 0 is tiles 0-4 (rounds [0,1,2], [3,4]); head 1 tiles 5-9 (round 1 holds its slot 0, then [6,7,8])
    out = stage2.round_buckets(nnz, order, 3)
    assert out[0].tolist() == [2, 1, 0, 4, 3]
    assert out[1].tolist() == [0, 3, 2, 1, 4]


def test_balanced_stage2_evens_the_static_scheduler_s_cta_work_where_stage2_skews_it():
    mask = synthetic.fixed_nnz_mask(8, 60, 60, 0.3, nnz_spread=0.9, seed=3)
    nnz, grid = row_nnz(mask), 6  # 60 rows a head: every head starts a round
    naive = launch_order.plan(mask, wave_size=grid, stages="temporal")
    balanced = launch_order.plan(mask, wave_size=grid, stages="spatial", reorderer="balanced")
    assert _cta_loads(nnz, balanced.perm, grid).max() < _cta_loads(nnz, naive.perm, grid).max()
    # within a round only the CTA changes: each round holds the rows the original order put there
    rounds = balanced.perm.reshape(8, 10, grid).sort(dim=-1).values
    assert torch.equal(rounds, torch.arange(60).reshape(10, grid).expand(8, 10, grid))


def test_pairing_never_costs_more_than_the_kernel_s_own_adjacent_units():
    mask = _mask(heads=4, mb=30, seed=5)
    adjacent = torch.arange(30).expand(4, 30)
    paired = pairing.pair_blocks(mask, 2)
    assert sorted(paired[0].tolist()) == list(range(30))
    assert (pairing.unit_steps(mask, paired, 2) <= pairing.unit_steps(mask, adjacent, 2)).all()
    assert pairing.or_inflation(mask, paired, 2) >= 1.0


def test_the_choice_is_deterministic_and_names_the_candidate_it_is():
    mask = _mask(heads=4, mb=40, seed=2)
    options = dict(backend="triton-static", hardware="h200", block_size=BS, wave_size=6, latent=(5, 4, 32))
    first, second = chooser.rank(mask, **options), chooser.rank(mask, **options)
    assert first.candidate == second.candidate
    assert [s.candidate for s in first.scored] == [s.candidate for s in second.scored]
    assert torch.equal(first.order.perm, second.order.perm)
    assert first.order.candidate == first.scored[0].candidate
    assert {s.candidate for s in first.scored} == {c.name for c in candidates.CANDIDATES}
    assert first.predicted_rank(first.candidate) == 1


def test_a_streaming_kernel_is_not_offered_the_static_scheduler_s_orders_nor_a_curve_without_latent():
    names = {c.name for c in chooser.eligible("fa4", "h200")}
    assert names == {"original", "temporal", "spatial", "wavealign", "longest-first"}


def test_the_profile_s_margin_keeps_the_original_when_the_predicted_gain_is_smaller():
    mask = _mask(heads=4, mb=40, seed=2)
    options = dict(backend="triton-static", hardware="h200", block_size=BS, wave_size=6)
    free = chooser.rank(mask, **options)
    gain = 100 * (1 - free.scored[0].net_ms / next(s.net_ms for s in free.scored if s.candidate == "original"))
    kept = chooser.rank(mask, fit=chooser.ChooserFit(margin_pct=gain + 1.0), **options)
    assert free.candidate != "original" and kept.candidate == "original"


def test_a_nan_bias_in_a_profile_is_refused():
    with pytest.raises(ValueError, match="finite"):
        chooser.ChooserFit(bias={"wavealign": math.nan})


def test_the_order_limit_is_below_every_candidate_s_predicted_time():
    mask = _mask(heads=4, mb=40, seed=4)
    for backend, hw in (("fa4", "h200"), ("triton-static", "h200"), ("fa4", "b200")):
        choice = chooser.rank(mask, backend=backend, hardware=hw, block_size=BS, sample_heads=None)
        assert all(choice.limit_ms <= s.kernel_ms + 1e-9 for s in choice.scored), (backend, hw)


def test_predict_on_every_head_is_the_simulator_s_kernel_time():
    mask = _mask(heads=3, mb=40, seed=6)
    order = launch_order.plan(mask, wave_size=8)
    for backend in ("fa4", "triton-static"):
        full = sim.simulate(mask, order, hardware="h200", backend=backend, wave_size=8, block_size=BS)
        assert sim.predict(mask, order, hardware="h200", backend=backend, wave_size=8,
                           block_size=BS).kernel_time_s == full.kernel_time_s


AUTO_SWEEP = """
# @package _global_
name: auto_test
grid:
  hardware: [cpu]
  cpu_profile: h200
  backend: [reference]
  method: [planted]
  method_params:
    planted: {density: 0.25, prototypes: 4}
  workload: [shape-2h]
  seq_k: [2]
  variant: [original, temporal, wavealign, auto]
  reps: 3
extra_grids:
  orders:
    hardware: [cpu]
    cpu_profile: h200
    backend: [reference]
    method: [planted]
    method_params:
      planted: {density: 0.25, prototypes: 4}
    workload: [shape-2h]
    seq_k: [2]
    variant: [spatial]
    reorderer: [longest-first]
    reps: 3
"""


def test_a_sweep_s_auto_row_records_its_pick_and_every_row_its_predicted_and_measured_rank(tmp_path):
    root, outcome = run_test_sweep(tmp_path, "auto_test", AUTO_SWEEP, "mlflow.enabled=false")
    assert outcome.counts["done"] == 5, outcome.counts
    rows = pd.read_parquet(root / "results")  # the rows as recorded, read back
    assert len(rows) == 5 and (rows.status == "done").all()
    auto = rows[rows.variant == "auto"].iloc[0]
    assert auto.order_candidate in {c.name for c in candidates.CANDIDATES} and auto.chooser_ms > 0
    assert set(rows.order_candidate) >= {"original", "temporal", "wavealign", "longest-first"}
    assert sorted(rows.measured_rank) == [1, 2, 3, 4, 5]
    fixed = rows[rows.variant != "auto"]
    assert fixed.predicted_rank.notna().all() and (fixed.order_limit_ms <= fixed.predicted_kernel_ms).all()
    assert pd.api.types.is_float_dtype(rows.headroom_captured)


def _group_rows(bias: dict[str, float], true_ms: dict[str, float], groups: int, method: str) -> list[dict]:
    """Rows of ``groups`` groups where the simulator predicts ``true_ms`` off by ``bias`` (log, per candidate)."""
    rows = []
    for g in range(groups):
        for name, ms in true_ms.items():
            rows.append(dict(group_id=f"{method}-{g}", method=method, order_candidate=name,
                             kernel_ms_median=ms * (1 + 0.001 * g), reorder_ms=0.0,
                             predicted_kernel_ms=ms * math.exp(-bias.get(name, 0.0))))
    return rows


def test_the_fitted_chooser_corrects_a_candidate_the_simulator_overrates_on_every_held_out_method():
    from analysis import chooserfit

    # measured: temporal is best; the simulator thinks spatial is 10 % faster than it is, so picks spatial
    true_ms = {"original": 100.0, "temporal": 90.0, "spatial": 93.0}
    rows = pd.DataFrame([r for m in ("a", "b", "c") for r in _group_rows({"spatial": 0.1}, true_ms, 3, m)])
    section = chooserfit.fit(rows)
    assert section["bias"]["spatial"] == pytest.approx(0.1, abs=1e-3)
    table, scores = chooserfit.evaluate(rows)
    assert scores["within_1pct_simulator"] == 0.0 and scores["within_1pct_fitted"] == 1.0
    assert set(table[table.chooser == "fitted"].pick) == {"temporal"}


def test_a_profile_s_chooser_section_is_read_per_backend_and_a_broken_one_is_refused(tmp_path):
    from wavealign import skip

    good = {"schema_version": 2, "hardware": "h200", "provisional": True, "rule": {},
            "chooser": {"fa4": {"bias": {"wavealign": -0.03}, "margin_pct": 1.2}}}
    profile = skip.Profile.from_dict(good)
    assert chooser.fit_from(profile.chooser, "fa4").bias == {"wavealign": -0.03}
    assert chooser.fit_from(profile.chooser, "triton-static") == chooser.ChooserFit()
    for broken in ({"fa4": {"bias": {"wavealign": float("nan")}}}, {"fa4": {"bias": {"no-such-order": 0.1}}},
                   {"fa4": {"margin_pct": 120}}):
        with pytest.raises(ValueError, match="chooser"):
            skip.Profile.from_dict({**good, "chooser": broken})


def test_a_nan_model_coefficient_is_refused_where_it_used_to_turn_the_adaptive_variant_off_silently():
    from wavealign import skip

    models = {name: {"coef": [0.0] * 7} for name in ("kernel_original_ms", "kernel_wavealign_ms", "reorder_ms")}
    models["kernel_wavealign_ms"]["coef"][0] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        skip.Profile.from_dict({"schema_version": 2, "hardware": "h200", "provisional": False, "rule": {},
                                "models": models})


def test_a_broken_profile_file_fails_the_adaptive_decision_instead_of_passing_for_a_missing_one(tmp_path,
                                                                                               monkeypatch):
    from wavealign import variants

    (tmp_path / "h200.yaml").write_text("schema_version: 2\nhardware: h200\nprovisional: true\n"
                                        "rule: {min_density: .nan}\n")
    monkeypatch.setenv("WAVEALIGN_PROFILE_DIR", str(tmp_path))
    step = AttentionStep(backend="reference", variant=variants.get("adaptive"),
                         geometry=kernels.get("reference").geometry("h200", BS))
    mask = _mask()
    with pytest.raises(ValueError, match=r"h200\.yaml"):
        step.decide(step.features(mask, 32))
    (tmp_path / "h200.yaml").unlink()  # none at all: the documented "reorder, no profile"
    assert step.decide(step.features(mask, 32)).reason.startswith("reorder: no skip profile")
