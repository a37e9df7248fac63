"""The sweep config: Hydra composition against the typed schema, validation messages, grid expansion, and each
entry's parameters held to the schema its registry entry gives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from orchestrator import config, grid
from wavealign import kernels, masks, measurers, registry

CONF = Path(config.CONF_DIR)
# a small CPU-only grid the expansion tests start from
CPU_GRID = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[planted]",
            "grid.workload=[shape-2h]", "grid.seq_k=[1]", "grid.variant=[original,wavealign]"]


def names_in(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("group", ["method", "backend", "measure", "reorderer"])
def test_the_registries_not_yaml_files_say_what_a_grid_may_name(group):
    """An entry is one module: a YAML that held only its name would be a second list to keep in step."""
    assert not (CONF / group).exists()


def test_config_yaml_restates_none_of_the_schema_s_defaults():
    """The schema's dataclasses are the one home of every default; conf/config.yaml only picks the schema and a
    preset."""
    assert set(OmegaConf.load(CONF / "config.yaml")) == {"defaults"}


def test_a_cell_takes_each_parameter_s_default_from_the_module_that_declares_it():
    cfg = config.load([*CPU_GRID, "grid.hardware=[h100]", "grid.backend=[triton]", "grid.measure=[simulated]",
                       "grid.method=[random]", "grid.variant=[wavealign]", "grid.reorderer=[minhash]"])
    (cell,) = grid.expand(cfg).cells
    assert cell.inputs.method_params == dict(masks.get("random").params)
    assert cell.attention.backend_params == dict(kernels.get("triton").params)
    assert cell.attention.backend_params["head_order"] == "sequential"
    assert cell.measurer.measure_params == dict(measurers.get("simulated").params)
    assert cell.attention.reorderer_params == {"num_perm": 64, "bands": 16}


def test_the_measurers_registry_names_the_three_ways_to_measure():
    assert measurers.names() == ["ncu", "simulated", "timed"]


@pytest.mark.parametrize("sweep", names_in("sweep"))
def test_every_shipped_sweep_composes_validates_and_expands(sweep):
    cfg = config.load([f"sweep={sweep}"])
    assert cfg.name == sweep and grid.expand(cfg).cells


def test_the_four_issue_sweeps_ship():
    assert {"smoke", "paper_h100", "paper_a40", "h200"} <= set(names_in("sweep"))


def test_overrides_work_the_hydra_way():
    cfg = config.load(["sweep=paper_h100", "grid.seq_k=[148,364]", "ray.address=auto"])
    assert list(cfg.grid.seq_k) == [148, 364] and cfg.ray.address == "auto"


@pytest.mark.parametrize(("override", "message"), [
    ("grid.seqk=[1]", "grid.seqk=[1] is not a sweep config key; did you mean grid.seq_k=[1]?"),
    ("grid.method=[xattenton]", "unknown method 'xattenton'"),
    ("grid.backend=[cudnn]", "unknown backend 'cudnn'"),
    ("grid.hardware=[v100]", "unknown hardware 'v100'"),
    ("grid.seq_k=[-148]", "seq_k has -148"),
    ("grid.wave_size=[0]", "wave_size has 0"),
    ("grid.reps=0", "grid.reps=0"),
    ("grid.variant=[fastest]", "unknown variant 'fastest'"),
    ("grid.reorderer=[metis]", "unknown reorderer 'metis'"),
    ("grid.reorderer=[]", "grid.reorderer=[] is empty"),
    ("+grid.reorderer_params.minhash.bands=[4]", "reorderer 'minhash' is not in grid.reorderer"),
    ("variants.original.stages=diagonal", "variants.original.stages='diagonal'"),
    ("+grid.method_params.xattention.threshold=[0.9]", "method 'xattention' is not in grid.method"),
    ("grid.cpu_profile=tpu", "grid.cpu_profile='tpu'"),
    ("ray.num_cpus=0", "ray.num_cpus=0; expected null or an integer >= 1"),
    ("ray.object_store_mb=abc", "ray.object_store_mb=abc: expected an integer or null"),
])
def test_bad_config_is_rejected_naming_the_offender(override, message):
    with pytest.raises(config.ConfigError, match=message.replace("[", r"\[").replace("(", r"\(")):
        config.load([*CPU_GRID, override])


@pytest.mark.parametrize(("override", "message"), [
    ("grid.reps=three", "grid.reps=three: expected an integer"),
    ("grid.block_size=true", "grid.block_size=true: expected an integer or null"),
    ("grid.wave_size=[64,inf]", "grid.wave_size has inf; expected an integer or null"),
    ("grid.seed=[0,x]", "grid.seed has 'x'; expected an integer"),
    ("ray.wait_timeout_s=soon", "ray.wait_timeout_s=soon: expected a number"),
    ("mlflow.enabled=2", "mlflow.enabled=2: mlflow.enabled is a switch; expected mlflow.enabled=true or "
                         "mlflow.enabled=false"),
    ("extra_grids.cpu_reference.seed=abc", "extra_grids.cpu_reference.seed=abc: a grid axis is a list of integers; "
                                           "expected e.g. extra_grids.cpu_reference.seed=[0]"),
])
def test_a_value_its_field_s_type_refuses_is_refused_by_the_schema_naming_the_key_and_the_type(override, message):
    with pytest.raises(config.ConfigError, match="^" + re.escape(message) + "$"):
        config.load([override])


@pytest.mark.parametrize(("overrides", "message"), [
    (["grid.method=[xattention]", "grid.workload=[wan1.3b-480p-2h]", "+grid.method_params.xattention.threshold=abc"],
     "grid.method_params.xattention.threshold: expected a number, got 'abc'"),
    (["grid.method=[xattention]", "grid.workload=[wan1.3b-480p-2h]",
      "+grid.method_params.xattention.keep_diagonal=[true,sometimes]"],
     "grid.method_params.xattention.keep_diagonal: expected true or false, got 'sometimes'"),
    (["grid.variant=[wavealign]", "grid.reorderer=[lsh]", "+grid.reorderer_params.lsh.bits=[8,1.5]"],
     "grid.reorderer_params.lsh.bits: expected an integer, got 1.5"),
    (["+grid.measure_params.timed.budget_s=long"], "grid.measure_params.timed.budget_s: expected a number, got 'long'"),
    (["grid.hardware=[h100]", "grid.backend=[flashinfer]", "grid.measure=[simulated]",
      "+grid.backend_params.flashinfer.head_order=null"],
     "grid.backend_params.flashinfer.head_order: expected a text, got None"),
])
def test_an_entry_parameter_of_the_wrong_type_is_refused_by_the_schema_its_registry_entry_gives(overrides, message):
    with pytest.raises(config.ConfigError, match="^" + re.escape(message) + "$"):
        config.load([*CPU_GRID, *overrides])


def test_an_entry_s_parameter_types_are_the_ones_it_registers_else_its_scalar_defaults():
    """An integer default takes integers, a real one numbers; a parameter whose default says no type (None) has
    the type its entry registers."""
    flexprefill = masks.get("flexprefill")
    assert registry.param_types("flexprefill", flexprefill.params, flexprefill.types) == {
        "gamma": float, "tau": float, "min_budget": int, "max_budget": int | None}
    timed = measurers.get("timed")
    assert registry.param_types("timed", timed.params, timed.types) == {"paired": bool, "stable_pct": float | None,
                                                                        "budget_s": float}


def test_a_nullable_entry_parameter_takes_null():
    cfg = config.load([*CPU_GRID, "+grid.measure_params.timed.stable_pct=[null,0.5]"])
    assert {c.flat()["measure_params"]["stable_pct"] for c in grid.expand(cfg).cells} == {None, 0.5}


def test_a_backend_that_runs_on_none_of_the_hardware_is_rejected():
    with pytest.raises(config.ConfigError, match=r"backend 'fa4' cannot run on any of grid\.hardware \['cpu'\]: "
                                                 r"backend fa4 needs a GPU; hardware cpu"):
        config.load([*CPU_GRID, "grid.backend=[fa4]"])


def test_an_unknown_method_parameter_is_rejected():
    with pytest.raises(config.ConfigError, match=r"grid\.method_params\.planted\.densty=\[0\.1\] is not a parameter "
                                                 r"of method 'planted'.*did you mean density\?"):
        config.load([*CPU_GRID, "+grid.method_params.planted.densty=[0.1]"])


@pytest.mark.parametrize(("override", "message"), [
    ("+grid.reorderer_params.lsh.bits=[16,99]", "grid.reorderer_params.lsh.bits has 99: bits must be"),
    ("+grid.reorderer_params.lsh.planes=[8]", "grid.reorderer_params.lsh.planes=[8] is not a parameter of reorderer"),
    ("+grid.reorderer_params.hypergraph.preset=fast", "preset must be one of"),
])
def test_bad_reorderer_parameters_are_rejected_before_anything_runs(override, message):
    with pytest.raises(config.ConfigError, match=message.replace("[", r"\[")):
        config.load([*CPU_GRID, "grid.reorderer=[lsh,hypergraph]", override])


def test_the_table2_sweep_runs_each_baseline_alone_and_with_stage2_and_hypergraph_on_four_heads():
    cfg = config.load(["sweep=table2"])
    cells = grid.expand(cfg).cells
    assert grid.count_cells(cfg) == len(cells) == 5 * 9 + 5 * 11
    forty = [c for c in cells if c.inputs.num_heads == 40]
    assert {c.attention.reorderer for c in forty} == {"identity", "wavealign", "minhash", "lsh", "clustering"}
    hypergraph = [c for c in cells if c.attention.reorderer == "hypergraph"]
    assert {c.inputs.num_heads for c in hypergraph} == {4}
    assert {c.attention.stages for c in hypergraph} == {"spatial", "both"}
    assert {c.measurer.measure for c in cells if c.inputs.num_heads == 4} == {"ncu"}
    assert {c.measurer.measure for c in forty} == {"timed"}


def test_invalid_combinations_are_filtered_and_counted_with_their_reason():
    cfg = config.load([*CPU_GRID, "grid.hardware=[cpu,h100]", "grid.measure=[timed,simulated]"])
    g = grid.expand(cfg)
    assert g.filtered == {"measure simulated models a GPU type; hardware cpu has none": 2}
    assert {(c.hardware, c.attention.backend, c.measurer.measure) for c in g.cells} == {
        ("cpu", "reference", "timed"), ("h100", "reference", "timed"), ("h100", "reference", "simulated")}


def test_a_mask_method_on_a_bare_shape_is_filtered():
    cfg = config.load([*CPU_GRID, "grid.method=[planted,xattention]"])
    g = grid.expand(cfg)
    assert g.filtered == {"method xattention needs a model's Q/K; workload shape-2h is a bare shape": 2}


def test_a_sparse_method_on_the_dense_only_backend_is_filtered():
    """sdpa computes every block: beside it in a grid, a sparse method's cells would fail on the worker."""
    cfg = config.load([*CPU_GRID, "grid.backend=[reference,sdpa]", "grid.method=[planted,dense]"])
    g = grid.expand(cfg)
    assert g.filtered == {"backend sdpa computes dense attention only; method planted is sparse": 2}
    assert {(c.attention.backend, c.inputs.method) for c in g.cells} == {("reference", "planted"),
                                                                         ("reference", "dense"),
                                                        ("sdpa", "dense")}


def test_parameter_lists_are_axes_and_scalars_single_values():
    cfg = config.load([*CPU_GRID, "+grid.method_params={planted:{density:[0.1,0.2],prototypes:4}}"])
    cells = grid.expand(cfg).cells
    assert sorted({(c.inputs.method_params["density"], c.inputs.method_params["prototypes"]) for c in cells}) == [
        (0.1, 4), (0.2, 4)]


def test_cell_ids_are_stable_and_distinct():
    first = grid.expand(config.load(CPU_GRID)).cells
    again = grid.expand(config.load(CPU_GRID)).cells
    assert [c.cell_id for c in first] == [c.cell_id for c in again]
    assert len({c.cell_id for c in first}) == len(first)


def test_a_code_change_gives_new_cell_group_and_sweep_ids(monkeypatch):
    from orchestrator import plan
    from wavealign import fingerprint

    cfg = config.load(CPU_GRID)
    before, sweep_before = grid.expand(cfg).cells, plan.sweep_id(cfg)
    monkeypatch.setattr(fingerprint, "code_version", lambda: "0.1.0+another")
    after = grid.expand(cfg).cells
    assert {c.cell_id for c in before}.isdisjoint(c.cell_id for c in after)
    assert {c.group_id for c in before}.isdisjoint(c.group_id for c in after)
    assert plan.sweep_id(cfg) != sweep_before


def test_variants_of_one_mask_share_a_group():
    cells = grid.expand(config.load(CPU_GRID)).cells
    assert len({c.group_id for c in cells}) == 1 and len(cells) == 2


def test_seq_k_maps_to_whole_latent_frames_of_a_preset():
    cfg = config.load([*CPU_GRID, "grid.seq_k=[364]", "grid.method=[xattention]", "grid.backend=[fa4]",
                       "grid.measure=[simulated]", "grid.hardware=[h100]", "grid.workload=[wan14b-720p]",
                       "grid.variant=[original]"])
    cell = grid.expand(cfg).cells[0]
    # Wan2.1 at 720p: 3600 tokens per latent frame; 101 latent frames = 401 pixel frames (paper Table I)
    assert (cell.inputs.seq_len_tokens, cell.inputs.frames, cell.inputs.num_heads) == (363600, 401, 40)


def test_hardware_defaults_fill_block_and_wave_size():
    cfg = config.load([*CPU_GRID, "grid.hardware=[a40]", "grid.backend=[flashinfer]", "grid.measure=[simulated]"])
    cell = grid.expand(cfg).cells[0]
    geometry = cell.attention.geometry
    assert (geometry.block_size, geometry.wave_size) == (64, 168)  # paper Sec. V: FlashInfer 64x64, 2 CTAs x 84 SMs


def test_a_simulated_backend_must_run_on_the_simulated_gpu():
    with pytest.raises(config.ConfigError, match="backend fa4 does not run on a40"):
        grid.expand(config.load(["grid.hardware=[a40]", "grid.backend=[fa4]"]))
    expanded = grid.expand(config.load(["grid.hardware=[a40,h100]", "grid.backend=[fa4]"]))
    fa4 = [c for c in expanded.cells if c.attention.backend == "fa4"]
    assert fa4 and {c.hardware for c in fa4} == {"h100"} and {c.measurer.measure for c in fa4} == {"simulated"}
    assert any("backend fa4 does not run on a40" in reason for reason in expanded.filtered)


def test_the_first_spelling_of_a_simulated_cell_gives_the_cells_of_the_measure_spelling():
    """``backend: [sim]`` with ``backend_params.sim.kernel`` (sweeps written before measurers) still loads: the same
    cells, ids included, as ``backend: [K]`` with ``measure: [simulated]``."""
    first = config.load([*CPU_GRID, "grid.hardware=[a40]", "grid.backend=[sim]",
                         "+grid.backend_params.sim.kernel=[flashinfer,flex]",
                         "+grid.backend_params.sim.row_jitter=0.1"])
    now = config.load([*CPU_GRID, "grid.hardware=[a40]", "grid.backend=[flashinfer,flex]", "grid.measure=[simulated]",
                       "+grid.measure_params.simulated.row_jitter=0.1"])
    ids = [c.cell_id for c in grid.expand(first).cells]
    assert ids == [c.cell_id for c in grid.expand(now).cells] and len(ids) == 4


def test_a_first_spelling_grid_of_sim_beside_real_backends_keeps_both_kinds_of_cells():
    cfg = config.load([*CPU_GRID, "grid.hardware=[h100]", "grid.backend=[reference,sim]",
                       "+grid.backend_params.sim.kernel=fa4"])
    kinds = {(c.attention.backend, c.measurer.measure) for c in grid.expand(cfg).cells}
    assert kinds == {("reference", "timed"), ("fa4", "simulated")}
    assert list(cfg.extra_grids) == ["grid_simulated"]


def test_the_first_spelling_of_nsight_compute_measures_the_timed_cells_with_ncu():
    cfg = config.load([*CPU_GRID, "grid.hardware=[h100]", "grid.backend=[triton]", "grid.ncu=true",
                       "grid.measure=[timed,simulated]"])
    assert {c.measurer.measure for c in grid.expand(cfg).cells} == {"ncu", "simulated"}
