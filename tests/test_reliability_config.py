"""Issue 19, item 3: a sweep config that cannot run as meant is a ``ConfigError`` naming the key, before anything
runs (rows 3-8 of the fault table): keys added with ``+``, empty axes, non-finite numbers, a backend its hardware
cannot run, undeclared or out-of-range parameters, and grids too large to enumerate."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from jobs import cli
from jobs import sweep as sweep_job
from orchestrator import config, grid, plan
from wavealign import kernels, masks

# a small CPU-only grid (2 cells) the cases start from
CPU_GRID = ["~sweep", "grid.hardware=[cpu]", "grid.backend=[reference]", "grid.method=[planted]",
            "grid.workload=[shape-2h]", "grid.seq_k=[1]", "grid.variant=[original,wavealign]"]
SHIPPED_SWEEPS = sorted(p.stem for p in (Path(config.CONF_DIR) / "sweep").glob("*.yaml"))


def rejected(overrides: list[str], message: str) -> None:
    """``config.load(overrides)`` raises a ConfigError containing ``message`` verbatim."""
    with pytest.raises(config.ConfigError, match=re.escape(message)):
        config.load(overrides)


# row 3: keys the schema lacks, added with "+"

@pytest.mark.parametrize(("overrides", "message"), [
    ([*CPU_GRID, "+grid.seeds=[0,1,2]"], "grid.seeds=[0, 1, 2] is not a sweep config key; did you mean grid.seed?"),
    ([*CPU_GRID, "+bogus_key=1"], "bogus_key=1 is not a sweep config key; expected one of ["),
    ([*CPU_GRID, "+ray._target_=os.system"], "ray._target_='os.system' is not a sweep config key; expected one of ["),
    ([*CPU_GRID, "+mlflow.enable=false"],
     "mlflow.enable=False is not a sweep config key; did you mean mlflow.enabled?"),
    (["+extra_grids.cpu_reference.seeds=[1]"],
     "extra_grids.cpu_reference.seeds=[1] is not a sweep config key; did you mean extra_grids.cpu_reference.seed?"),
], ids=["grid.seeds", "bogus_key", "ray._target_", "mlflow.enable", "extra_grids.cpu_reference.seeds"])
def test_a_key_added_with_plus_that_the_schema_lacks_is_rejected_naming_its_path(overrides, message):
    rejected(overrides, message)


def test_parameter_maps_take_the_names_of_the_grids_methods_and_backends():
    cfg = config.load(["+grid.method_params.planted.noise=[0.01,0.03]"])
    assert list(cfg.grid.method_params.planted.noise) == [0.01, 0.03]


# row 4: an empty axis makes no cells

@pytest.mark.parametrize("axis", ["hardware", "backend", "method", "workload", "seq_k", "variant", "wave_size", "seed"])
def test_an_empty_grid_axis_is_rejected_naming_it(axis):
    rejected([*CPU_GRID, f"grid.{axis}=[]"], f"grid.{axis}=[] is empty; expected at least one value")


@pytest.mark.parametrize(("overrides", "message"), [
    (["extra_grids.cpu_reference.seed=[]"], "extra_grids.cpu_reference.seed=[] is empty"),
    ([*CPU_GRID, "+grid.method_params.planted.density=[]"], "grid.method_params.planted.density=[] is empty"),
], ids=["extra_grid_axis", "parameter_axis"])
def test_an_empty_axis_of_an_extra_grid_or_a_parameter_is_rejected_naming_it(overrides, message):
    rejected(overrides, message)


# row 5: NaN and infinity

@pytest.mark.parametrize(("override", "message"), [
    ("grid.seq_k=[nan]", "grid.seq_k has nan; expected positive, finite thousands of tokens"),
    ("grid.seq_k=[1,inf]", "grid.seq_k has inf; expected positive, finite thousands of tokens"),
    ("grid.wave_size=[inf]", "grid.wave_size has inf; expected an integer or null"),
    ("+grid.method_params.planted.density=[0.1,nan]", "grid.method_params.planted.density has nan; expected a finite"),
    ("+grid.method_params.planted.prototypes=inf",
     "grid.method_params.planted.prototypes: expected an integer, got inf"),
    ("ray.wait_timeout_s=nan", "ray.wait_timeout_s=nan; expected > 0"),
], ids=["seq_k_nan", "seq_k_inf", "wave_size_inf", "density_nan", "prototypes_inf", "wait_timeout_s_nan"])
def test_a_non_finite_number_is_rejected_naming_the_key(override, message):
    rejected([*CPU_GRID, override], message)


def test_a_length_typed_in_tokens_instead_of_thousands_is_rejected_with_the_likely_value():
    rejected([*CPU_GRID, "grid.seq_k=[148,364000]"],
             "grid.seq_k has 364000: 364,000,000 tokens, more than 4,096,000 (seq_k counts thousands of tokens: 364 "
             "is 364,000; did you mean 364?)")
    assert grid.count_cells(config.load([*CPU_GRID, "grid.seq_k=[4096]"])) > 0  # the bound itself is allowed


def test_a_non_finite_backend_parameter_is_rejected_naming_the_key():
    rejected([*CPU_GRID, "grid.hardware=[h100]", "grid.backend=[triton]", "+grid.backend_params.triton.block_m=[nan]"],
             "grid.backend_params.triton.block_m has nan; expected a finite number")


# row 6: a backend its grid's hardware cannot run

def supports(backend: str) -> str:
    return f"(supports {list(kernels.get(backend).supported_hardware)})"


@pytest.mark.parametrize(("overrides", "message"), [
    (["grid.hardware=[a40]", "grid.backend=[fa4]"],
     f"grid.backend 'fa4' cannot run on any of grid.hardware ['a40']: backend fa4 does not run on a40 "
     f"{supports('fa4')}"),
    (["extra_grids.sim_a40.backend=[fa4]"],
     f"extra_grids.sim_a40.backend 'fa4' cannot run on any of extra_grids.sim_a40.hardware ['a40']: backend fa4 does "
     f"not run on a40 {supports('fa4')}"),
], ids=["grid", "extra_grid"])
def test_a_backend_its_hardware_cannot_run_is_named_with_the_grid_hardware_and_what_it_supports(overrides, message):
    rejected(overrides, message)


def test_a_preset_s_parameters_of_a_backend_the_command_line_replaced_are_dropped():
    """The sweep preset tunes flashinfer's head order; replacing the backend on the command line drops those
    params."""
    cfg = config.load(["sweep=paper_a40", "grid.backend=[triton]"])
    assert list(cfg.grid.backend) == ["triton"] and "flashinfer" not in cfg.grid.backend_params
    assert config.load(["sweep=paper_a40", "grid.backend=[triton]",
                        "~grid.backend_params.flashinfer"]).grid.backend == ["triton"]


def test_parameters_the_command_line_gives_for_a_backend_the_grid_does_not_run_are_named_with_how_to_drop_them():
    rejected(["grid.backend=[fa4]", "+grid.backend_params.flex.BLOCK_M=64"],
             "grid.backend_params.flex: backend 'flex' is not in grid.backend ['fa4']; expected parameters of a "
             "backend the grid runs (add 'flex' to grid.backend, or drop these with ~grid.backend_params.flex)")


# row 7: parameters a method or backend does not declare, and out-of-range values

@pytest.mark.parametrize(("overrides", "message"), [
    ([*CPU_GRID, "+grid.backend_params.reference.foo=[1]"],
     "grid.backend_params.reference.foo=[1] is not a parameter of backend 'reference'; expected none: "
     "backend 'reference' declares no params"),
    ([*CPU_GRID, "grid.hardware=[h100]", "grid.backend=[fa4]", "+grid.backend_params.fa4.foo=[1]"],
     "grid.backend_params.fa4.foo=[1] is not a parameter of backend 'fa4'; expected none"),
    ([*CPU_GRID, "grid.method=[dense]", "+grid.method_params.dense.density=0.5"],
     "grid.method_params.dense.density=0.5 is not a parameter of method 'dense'; expected none"),
    (["+grid.measure_params.simulated.row_jiter=0.1"],
     "grid.measure_params.simulated.row_jiter=0.1 is not a parameter of measure 'simulated'; expected one of "
     "['l2_partitions', 'row_jitter', 'seed']; did you mean row_jitter?"),
], ids=["reference", "fa4", "dense", "measure_typo"])
def test_a_parameter_its_module_does_not_declare_is_rejected_when_the_config_loads(overrides, message):
    rejected(overrides, message)


def test_a_backend_that_passes_any_option_through_takes_undeclared_options():
    """flex declares no params, but hands any kernel_options to FlexAttention."""
    cfg = config.load([*CPU_GRID, "grid.hardware=[h100]", "grid.backend=[flex]",
                       "+grid.backend_params.flex.BLOCK_M=64"])
    assert {c.attention.backend_params["BLOCK_M"] for c in grid.expand(cfg).cells} == {64}


@pytest.mark.parametrize(("method", "param", "value", "expected"), [
    ("planted", "density", "2.0", "(0.0, 1.0]"),
    ("random", "density", "0", "(0.0, 1.0]"),
    ("random-fixed-nnz", "nnz_spread", "1.0", "[0.0, 1.0)"),
    ("planted", "noise", "0.5", "[0.0, 0.5)"),
    ("xattention", "threshold", "1.5", "(0.0, 1.0]"),
    ("flexprefill", "gamma", "-0.1", "(0.0, 1.0]"),
    ("flexprefill", "tau", "1.1", "[0.0, 1.0]"),
    ("spargeattn", "simthreshd1", "-2", "[-1.0, 1.0]"),
    ("minference", "budget", "2", "(0.0, 1.0]"),
], ids=lambda v: str(v))
def test_an_out_of_range_method_parameter_is_rejected_naming_the_key(method, param, value, expected):
    message = re.escape(f"grid.method_params.{method}.{param} has ") + ".*" + re.escape(
        f": {param} must be a number in {expected}")
    with pytest.raises(config.ConfigError, match=message):
        config.load([*CPU_GRID, f"grid.method=[{method}]", f"+grid.method_params.{method}.{param}=[0.5,{value}]"])


@pytest.mark.parametrize(("method", "param", "value", "spelled"), [
    ("planted", "density", 1.0, "1.0"), ("planted", "noise", 0, "0"), ("minference", "budget", None, "null")])
def test_a_method_parameter_at_the_edge_of_its_range_or_null_passes_and_reaches_the_cells(method, param, value,
                                                                                          spelled):
    # a model workload, so that the Q/K method's cells are not filtered out of the bare-shape grid
    cfg = config.load([*CPU_GRID, "grid.method=[planted,minference]", "grid.workload=[wan1.3b-480p-2h]",
                       f"+grid.method_params.{method}.{param}={spelled}"])
    cells = [c for c in grid.expand(cfg).cells if c.inputs.method == method]
    assert cells and all(param in c.inputs.method_params and c.inputs.method_params[param] == value for c in cells)


@pytest.mark.parametrize("method", [m for m in masks.available() if masks.get(m).checks])
def test_every_checked_method_parameter_is_checked_by_the_config_as_by_the_build(method):
    """The config holds the method's params to its schema and runs its own checks: a value either refuses stops
    the config naming the grid key (the schema's type first: a text where a number goes), and the same value stops
    a build on Q/K naming the param."""
    q = torch.randn(1, 1, 64, 16)
    for param in masks.get(method).checks:
        bad = "" if param == "path" else "x"  # a path is any non-empty string; every other checked param a number
        refused = rf"(: expected .*, got {re.escape(repr(bad))}$| has {re.escape(repr(bad))}: {param} must )"
        with pytest.raises(config.ConfigError, match=re.escape(f"grid.method_params.{method}.{param}") + refused):
            config.load([*CPU_GRID, f"grid.method=[{method}]", f"+grid.method_params.{method}.{param}='{bad}'"])
        if masks.get(method).build is not None:  # the file method only reads a saved mask for a shape
            with pytest.raises(ValueError, match=f"{param} must"):
                masks.build_ordered(method, q, q, q, block_size=16, **{param: bad})


# row 8: grids too large to enumerate

@pytest.mark.parametrize("sweep", SHIPPED_SWEEPS)
def test_the_cell_count_from_the_axes_is_the_number_of_cells_expanded(sweep):
    cfg = config.load([f"sweep={sweep}"])
    assert grid.count_cells(cfg) == len(grid.expand(cfg).cells)


def test_the_cell_count_leaves_out_filtered_combinations():
    cfg = config.load([*CPU_GRID, "grid.hardware=[cpu,h100]", "grid.backend=[reference,sim]",
                       "grid.method=[planted,xattention]", "+grid.method_params.planted.density=[0.1,0.2]"])
    expanded = grid.expand(cfg)
    assert grid.count_cells(cfg) == len(expanded.cells) == 12 and expanded.filtered


def test_a_sweep_larger_than_max_cells_is_refused_naming_the_count_and_the_key():
    cfg = config.load([*CPU_GRID, "grid.seed=[0,1,2,3,4,5]", "max_cells=10"])
    with pytest.raises(config.ConfigError, match=re.escape("the sweep has 12 cells (its grids' axes multiplied), "
                                                           "more than max_cells=10")):
        plan.make_plan(cfg)


def test_a_run_larger_than_max_cells_exits_2_before_touching_the_run_root(tmp_path, capsys):
    root = tmp_path / "runs"
    rc = cli.main(["sweep", *CPU_GRID, "grid.seed=[0,1,2,3,4,5]", "max_cells=10", f"run_root={root}"])
    assert rc == 2 and not root.exists()
    assert "the sweep has 12 cells (its grids' axes multiplied), more than max_cells=10" in capsys.readouterr().err


def test_raising_max_cells_lets_the_sweep_plan():
    cfg = config.load([*CPU_GRID, "grid.seed=[0,1,2,3,4,5]", "max_cells=12", "resume=false"])
    assert len(plan.make_plan(cfg).pending) == 12


def test_max_cells_must_be_positive():
    rejected([*CPU_GRID, "max_cells=0"], "max_cells=0; expected >= 1")


def test_a_dry_run_larger_than_max_cells_prints_the_count_and_a_warning_without_enumerating(monkeypatch, capsys):
    def enumerate_nothing(*args, **kwargs):
        raise AssertionError("a sweep above max_cells was enumerated")

    monkeypatch.setattr(grid, "expand", enumerate_nothing)
    monkeypatch.setattr(plan, "expand", enumerate_nothing)
    seq_k = ",".join(str(k) for k in range(1, 1001))
    seeds = ",".join(str(s) for s in range(2000))
    rc = sweep_job.main(["--dry-run", *CPU_GRID, f"grid.seq_k=[{seq_k}]", f"grid.seed=[{seeds}]"])
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 0
    assert "4000000 cells, counted from the grids' axes" in out
    assert "warning: 4000000 cells is more than max_cells=100000" in out


# where the sweep connects and writes: checked before Ray starts or anything is written

@pytest.mark.parametrize("address", ["htp://head:6379", "6379", "head", "ray://", "auto "])
def test_a_malformed_ray_address_is_named_with_the_forms_ray_takes(address):
    rejected([*CPU_GRID, f"ray.address='{address}'"], f"ray.address={address!r}; expected null")


@pytest.mark.parametrize("address", ["auto", "local", "10.0.0.5:6379", "head-node:6379", "ray://head:10001",
                                     "ray://head", "[::1]:6379", "ray://[fd00::5]:10001"])
def test_the_ray_addresses_ray_takes_pass(address):
    assert config.load([*CPU_GRID, f"ray.address='{address}'"]).ray.address == address  # quoted: [ ] and : are grammar


def test_an_integer_ray_address_is_refused():
    rejected([*CPU_GRID, "ray.address=6379"], "ray.address='6379'; expected null")


@pytest.mark.parametrize("uri", ["htp:/localhost:5000", "sqlit:///x.db", ""])
def test_a_tracking_uri_mlflow_cannot_store_under_is_named(uri):
    rejected([*CPU_GRID, f"mlflow.tracking_uri='{uri}'"], f"mlflow.tracking_uri={uri!r}; expected null")


@pytest.mark.parametrize("uri", ["sqlite:////tmp/x/mlflow.db", "http://127.0.0.1:5000", "https://mlflow.example.org",
                                 "file:///tmp/mlruns", "/tmp/mlruns", "postgresql+psycopg2://u@db/mlflow"])
def test_the_tracking_uris_mlflow_takes_pass(uri):
    assert config.load([*CPU_GRID, f"mlflow.tracking_uri='{uri}'"]).mlflow.tracking_uri == uri


def test_a_run_root_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "results.txt").write_text("not a folder")
    rejected([*CPU_GRID, f"run_root={tmp_path / 'results.txt'}"], "results.txt' is a file; expected a folder")


# a backend's launch options: its own checks run on every combination before any cell is built

@pytest.mark.parametrize(("overrides", "message"), [
    (["+grid.backend_params.triton.head_order=bogus"],
     "grid.backend 'triton' with {'head_order': 'bogus'} and block_size 128: head_order must be one of"),
    (["+grid.backend_params.triton.num_warps=[8,abc]"], "num_warps must be an integer, got 'abc'"),
    (["+grid.backend_params.triton.num_warps=3"], "num_warps must be 1, 2, 4, 8 or 16, got 3"),
    (["+grid.backend_params.triton.block_m=[64,48]"], "block_m must be a power of two >= 16 dividing block_size=128"),
    (["grid.block_size=96"], "and block_size 96: block_m must be a power of two >= 16 dividing block_size=96"),
    (["+grid.backend_params.triton.use_tma=1"], "use_tma must be true or false, got 1"),
])
def test_a_triton_launch_option_its_planner_would_refuse_stops_the_sweep_at_config_time(overrides, message):
    rejected(["~sweep", "grid.hardware=[h200]", "grid.backend=[triton]", "grid.workload=[shape-2h]", *overrides],
             message)


@pytest.mark.parametrize(("backend", "override", "message"), [
    ("flashinfer", "+grid.backend_params.flashinfer.head_order=heads_first", "head_order must be one of"),
    ("sdpa", "+grid.backend_params.sdpa.kernel=fast", "sdpa kernel='fast'; expected one of"),
])
def test_other_backends_launch_options_are_checked_at_config_time(backend, override, message):
    rejected(["~sweep", "grid.hardware=[h200]", f"grid.backend=[{backend}]", "grid.workload=[shape-2h]", override],
             message)


def test_the_launch_options_a_planner_takes_pass_at_every_block_size_the_grid_gives():
    cfg = config.load(["~sweep", "grid.hardware=[h200]", "grid.backend=[triton]", "grid.workload=[shape-2h]",
                       "grid.block_size=64", "+grid.backend_params.triton.block_m=[32,64]",
                       "+grid.backend_params.triton.num_warps=4", "+grid.backend_params.triton.use_tma=false"])
    assert list(cfg.grid.backend_params.triton.block_m) == [32, 64]


@pytest.mark.parametrize(("override", "hint"), [
    ("grid.hardwre=[cpu]", "; did you mean grid.hardware=[cpu]?"),
    ("ray.adress=auto", "; did you mean ray.address=auto?"),
    ("grid.method_params.planted.densty=0.5", "; did you mean grid.method_params.planted.density=0.5?"),
    ("grid.seq_k=148", ": a grid axis is a list; expected grid.seq_k=[148]"),
    ("grid.method_params.xattention.threshold=0.5",
     "; to give some, add them: +grid.method_params.xattention.threshold=0.5"),
])
def test_an_override_hydra_cannot_apply_comes_with_what_to_type_instead(override, hint):
    rejected([override], hint)


def test_a_negative_seed_is_refused_at_config_time():
    rejected([*CPU_GRID, "grid.seed=[0,-1]"], "grid.seed has -1; expected an integer in [0, ")


# issue 32, items 12-15: the baseline fixed, numbers checked whole, deleted keys, the other gaps

@pytest.mark.parametrize(("override", "message"), [
    ("variants.original.stages=both", "variants.original: stages='both', skip='force'; 'original' is the baseline "
                                      "every speedup refers to (stages 'none', skip 'force') and is fixed"),
    ("variants.wavealign.skip=policy", "'wavealign' is a variant of the library (stages 'both', skip 'force')"),
    ("grid.seed=[99999999999999999999]", "grid.seed has 99999999999999999999; expected an integer in [0, "
                                         "9,223,372,036,854,775,807]"),
    ("grid.block_size=true", "grid.block_size=true: expected an integer or null"),
    ("grid.block_size=0", "grid.block_size=0; expected an integer in [1, 4,096,000] or null"),
    ("grid.reps=1000000000", "grid.reps=1000000000; expected an integer in [1, 100,000]"),
    ("grid.warmup=1000000000", "grid.warmup=1000000000; expected an integer in [0, 100,000]"),
    ("grid.wave_size=[1000000000000]", "grid.wave_size has 1000000000000; expected an integer in [1, 2,147,483,647] "
                                       "or null"),
    ("+grid.method_params.planted.prototypes=1000000000",
     "grid.method_params.planted.prototypes has 1000000000: prototypes must be >= 1 and <= 4096"),
    ("~extra_grids", "~extra_grids: extra_grids cannot be deleted; expected it set (none: extra_grids={})"),
    ("~grid", "~grid: grid cannot be deleted; expected it set"),
    ("~ray", "~ray: ray cannot be deleted"), ("~mlflow", "~mlflow: mlflow cannot be deleted"),
    ("~variants", "~variants: variants cannot be deleted"), ("~run_root", "~run_root: run_root cannot be deleted"),
    ("mlflow.experiment=", "mlflow.experiment=''; expected the name of an MLflow experiment"),
    ("run_root=", "run_root=''; expected a folder of the sweep's own"),
    ("run_root=/", "run_root='/'; expected a folder of the sweep's own"),
    ("conf_dirs=[/nonexistent]", "conf_dirs has '/nonexistent', which is not a folder"),
])
def test_a_config_that_would_fail_later_or_mean_something_else_is_refused_when_it_loads(override, message):
    rejected([*CPU_GRID, override], message)


def test_an_empty_extra_grids_runs_the_grid_alone():
    base = ["grid.hardware=[cpu]", "grid.backend=[reference]", "grid.measure=[timed]", "grid.method=[random]",
            "grid.workload=[shape-2h]", "grid.seq_k=[1]", "grid.variant=[original,wavealign]"]
    assert grid.count_cells(config.load(base)) > 2
    assert grid.count_cells(config.load([*base, "extra_grids={}"])) == 2
