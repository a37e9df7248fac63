"""``python lab/bench_e2e.py`` on a CPU: a tiny random Wan transformer in diffusers, a saved mask replayed in every
self-attention layer through the reference backend, every variant run and recorded."""

import json

import lab_studies
import pytest
import torch

pytest.importorskip("diffusers")

from wavealign import masks
from wavealign.masks import npz, synthetic

bench_e2e = lab_studies.study("bench_e2e")


def test_every_variant_runs_the_replayed_mask_in_every_layer(tmp_path, capsys):
    # latent 2 x 8 x 8 -> 2 * 4 * 4 = 32 tokens = 2 query blocks of 16, two heads
    mask = synthetic.random_mask(2, 2, 2, 0.5, seed=0)
    mask[:, :, 0] = True  # no empty row
    npz.save(tmp_path / "mask.npz", mask)
    out = tmp_path / "e2e.json"
    assert bench_e2e.main(["--config", "tiny", "--mask", str(tmp_path / "mask.npz"), "--latent", "2,8,8",
                           "--block-size", "16", "--backend", "reference", "--device", "cpu", "--forwards", "1",
                           "--estimator", "none", "--variants", "never,always,adaptive", "--layers", "1",
                           "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["tokens"] == 32 and record["layers"] == 1
    assert record["density"] == pytest.approx(float(mask.float().mean()))
    rows = {r["variant"]: r for r in record["rows"]}
    assert set(rows) == {"never", "always", "adaptive"}
    # one block (--layers 1): the last forward's one self-attention call is what is recorded
    assert rows["always"]["reordered_layers"] == 1 and rows["never"]["reordered_layers"] == 0
    assert "speedup over original-order sparse" in capsys.readouterr().out
    assert record["method"] is None  # the mask came from --mask, not from a method
    assert record["estimator"] is None and all(r["estimator_ms"] == 0 for r in record["rows"])


def test_auto_chooses_once_per_layer_in_its_warm_up_and_keeps_the_pick_in_the_timed_forwards(tmp_path, capsys):
    """``auto``: the warm-up forward of the model itself hands each layer's choice to the chooser's thread (its cost
    recorded once), the bench waits for the last pick, and the timed forwards run the kept picks, choosing nothing
    again."""
    mask = synthetic.random_mask(2, 2, 2, 0.5, seed=0)
    mask[:, :, 0] = True
    npz.save(tmp_path / "mask.npz", mask)
    out = tmp_path / "e2e.json"
    assert bench_e2e.main(["--config", "tiny", "--mask", str(tmp_path / "mask.npz"), "--latent", "2,8,8",
                           "--block-size", "16", "--backend", "reference", "--device", "cpu", "--forwards", "2",
                           "--estimator", "none", "--variants", "never,auto", "--out", str(out)]) == 0
    rows = {r["variant"]: r for r in json.loads(out.read_text())["rows"]}
    auto = rows["auto"]
    assert auto["choose_ms"] > 0 and rows["never"]["choose_ms"] == 0
    # the last timed forward: both layers ran the pick the chooser named in the warm-up
    assert sum(auto["candidates"].values()) == 2 and rows["never"]["candidates"] == {"original": 2}
    assert "the chooser's picks" in capsys.readouterr().out


@pytest.mark.parametrize("method", ["xattention", "spargeattn"])
def test_a_live_estimator_runs_the_method_in_every_layer_of_every_sparse_forward(tmp_path, capsys, method):
    """The method is built on each layer's live Q/K inside the forward (its mask discarded); a tuned method's
    configs are tuned by one forward before the timed ones and reused by every variant."""
    mask = synthetic.random_mask(2, 4, 4, 0.5, seed=0)
    mask[:, :, 0] = True
    npz.save(tmp_path / "mask.npz", mask)
    out = tmp_path / "e2e.json"
    assert bench_e2e.main(["--config", "tiny", "--mask", str(tmp_path / "mask.npz"), "--latent", "4,8,8",
                           "--block-size", "16", "--backend", "reference", "--device", "cpu", "--method", method,
                           "--variants", "dense,never,always", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    rows = {r["variant"]: r for r in record["rows"]}
    assert record["estimator"] == f"{method}, live, mask discarded"
    assert rows["dense"]["estimator_ms"] == 0  # the stock processors: nothing of ours runs
    assert rows["never"]["estimator_ms"] > 0 and rows["always"]["estimator_ms"] > 0
    assert ("tuning forward" in capsys.readouterr().out) == (method == "spargeattn")


@pytest.mark.parametrize("argv, message", [
    (["--variants", "dense,fast"], "--variants"),
    (["--forwards", "0"], "--forwards"),
    (["--layers", "0"], "--layers must be >= 1"),
    (["--method", "random"], "--method 'random': expected a method that builds its mask from Q/K"),
    (["--config", "tiny"], "--config tiny has no workload preset"),
    (["--config", "tiny", "--mask", "m.npz", "--latent", "2,7,8"], "--latent must be"),
    (["--config", "tiny", "--mask", "MASK", "--latent", "2,8,16", "--block-size", "16", "--device", "cpu"],
     "the latent (2, 8, 16) has 64 tokens = 4 blocks of --block-size 16, so (H, 4, 4) is expected"),
])
def test_bad_arguments_are_refused_before_any_work(argv, message, capsys, tmp_path):
    npz.save(tmp_path / "mask.npz", synthetic.random_mask(2, 2, 2, 0.5, seed=0))  # 2 blocks
    with pytest.raises(ValueError) as refused:
        bench_e2e.main([str(tmp_path / "mask.npz") if a == "MASK" else a for a in argv])
    assert message in str(refused.value)


def test_bench_e2e_runs_radial_itself_in_every_layer_planned_once(tmp_path):
    out = tmp_path / "e2e.json"
    # VAE latent 3 x 8 x 14 -> tokens (3, 4, 7) = 84 = 6 blocks of 16, the last ragged
    assert bench_e2e.main(["--config", "tiny", "--method", "radial", "--latent", "3,8,14", "--block-size", "16",
                           "--backend", "reference", "--device", "cpu", "--variants", "never,always",
                           "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["method"] == "radial" and record["estimator"] is None
    assert record["density"] == pytest.approx(float(masks.get("radial").for_shape(
        1, 6, 6, block_size=16, latent=(3, 4, 7)).float().mean()))
    rows = {r["variant"]: r for r in record["rows"]}
    assert rows["always"]["planned_layers"] == 1 and rows["always"]["reordered_layers"] == 2  # 2 layers, 1 plan


def test_bench_e2e_replays_vsa_in_cube_order_with_its_live_estimator(tmp_path):
    mask = torch.zeros(2, 4, 4, dtype=torch.bool)
    mask[:, :, 0] = mask[:, 1:, 2] = True
    npz.save(tmp_path / "mask.npz", mask)
    out = tmp_path / "e2e.json"
    # VAE latent 4 x 16 x 32 -> tokens (4, 8, 16) = 512 = four 2 x 8 x 8 cubes
    assert bench_e2e.main(["--config", "tiny", "--method", "vsa", "--mask", str(tmp_path / "mask.npz"),
                           "--latent", "4,16,32", "--backend", "reference", "--device", "cpu",
                           "--variants", "never,always", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["estimator"] == "vsa, live, mask discarded"
    rows = {r["variant"]: r for r in record["rows"]}
    assert rows["never"]["estimator_ms"] > 0 and rows["always"]["planned_layers"] == 2  # replayed: planned per call


def test_bench_e2e_refuses_a_saved_mask_for_a_static_method(tmp_path):
    with pytest.raises(ValueError, match="--method radial is static"):
        bench_e2e.main(["--method", "radial", "--mask", str(tmp_path / "m.npz")])


@pytest.mark.parametrize(("argv", "needle"), [
    (["--config", "1.3b", "--device", "cpu", "--backend", "fa5"], "--backend 'fa5': expected a backend"),
    (["--config", "1.3b", "--device", "cpu", "--block-size", "0"], "--block-size must be >= 1, got 0"),
])
def test_a_bad_argument_is_one_line_and_exit_2_before_any_work(argv, needle, capsys):
    assert lab_studies.run("bench_e2e", argv) == 2
    assert needle in capsys.readouterr().err
