"""Specification of wavealign.masks: the registry, each method's rules, and the tuned-config caches."""

from __future__ import annotations

import json
import os

import pytest
import torch
from head_patterns import sink_and_band_head

from wavealign import masks, workloads
from wavealign.masks import flexprefill, minference, spargeattn, synthetic, xattention
from wavealign.masks._common import diagonal_mass
from wavealign.masks._draw import main as draw_main

BLOCK = 64


@pytest.fixture(scope="module")
def qkv():
    """Two heads of a small Wan-1.3B 480p workload (3 latent frames, 4680 tokens, 74 blocks of 64), drawn by the
    cluster generator: at this size the scene generator's FlexPrefill heads sit at their minimum budgets, where
    gamma does not move the density."""
    wl = workloads.preset("wan2.1-1.3b", 9, "480p")
    return workloads.synthetic(wl, heads=[0, 1], seed=0, config=workloads.generator("clusters"))


def test_available_lists_the_seven_methods_the_controls_and_saved_masks():
    assert masks.available() == ["dense", "file", "flexprefill", "minference", "planted", "radial", "random",
                                 "random-fixed-nnz", "spargeattn", "svg2", "vsa", "xattention"]


def test_each_method_exposes_its_parameters_with_defaults():
    assert masks.get("xattention").params["threshold"] == 0.9
    assert masks.get("xattention").params["stride"] == 8
    assert masks.get("flexprefill").params["gamma"] == 0.6
    assert set(masks.get("spargeattn").params) >= {"simthreshd1", "cdfthreshd", "attention_sink"}
    assert masks.get("dense").params == {}


@pytest.mark.parametrize("name", ["dense", "flexprefill", "minference", "random", "spargeattn", "xattention"])
def test_each_method_gives_a_bool_mask_of_shape_b_h_mb_nb(qkv, name):
    q, k, v = qkv
    mask = masks.build(name, q, k, v, block_size=BLOCK)
    assert mask.dtype == torch.bool
    assert mask.shape == (1, 2, 74, 74)


def test_unknown_parameters_are_rejected_by_name():
    q = torch.randn(1, 1, 128, 16)
    with pytest.raises(ValueError, match="tau"):
        masks.build("xattention", q, q, q, block_size=BLOCK, tau=0.9)


def test_unknown_methods_are_rejected_with_the_known_names():
    with pytest.raises(ValueError, match="xattention"):
        masks.get("sparse-magic")


def test_bad_qkv_shapes_are_rejected():
    q = torch.randn(1, 128, 16)
    with pytest.raises(ValueError, match=r"q must be .*\(B, H, N, D\)"):
        masks.build("dense", q, q, q)


def test_dense_selects_every_block(qkv):
    assert masks.build("dense", *qkv, block_size=BLOCK).all()


def test_random_reuses_the_synthetic_random_mask(qkv):
    got = masks.build("random", *qkv, block_size=BLOCK, density=0.3, seed=4)
    assert torch.equal(got[0], synthetic.random_mask(2, 74, 74, 0.3, seed=4))


def test_random_fixed_nnz_reuses_the_synthetic_fixed_nnz_mask(qkv):
    got = masks.build("random-fixed-nnz", *qkv, block_size=BLOCK, density=0.3, nnz_spread=0.5, seed=4)
    assert torch.equal(got[0], synthetic.fixed_nnz_mask(2, 74, 74, 0.3, nnz_spread=0.5, seed=4))


def test_random_is_iid_bernoulli_with_a_binomial_row_nnz():
    rho, nb = 0.25, 2000
    mask = synthetic.random_mask(4, 256, nb, rho, seed=3)
    nnz = mask.sum(-1).double()
    assert abs(mask.double().mean().item() - rho) < 0.005
    # Binomial(nb, rho): row NNZ variance nb * rho * (1 - rho) = 375, not the 0 of a fixed-NNZ control
    assert 0.8 < nnz.var().item() / (nb * rho * (1 - rho)) < 1.2
    # independent columns: a row's blocks do not predict its neighbour's beyond chance
    both = (mask[:, 1:] & mask[:, :-1]).double().mean().item()
    assert abs(both - rho * rho) < 0.005


def test_random_fixed_nnz_gives_every_row_the_same_nnz():
    nnz = synthetic.fixed_nnz_mask(2, 64, 400, 0.25, seed=1).sum(-1)
    assert (nnz == 100).all()


def test_xattention_keeps_the_block_that_crosses_the_threshold():
    scores = torch.tensor([[0.5, 0.25, 0.125, 0.125]])
    kept = xattention.select_blocks(scores, 0.6, keep_first_block=False, keep_diagonal=False)
    assert kept.tolist() == [[True, True, False, False]]  # 0.5 < 0.6, so the 0.25 block that crosses it stays
    exact = xattention.select_blocks(scores, 0.5, keep_first_block=False, keep_diagonal=False)
    assert exact.tolist() == [[True, False, False, False]]  # 0.5 reaches 0.5: nothing more is needed


def test_xattention_adds_kv_block_0_without_counting_its_mass():
    """Upstream's non-causal path: a plain selection (0.5, then 0.25 crosses 0.6), then block 0 switched on."""
    scores = torch.tensor([[0.125, 0.5, 0.25, 0.125]])
    kept = xattention.select_blocks(scores, 0.6, keep_first_block=True, keep_diagonal=False)
    assert kept.tolist() == [[True, True, True, False]]


def test_xattention_selects_kv_block_0_in_every_row_by_default_like_upstream(qkv):
    mask = masks.build("xattention", *qkv, block_size=BLOCK)
    assert mask[..., 0].all()
    assert masks.get("xattention").params["keep_diagonal"] is False  # upstream forces no diagonal without causal


def test_xattention_antidiagonal_scores_are_block_masses_summing_to_group_count():
    q, k = torch.randn(2, 200, 16).unbind(0)
    scores = xattention.block_scores(q, k, block_size=64, stride=8)
    assert scores.shape == (4, 4)
    # each of the 25 query groups is a distribution over key groups: rows of 8 groups each, last holds 1
    assert torch.allclose(scores.sum(-1), torch.tensor([8.0, 8.0, 8.0, 1.0]), atol=1e-4)


def test_spargeattn_drops_the_block_that_crosses_the_cdf_threshold():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    assert spargeattn.cdf_select(probs, 0.8).tolist() == [[True, True, False, False]]
    assert spargeattn.cdf_select(probs, 0.79).tolist() == [[True, False, False, False]]
    assert spargeattn.cdf_select(probs, 0.1).tolist() == [[True, False, False, False]]  # at least one


def test_spargeattn_computes_non_self_similar_blocks_as_whole_rows_and_columns():
    gen = torch.Generator().manual_seed(0)
    n, d = 8 * BLOCK, 32
    # self-similar blocks: one direction per block plus a little noise; block 2 of q and block 5 of k: noise
    base = torch.randn(8, d, generator=gen).repeat_interleave(BLOCK, 0)
    q = base + 0.05 * torch.randn(n, d, generator=gen)
    k = base.flip(0) + 0.05 * torch.randn(n, d, generator=gen)
    q[2 * BLOCK:3 * BLOCK] = torch.randn(BLOCK, d, generator=gen)
    k[5 * BLOCK:6 * BLOCK] = torch.randn(BLOCK, d, generator=gen)
    q, k = q.view(1, 1, n, d), k.view(1, 1, n, d)
    mask = masks.build("spargeattn", q, k, k, block_size=BLOCK, simthreshd1=0.5, cdfthreshd=0.3,
                       autotune=False)[0, 0]
    assert mask[2].all() and mask[:, 5].all()
    assert not mask.all()


def test_spargeattn_attention_sink_adds_kv_block_0(qkv):
    mask = masks.build("spargeattn", *qkv, block_size=BLOCK, simthreshd1=0.0, cdfthreshd=0.1, attention_sink=True,
                       autotune=False)
    assert mask[..., 0].all()


@pytest.mark.parametrize(("name", "param", "values", "fixed"), [
    ("xattention", "threshold", (0.5, 0.8, 0.9, 0.95), {}),
    ("flexprefill", "gamma", (0.3, 0.6, 0.9), {}),
    ("spargeattn", "cdfthreshd", (0.3, 0.6, 0.9, 0.99), {"simthreshd1": 0.0, "autotune": False}),
])
def test_density_is_non_decreasing_in_the_threshold(qkv, name, param, values, fixed):
    densities = [float(masks.build(name, *qkv, block_size=BLOCK, **fixed, **{param: x}).float().mean())
                 for x in values]
    assert densities == sorted(densities)
    assert densities[0] < densities[-1]


def test_flexprefill_always_keeps_kv_block_0_and_the_diagonal(qkv):
    mask = masks.build("flexprefill", *qkv, block_size=BLOCK, gamma=0.1, min_budget=0)
    assert mask[..., 0].all()
    assert mask.diagonal(dim1=-2, dim2=-1).all()


def test_flexprefill_min_budget_keeps_at_least_that_many_vertical_blocks():
    q = torch.randn(1, 1, 16 * BLOCK, 32, generator=torch.Generator().manual_seed(1))
    mask = masks.build("flexprefill", q, q, q, block_size=BLOCK, gamma=0.01, min_budget=4 * BLOCK, tau=0.0)[0, 0]
    assert int(mask.all(0).sum()) >= 4


def test_the_diagonal_mass_sums_each_distance_on_both_sides_once():
    probs = torch.rand(5, 23, generator=torch.Generator().manual_seed(3))
    rows = torch.arange(23 - 5, 23).unsqueeze(1)
    distance = (rows - torch.arange(23).unsqueeze(0)).abs()
    by_definition = torch.zeros(23, dtype=torch.float64).index_add_(0, distance.flatten(), probs.double().flatten())
    assert torch.allclose(diagonal_mass(probs, 23).double(), by_definition, rtol=1e-6)
    assert diagonal_mass(torch.eye(1, 4), 4).tolist() == [0.0, 0.0, 0.0, 1.0]  # query 3, key 0


def test_flexprefill_js_distance_is_zero_for_equal_and_positive_for_different_distributions():
    p = torch.tensor([0.5, 0.25, 0.25])
    assert float(flexprefill.js_distance(p, p)) == pytest.approx(0.0, abs=1e-6)
    assert float(flexprefill.js_distance(p, torch.tensor([0.1, 0.1, 0.8]))) > 0.2


def test_minference_vertical_slash_keeps_first_tokens_and_nearest_diagonals_on_both_sides(qkv):
    # the forced columns and diagonals count in the budgets, as upstream: 30 and 100 are exactly them
    mask = masks.build("minference", *qkv, block_size=BLOCK, vertical_size=30, slash_size=100, search=False)
    assert mask[..., 0].all()  # the first 30 tokens live in kv block 0
    r = torch.arange(mask.shape[-1] - 1)
    assert mask[..., r, r + 1].all() and mask[..., r + 1, r].all()  # distances < 100 cross both neighbours


def test_minference_a_shape_is_a_sink_column_and_a_symmetric_band():
    mask = minference.a_shape(20 * BLOCK, BLOCK, init=BLOCK, local=2 * BLOCK, device=torch.device("cpu"))
    assert mask[:, 0].all()
    assert torch.equal(mask[1:, 1:], mask[1:, 1:].T)
    assert not mask[10, 15]


def test_minference_block_sparse_keeps_exactly_top_k_blocks_per_row(qkv):
    mask = masks.build("minference", *qkv, block_size=BLOCK, pattern="block_sparse", top_k=5, search=False)
    assert (mask.sum(-1) == 5).all()


def test_minference_search_runs_the_winner_as_upstream_remaps_it():
    """An A-shape winner runs as vertical-slash, as upstream remaps it; the returned config is the one that runs:
    the candidate A-shape is scored as, remapped, with the density of the mask it builds."""
    q, k = sink_and_band_head(4096)  # the stream-LLM (A-shape) candidate's pattern
    cfg = minference.search_head(q[0, 0], k[0, 0], BLOCK, sample_blocks=4)
    assert (cfg["scored_as"], cfg["pattern"]) == ("a_shape", "vertical_slash")
    remapped = {tuple(sorted(runs.items())) for scored, runs in minference.CANDIDATES
                if scored["pattern"] == "a_shape"}
    assert tuple(sorted((key, cfg[key]) for key in ("pattern", "vertical_size", "slash_size"))) in remapped
    built = minference.head_mask(q[0, 0], k[0, 0], BLOCK, {**minference.PARAMS, **cfg})
    assert 0 < cfg["density"] < 1 and float(built.float().mean()) == pytest.approx(cfg["density"])


def test_spargeattn_autotune_caches_per_head_configs_that_build_then_uses(qkv, tmp_path):
    q, k, v = qkv
    cache = tmp_path / "sparge.json"
    configs = spargeattn.autotune(q, k, v, BLOCK, model="wan2.1-1.3b", layer=3, heads=[7, 9], cache=str(cache),
                                  l1_bound=0.1, sample_blocks=4)
    assert set(configs) == {"wan2.1-1.3b/3/7", "wan2.1-1.3b/3/9"}
    assert all(c["l1_error"] <= 0.1 for c in configs.values())
    # tuned with the sink off; built with it off the densities are the tuned ones, with it on (the default,
    # as upstream runs) kv-block 0 is added to every row
    without = masks.build("spargeattn", q, k, v, block_size=BLOCK, tuned_config=str(cache), model="wan2.1-1.3b",
                          layer=3, heads=[7, 9], attention_sink=False)
    for i, key in enumerate(("wan2.1-1.3b/3/7", "wan2.1-1.3b/3/9")):
        assert float(without[0, i].float().mean()) == pytest.approx(configs[key]["density"])
    with_sink = masks.build("spargeattn", q, k, v, block_size=BLOCK, tuned_config=str(cache), model="wan2.1-1.3b",
                            layer=3, heads=[7, 9])
    assert torch.equal(with_sink, without | (torch.arange(without.shape[-1]) == 0))


def _tune_by_definition(q, k, v, l1_bound, sample_blocks):
    """SpargeAttn's autotune as its docstring defines it, each threshold's whole mask built from scratch and the
    error read from the sampled blocks of it: the reference the autotune's row-sampled, sort-once path must equal."""
    from wavealign.masks._common import BlockPartials, block_rows, sample_query_blocks

    nb = -(-q.shape[0] // BLOCK)
    blocks = sample_query_blocks(nb, sample_blocks)
    rows, owner = block_rows(q, blocks, BLOCK)
    partials = BlockPartials(rows, k, v, BLOCK)
    dense = partials.output(torch.ones_like(partials.den, dtype=torch.bool))

    def full_mask(sim, cdf):
        return masks.build("spargeattn", q[None, None], k[None, None], v[None, None], block_size=BLOCK,
                           simthreshd1=sim, cdfthreshd=cdf, autotune=False, attention_sink=False)[0, 0]

    def error(mask):
        return float((partials.output(mask[blocks][owner]) - dense).abs().sum() / dense.abs().sum())

    best = None
    for sim in spargeattn.SIM_GRID:
        lo, hi = 0.0, 1.0
        if error(full_mask(sim, hi)) > l1_bound:
            continue
        for _ in range(8):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if error(full_mask(sim, mid)) <= l1_bound else (mid, hi)
        density = float(full_mask(sim, hi).float().mean())
        if best is None or density < best[2]:
            best = (sim, hi, density)
    return best


@pytest.mark.parametrize("head", [0, 1])
def test_spargeattn_autotune_picks_what_bisecting_whole_masks_picks(qkv, head):
    """The autotune sorts each threshold's probabilities once and bisects on the sampled blocks' rows alone; it
    must pick the config, and report the density, that bisecting over whole masks does."""
    q, k, v = (t[0, head] for t in qkv)
    got = spargeattn.tune_head(q, k, v, BLOCK, l1_bound=0.1, sample_blocks=4)
    want = _tune_by_definition(q, k, v, l1_bound=0.1, sample_blocks=4)
    assert want is not None and 0 < want[2] < 1  # a sparse config passes: the search had something to find
    assert (got["simthreshd1"], got["cdfthreshd"], got["density"]) == want


def test_spargeattn_autotune_scores_a_mask_keeping_every_block_at_exactly_zero_error(qkv):
    """At l1_bound=0 only exact settings pass: at cdfthreshd=1 every block with mass is kept, so its error must
    come out exactly 0 (it did not when the dense output was summed in another order than the masks'), and the
    search must not fall back to the dense config (simthreshd1=1)."""
    q, k, v = (t[0, 0] for t in qkv)
    got = spargeattn.tune_head(q, k, v, BLOCK, l1_bound=0.0, sample_blocks=4)
    assert got["l1_error"] == 0.0 and got["simthreshd1"] < 1.0 and got["cdfthreshd"] == 1.0


def test_spargeattn_prediction_of_sampled_rows_equals_those_rows_of_the_whole_mask(qkv):
    q, k, _ = (t[0, 0] for t in qkv)
    stats = spargeattn._HeadStats.of(q, k, BLOCK)
    rows = torch.tensor([0, 5, 40, 73])
    for sim, cdf in ((0.0, 0.5), (0.6, 0.9), (0.9, 0.2)):
        assert torch.equal(stats.predict(sim, rows).mask(cdf, True), stats.mask(sim, cdf, True)[rows])


def test_minference_search_picks_a_candidate_per_head_and_caches_it(qkv, tmp_path):
    q, k, v = qkv
    cache = tmp_path / "minf.json"
    configs = minference.search(q, k, v, BLOCK, model="m", layer=0, cache=str(cache), sample_blocks=4)
    assert set(configs) == {"m/0/0", "m/0/1"}
    assert all(c["pattern"] in minference.PATTERNS for c in configs.values())
    # the build reads each head's config from the cache: give head 1 a sparse one the search did not pick
    sparse = {"pattern": "vertical_slash", "vertical_size": 30, "slash_size": 100}
    data = json.loads(cache.read_text())
    data["configs"]["m/0/1"] = sparse
    cache.write_text(json.dumps(data))
    mask = masks.build("minference", q, k, v, block_size=BLOCK, tuned_config=str(cache), model="m", layer=0)
    for head, cfg in enumerate((configs["m/0/0"], sparse)):
        assert torch.equal(mask[0, head], minference.head_mask(q[0, head], k[0, head], BLOCK,
                                                               {**minference.PARAMS, **cfg}))
    assert float(mask[0, 1].float().mean()) < 1


@pytest.mark.parametrize(("name", "params"), [("spargeattn", {}), ("minference", {"budget": 0.5})])
def test_a_store_tunes_each_head_once_and_its_prediction_gives_the_tuning_build_s_mask(qkv, name, params):
    """A live pipeline keeps a TunedConfigs store: the first build tunes every head into it, a later build on the
    same (model, layer, heads) only predicts, and both give the mask a build without a store (tuning) gives."""
    q, k, v = qkv
    store = masks.TunedConfigs(name)
    ident = {"model": "m", "layer": 4, "heads": [0, 1], **params}  # MInference's budget: a sparse pick here
    tuning = masks.build(name, q, k, v, block_size=BLOCK, tuned_config=store, **ident)
    assert store.tuned == 2 and len(store) == 2
    predicted = masks.build(name, q, k, v, block_size=BLOCK, tuned_config=store, **ident)
    assert store.tuned == 2  # nothing tuned again
    assert torch.equal(predicted, tuning)
    assert torch.equal(tuning, masks.build(name, q, k, v, block_size=BLOCK, **ident))
    assert 0 < float(tuning.float().mean()) < 1
    masks.build(name, q, k, v, block_size=BLOCK, tuned_config=store, **{**ident, "layer": 5})
    assert store.tuned == 4  # another layer is other heads


def test_a_store_over_a_file_reads_it_once_and_writes_what_it_tunes(qkv, tmp_path):
    q, k, v = qkv
    path = tmp_path / "sparge.json"
    masks.build("spargeattn", q, k, v, block_size=BLOCK, tuned_config=masks.TunedConfigs("spargeattn", path),
                model="m", layer=0)
    reread = masks.TunedConfigs("spargeattn", path)
    assert len(reread) == 2 and reread.get("m", 0, 1) is not None
    masks.build("spargeattn", q, k, v, block_size=BLOCK, tuned_config=reread, model="m", layer=0)
    assert reread.tuned == 0


def test_a_store_of_another_method_or_a_tuned_config_of_another_type_is_rejected(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match="store of 'spargeattn' configs, got one of 'minference'"):
        masks.build("spargeattn", q, k, v, block_size=BLOCK, tuned_config=masks.TunedConfigs("minference"))
    with pytest.raises(ValueError, match="tuned_config must be a JSON file path"):
        masks.build("minference", q, k, v, block_size=BLOCK, tuned_config=3)


def test_a_tuned_config_file_of_another_method_is_rejected(qkv, tmp_path):
    q, k, v = qkv
    cache = tmp_path / "minf.json"
    minference.search(q[:, :1], k[:, :1], v[:, :1], BLOCK, model="m", layer=0, cache=str(cache), sample_blocks=2)
    with pytest.raises(ValueError, match="spargeattn"):
        masks.build("spargeattn", q, k, v, block_size=BLOCK, tuned_config=str(cache))


def test_a_method_module_draws_its_mask_to_a_png(tmp_path):
    out = tmp_path / "dense.png"
    assert draw_main("dense", ["--out", str(out), "--frames", "5"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_mask_file_is_read_once_per_version_and_each_caller_gets_its_own_copy(tmp_path, monkeypatch):
    from wavealign.masks import file, npz

    reads, load = [], npz.load
    monkeypatch.setattr(npz, "load", lambda p: reads.append(p) or load(p))
    file._read.cache_clear()
    path = tmp_path / "mask.npz"
    first, second = (synthetic.random_mask(2, 6, 6, 0.5, seed=s) for s in (1, 2))
    npz.save(path, first)
    got = masks.get("file").for_shape(2, 6, 6, path=str(path))
    assert torch.equal(got, first)
    got.fill_(True)  # the caller's copy; the next call must not see it
    assert torch.equal(masks.get("file").for_shape(2, 6, 6, path=str(path)), first)
    assert len(reads) == 1
    npz.save(path, second)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))  # a later version
    assert torch.equal(masks.get("file").for_shape(2, 6, 6, path=str(path)), second)
    assert len(reads) == 2
    with pytest.raises(ValueError, match=r"path='.*nothere\.npz'"):
        masks.get("file").for_shape(2, 6, 6, path=str(tmp_path / "nothere.npz"))
