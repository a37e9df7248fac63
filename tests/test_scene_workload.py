"""Specification of the scene generator (wavealign.workloads.scene) and of choosing a generator by name: one moving
scene per seed that every layer and head sees, generated in the cluster generator's chunks, picked by a workload
YAML's ``generator`` key."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch

from jobs import cli
from orchestrator import config, grid
from wavealign import inputs, pipeline, workloads
from wavealign.workloads.rope import positions
from wavealign.workloads.scene import SceneConfig, draw_scene, object_centres, scene_at

synthetic_module = importlib.import_module("wavealign.workloads.clusters")
SMALL = ("wan2.1-1.3b", 9, "480p")  # 3 latent frames x 30 x 52 = 4680 tokens
LONG = ("wan2.1-1.3b", 61, "480p")  # 16 latent frames, 24,960 tokens: two generator chunks


def only(head_type: str, **kw) -> SceneConfig:
    return SceneConfig(mix_first_layer={head_type: 1.0}, mix_last_layer={head_type: 1.0}, **kw)


def labels_by_frame(wl: workloads.Workload, seed: int, cfg: SceneConfig) -> torch.Tensor:
    label, _ = scene_at(draw_scene(wl, seed, cfg), positions(wl), cfg, wl.grid_height)
    return label.view(wl.latent_frames, wl.grid_height, wl.grid_width)


def test_the_scene_generator_gives_one_batch_of_the_chosen_heads_in_float32_on_the_cpu():
    wl = workloads.preset(*SMALL)
    q, k, v = workloads.synthetic(wl, heads=[0, 3], seed=0, config=SceneConfig())
    for t in (q, k, v):
        assert t.shape == (1, 2, wl.seq_len, 128) and t.dtype == torch.float32
    q3, _, _ = workloads.synthetic(wl, heads=[3], seed=0, config=SceneConfig())
    assert torch.equal(q[:, 1:], q3)


def test_the_scene_generator_is_deterministic_by_seed_and_differs_from_the_cluster_generator():
    wl = workloads.preset(*SMALL)
    a = workloads.synthetic(wl, heads=[1], seed=5, config=SceneConfig())
    b = workloads.synthetic(wl, heads=[1], seed=5, config=SceneConfig())
    c = workloads.synthetic(wl, heads=[1], seed=6, config=SceneConfig())
    clusters = workloads.synthetic(wl, heads=[1], seed=5, config=workloads.GeneratorConfig())
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], c[0]) and not torch.equal(a[1], clusters[1])


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_scene_head_computed_in_spans_of_chunks_equals_it_computed_chunk_by_chunk(device, monkeypatch):
    wl = workloads.preset(*LONG)
    assert wl.seq_len > synthetic_module.GEN_CHUNK_TOKENS
    monkeypatch.setattr(synthetic_module, "SPAN_CHUNKS", {device: 2})
    spans = workloads.synthetic(wl, heads=[2, 5], layer=1, step=3, seed=4, device=device, config=SceneConfig())
    monkeypatch.setattr(synthetic_module, "SPAN_CHUNKS", {device: 1})
    chunks = workloads.synthetic(wl, heads=[2, 5], layer=1, step=3, seed=4, device=device, config=SceneConfig())
    assert all(torch.equal(a, b) for a, b in zip(spans, chunks, strict=True))


def test_the_scene_at_any_span_of_tokens_is_that_span_of_the_whole_scene():
    wl = workloads.preset(*LONG)
    cfg = SceneConfig()
    scene = draw_scene(wl, 3, cfg)
    whole_label, whole_part = scene_at(scene, positions(wl), cfg, wl.grid_height)
    label, part = scene_at(scene, positions(wl, 7000, 9000), cfg, wl.grid_height)
    assert torch.equal(label, whole_label[7000:9000]) and torch.equal(part, whole_part[7000:9000])


def test_the_scene_depends_on_the_seed_alone_so_every_layer_and_head_sees_it():
    wl = workloads.preset(*SMALL)
    cfg = SceneConfig()
    specs = workloads.head_specs(wl, [0, 7], layer=2, config=cfg) + workloads.head_specs(wl, [4], layer=9, config=cfg)
    scenes = [cfg.basis(wl, spec, layer, seed=1).scene for spec, layer in zip(specs, (2, 2, 9), strict=True)]
    seen = [scene_at(s, positions(wl), cfg, wl.grid_height)[0] for s in scenes]
    assert all(torch.equal(labels, labels_by_frame(wl, 1, cfg).flatten()) for labels in seen)
    assert not torch.equal(labels_by_frame(wl, 1, cfg), labels_by_frame(wl, 2, cfg))


def test_the_scene_moves_between_frames_a_little_at_a_time():
    wl = workloads.preset(*LONG)
    labels = labels_by_frame(wl, 0, SceneConfig())
    step = (labels[1:] != labels[:-1]).float().mean()
    assert 0.0 < step < 0.2
    assert (labels[-1] != labels[0]).float().mean() > step  # it keeps moving, not back and forth


def test_ground_queries_take_the_ground_sharpness_times_the_heads_and_other_queries_the_heads():
    wl = workloads.preset(*SMALL)
    cfg = SceneConfig(ground_sharpness=0.25)
    (spec, q, k, _), = workloads.iter_heads(wl, [2], config=cfg)
    ground = labels_by_frame(wl, 0, cfg).reshape(-1) == cfg.background_regions
    scale = q.view(-1, wl.head_dim).pow(2).mean(-1).sqrt()
    assert torch.allclose(k.pow(2).mean(-1), torch.ones(()), atol=1e-3)
    assert torch.allclose(scale[ground], torch.tensor(0.25 * spec.sharpness), rtol=1e-3)
    assert torch.allclose(scale[~ground], torch.tensor(spec.sharpness), rtol=1e-3)


def test_objects_reflect_at_the_frame_edges_and_stay_above_the_ground():
    wl = workloads.preset(*LONG)
    cfg = SceneConfig(objects=12, object_speed=3.0)
    scene = draw_scene(wl, 0, cfg)
    frames = torch.arange(0, 400, 7.0).view(-1, 1, 1)  # long after the objects would have left the frame
    centres = object_centres(scene, frames)
    assert (centres >= 0).all() and (centres <= scene.bounds).all()
    assert float(scene.bounds[0]) == pytest.approx(wl.grid_height * (1 - cfg.ground_fraction))
    assert (centres[1:] != centres[:-1]).any(-1).all()  # every object keeps moving


def test_the_bottom_rows_of_every_frame_are_ground_whatever_the_objects_do():
    """The last query tokens FlexPrefill and MInference estimate from lie in the ground band on every seed."""
    wl = workloads.preset(*LONG)
    cfg = SceneConfig(objects=20, object_radius=0.3, object_radius_max=0.6)
    ground = cfg.background_regions
    for seed in range(3):
        labels = labels_by_frame(wl, seed, cfg)
        assert (labels[:, -2:] == ground).all()
        assert (labels[:, :-round(wl.grid_height * cfg.ground_fraction) - 1] != ground).all()


def test_labels_cover_background_regions_ground_and_objects():
    wl = workloads.preset(*LONG)
    cfg = SceneConfig(objects=6)
    seen = set(labels_by_frame(wl, 0, cfg).unique().tolist())
    regions = cfg.background_regions
    assert regions in seen  # the ground
    assert seen & set(range(regions)) and seen & set(range(regions + 1, regions + 1 + cfg.objects))


def test_ground_queries_take_their_own_logit_scale():
    wl = workloads.preset(*SMALL)
    cfg = SceneConfig(ground_sharpness=0.5)
    (spec, q, _, _), = workloads.iter_heads(wl, [2], config=cfg)
    ground = labels_by_frame(wl, 0, cfg).flatten() == cfg.background_regions
    norm = q[0, 0].pow(2).mean(-1).sqrt()
    assert torch.allclose(norm[~ground], torch.tensor(spec.sharpness), rtol=1e-3)
    assert torch.allclose(norm[ground], torch.tensor(0.5 * spec.sharpness), rtol=1e-3)


def test_values_vary_within_a_label_only_with_value_variation():
    wl = workloads.preset(*SMALL)
    label = labels_by_frame(wl, 0, SceneConfig()).flatten()
    ground = label == SceneConfig().background_regions
    for variation, varies in ((0.0, False), (1.0, True)):
        (_, _, _, v), = workloads.iter_heads(wl, [0], config=SceneConfig(value_variation=variation))
        spread = v[0, 0][ground].std(0).max()
        assert (spread > 0.1) == varies, (variation, float(spread))


def test_scene_heads_keep_the_head_types_positional_structure():
    """A temporal head (positional energy on h and w) attends to the same (h, w) in other frames."""
    from wavealign import masks

    wl = workloads.preset("wan2.1-1.3b", 17, "480p")
    (_, q, k, v), = workloads.iter_heads(wl, [0], config=only("temporal"))
    mask = masks.build("xattention", q, k, v, block_size=64, keep_first_block=False, keep_diagonal=False)[0, 0]
    frame_blocks = wl.tokens_per_frame // 64
    nb = mask.shape[0]
    offset = torch.arange(nb).unsqueeze(0) - torch.arange(nb).unsqueeze(1)
    stripe = torch.zeros_like(mask)
    off = torch.zeros_like(mask)
    for f in range(1, 4):
        stripe |= (offset - f * frame_blocks).abs() <= 1
        off |= (offset - f * frame_blocks - frame_blocks // 2).abs() <= 1
    assert float(mask[stripe].float().mean()) > 2 * float(mask[off].float().mean())


def test_a_scene_config_survives_its_yaml_form_and_refuses_unknown_keys():
    cfg = SceneConfig(objects=3, label_mix=0.5, mix_first_layer={"spatial": 1.0})
    assert SceneConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown key"):
        SceneConfig.from_dict({"object": 3})


@pytest.mark.parametrize(("field", "value"), [("objects", -1), ("label_mix", 1.5), ("ground_sharpness", 0.0),
                                              ("object_radius_max", 0.01)])
def test_a_scene_config_out_of_range_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SceneConfig(**{field: value})


def test_generators_are_chosen_by_name_and_the_fitted_scene_one_is_the_default():
    assert workloads.generator_names() == ["clusters", "scene"]
    assert workloads.DEFAULT_GENERATOR == "scene"
    assert workloads.default_config() == workloads.generator("scene") == SceneConfig.calibrated() != SceneConfig()
    assert isinstance(workloads.generator("clusters"), workloads.GeneratorConfig)
    with pytest.raises(ValueError, match=r"generator must be one of \['clusters', 'scene'\], got 'nope'"):
        workloads.generator("nope")


def _conf(tmp_path: Path, workload_yaml: str) -> Path:
    (tmp_path / "workload").mkdir(parents=True)
    (tmp_path / "workload" / "tiny.yaml").write_text(workload_yaml)
    return tmp_path


def test_a_workload_yaml_names_its_generator_and_its_cells_are_drawn_by_it(tmp_path):
    conf = _conf(tmp_path, "name: tiny\nmodel: wan2.1-1.3b\nresolution: 480p\ngenerator: scene\nheads: [1]\n"
                           "layer: 2\nstep: 5\n")
    cfg = config.load(["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[xattention]",
                       "grid.workload=[tiny,wan14b-720p]", "grid.seq_k=[4.6]", "grid.variant=[original]",
                       f"conf_dirs=[{conf}]"])
    cells = grid.expand(cfg).cells
    by_workload = {c.inputs.workload: c for c in cells}
    assert by_workload["tiny"].inputs.generator == "scene"
    assert by_workload["wan14b-720p"].inputs.generator == workloads.DEFAULT_GENERATOR  # a preset without the key
    tiny = by_workload["tiny"]
    wl = workloads.preset("wan2.1-1.3b", tiny.inputs.frames, "480p")
    q, _, _ = inputs._workload_qkv(tiny.inputs, torch.device("cpu"))
    expected, _, _ = workloads.synthetic(wl, heads=[1], layer=2, step=5, config=workloads.generator("scene"))
    assert torch.equal(q, expected)
    assert pipeline.inputs_key(tiny) != pipeline.inputs_key(tiny.replaced(generator="clusters"))
    result = pipeline.run_cell(tiny.replaced(reps=1, warmup=0))
    assert result.status == "done", result.traceback
    assert 0 < result.density < 1


def test_a_bare_shape_cell_names_no_generator():
    cfg = config.load(["~sweep", "grid.workload=[shape-2h]", "grid.seq_k=[1]", "grid.variant=[original]"])
    assert {c.inputs.generator for c in grid.expand(cfg).cells} == {None}


@pytest.mark.parametrize(("yaml_text", "says"), [
    ("name: tiny\nmodel: wan2.1-1.3b\nresolution: 480p\ngenerator: nope\n",
     "conf/workload/tiny.yaml: generator='nope'; expected one of ['clusters', 'scene']"),
    ("name: tiny\nnum_heads: 2\ngenerator: scene\n",
     "conf/workload/tiny.yaml: generator='scene' without a model preset"),
])
def test_a_bad_generator_in_a_workload_yaml_is_one_stderr_line_and_exit_2(yaml_text, says, tmp_path, capsys,
                                                                          monkeypatch):
    monkeypatch.delenv("WAVEALIGN_TRACEBACK", raising=False)
    conf = _conf(tmp_path / "conf", yaml_text)
    argv = ["sweep", "grid.workload=[tiny]", "grid.method=[planted]", f"conf_dirs=[{conf}]",
            f"run_root={tmp_path / 'runs'}"]
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "runs").exists()
