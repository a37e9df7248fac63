"""The sweep config's schema: Hydra structured configs (dataclasses with real types), the one home of every default,
filed in Hydra's ConfigStore as ``sweep_schema`` (``conf/config.yaml``'s first default) when this module is imported.

Hydra checks each value against its field's type as it composes (``grid.reps=three``, a list given one value); a
field's range or choices are its metadata (``bounds``, ``choices``), all held by one loop (``check_fields``).
Importing this costs OmegaConf, Hydra's ConfigStore and the library's torch-free vocabulary (``wavealign.variants``).
Follows Hydra's structured-config tutorial (hydra.cc/docs/tutorials/structured_config/schema).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from orchestrator.run_root import DEFAULT_RUN_ROOT
from wavealign import conf_dir, variants
from wavealign.records import CPU, MAX_SEED, MAX_WAVE_SIZE, STAGES

CONF_DIR = conf_dir()  # the checkout's conf/, or wavealign/conf in an installed wheel
# timed repetitions (or warm-ups) of one cell: 100,000 of the shortest launch (~10 us) is already a second; more is a
# typo that would hold a worker (and its timings' memory) for hours
MAX_REPS = 100_000
# the longest sequence a grid may ask for, in thousands of tokens: ten times the paper's longest (436K); a value past
# it is nearly always tokens typed where thousands were meant, which would fill every worker's memory
MAX_SEQ_K = 4096


class ConfigError(ValueError):
    """A sweep config that cannot run; the message names the key, the value and what was expected."""


def bounds(lo: float, hi: float | None = None, *, above: bool = False) -> dict[str, Any]:
    """A field's metadata: its value (each item of a list field) in [lo, hi] (above ``lo`` where ``above``; no upper
    bound without ``hi``)."""
    return {"range": (lo, hi, above)}


@dataclass
class VariantConfig:
    """A reorder variant (``wavealign.variants``): which WaveAlign stages, and whether the skip policy may veto them."""

    stages: str = field(default="both", metadata={"choices": STAGES})
    # "force" applies ``stages``; "policy" lets the skip policy fall back to "none"; "choose": the order chooser's
    skip: str = field(default="force", metadata={"choices": variants.SKIP_MODES})


def _library_variants() -> dict[str, VariantConfig]:
    """The variants every sweep may name (``wavealign.variants.VARIANTS``; "original" is the baseline every speedup
    refers to); a sweep's ``variants:`` may add its own as ``{name: {stages: spatial, skip: policy}}``."""
    return {name: VariantConfig(v.stages, v.skip) for name, v in variants.VARIANTS.items()}


@dataclass
class GridConfig:
    """One cartesian grid of cells. Lists are axes; ``*_params`` map an entry's name to its own parameter axes."""

    hardware: list[str] = field(default_factory=lambda: [CPU])  # GPU ids, or "cpu" for CPU workers
    backend: list[str] = field(default_factory=lambda: ["reference"])
    # how each cell's launch is measured (wavealign.measurers): timed, simulated (the backend's launch predicted for
    # the hardware by the L2/HBM simulator, on CPU workers), ncu (timed, plus Nsight Compute counters)
    measure: list[str] = field(default_factory=lambda: ["timed"])
    method: list[str] = field(default_factory=lambda: ["planted"])
    workload: list[str] = field(default_factory=lambda: ["shape-2h"])
    seq_k: list[float] = field(default_factory=lambda: [4.0])  # thousands of tokens (nearest valid shape)
    variant: list[str] = field(default_factory=lambda: ["original", "wavealign"])
    # the spatial step of every variant that has one (stages spatial or both): WaveAlign's Stage 1 or a Table II
    # baseline (wavealign.reorderers); variants without one run once, whatever this lists
    reorderer: list[str] = field(default_factory=lambda: ["wavealign"])
    # None: the hardware's wave for the backend; seeds are torch's generator seeds, and an int64 column
    wave_size: list[int | None] = field(default_factory=lambda: [None], metadata=bounds(1, MAX_WAVE_SIZE))
    seed: list[int] = field(default_factory=lambda: [0], metadata=bounds(0, MAX_SEED))
    # e.g. {xattention: {threshold: [0.8, 0.9]}}: each listed value is an axis (a scalar is one value); each entry's
    # keys and types are those its registry entry registers (registry.param_types)
    method_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    backend_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    measure_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    reorderer_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    block_size: int | None = field(default=None, metadata=bounds(1, MAX_SEQ_K * 1000))  # None: the hardware's
    cpu_profile: str = "h100"  # GPU description whose wave size and skip profile "cpu" cells plan for
    reps: int = field(default=5, metadata=bounds(1, MAX_REPS))
    warmup: int = field(default=1, metadata=bounds(0, MAX_REPS))  # calls before the timed reps, the first among them


@dataclass
class RayConfig:
    """Where cells run: an embedded local Ray (address None), ``auto``, or ``ray://host:port``."""

    address: str | None = None  # None: start a local Ray with this machine's CPUs/GPUs; `auto` or ray://host:10001
    num_cpus: int | None = field(default=None, metadata=bounds(1))  # embedded Ray only; None = this machine's
    num_gpus: int | None = field(default=None, metadata=bounds(0))
    object_store_mb: int | None = field(default=None, metadata=bounds(1))
    max_retries: int = field(default=2, metadata=bounds(0))  # a worker dead mid-cell is restarted, the cell retried
    wait_for_nodes: bool = False  # keep cells for absent GPU types waiting instead of unschedulable
    wait_timeout_s: float = field(default=3600.0, metadata=bounds(0, above=True))  # inf waits for ever
    # a worker not up this long after it is started (or back after dying) is dropped: Ray may never place it
    worker_start_timeout_s: float = field(default=300.0, metadata=bounds(0, above=True))
    # build the inputs (mask, Q/K/V) of a worker's next group in the background while its current group is timed
    # (on a stream of their own on a GPU); off by default until it is shown not to move the kernel medians
    prefetch_inputs: bool = False
    # run the driver and the embedded Ray in a network namespace of their own (Linux; `wavealign sweep` only): Ray's
    # servers then listen where no other host, nor this host outside the sweep, can reach them (orchestrator/netns.py);
    # needs a local MLflow store
    private_network: bool = False


@dataclass
class MlflowConfig:
    """MLflow tracking; the default store is ``<run_root>/mlflow.db`` (sqlite)."""

    enabled: bool = True
    tracking_uri: str | None = None  # None: sqlite:///<run_root>/mlflow.db; or http://host:5000
    experiment: str = "wavealign"


@dataclass
class SweepConfig:
    """The whole sweep: ``grid`` plus any ``extra_grids``, where results go, and how to run."""

    name: str = "custom"
    run_root: str = str(DEFAULT_RUN_ROOT)  # its layout: orchestrator.run_root.RunRoot
    grid: GridConfig = field(default_factory=GridConfig)
    extra_grids: dict[str, GridConfig] = field(default_factory=dict)
    variants: dict[str, VariantConfig] = field(default_factory=_library_variants)
    ray: RayConfig = field(default_factory=RayConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    resume: bool = True  # skip cells already done in the dataset
    force: bool = False  # re-run them anyway
    dry_run: bool = False  # print grid size, cells per GPU type, filtered combinations, time estimate
    progress: bool = True
    batch_cells: int = field(default=32, metadata=bounds(1))  # the most cells per Parquet file / MLflow batch
    # your own backends, mask methods, measurers and reorderers: importable modules that register them (on the driver
    # and every worker); the registries are the list of names a grid may use
    plugins: list[str] = field(default_factory=list)
    conf_dirs: list[str] = field(default_factory=list)  # config roots holding workload/ YAMLs (searched after conf/)
    only_cells: list[str] = field(default_factory=list)  # run just these cell ids of the grid (a row's repro command)
    # a larger sweep is refused (and --dry-run only counts it): enumerating millions of cells takes minutes
    max_cells: int = field(default=100_000, metadata=bounds(1))
    overrides: list[str] = field(default_factory=list)  # filled by ``load``: the overrides composed, for repro commands


@dataclass
class WorkloadConfig:
    """``conf/workload/<name>.yaml``: a model preset (Q/K/V from wavealign.workloads), a captured file, or a bare
    shape; ``wavealign.workloads.check_workload`` holds its fields to each other."""

    name: str = "?"
    model: str | None = None  # a wavealign.workloads preset id; None = bare shape with random Q/K/V
    # a wavealign-qkv/1 file (`wavealign capture`): its Q/K/V and length; heads picks some of its heads, model is
    # read from the file, and the grid's seq_k must be one value (the file fixes the length)
    captured: str | None = None
    resolution: str | None = None
    heads: list[int] = field(default_factory=lambda: [0])  # preset heads to take
    num_heads: int = field(default=1, metadata=bounds(1))  # bare shapes
    head_dim: int = field(default=128, metadata=bounds(1))
    layer: int = field(default=0, metadata=bounds(0))
    step: int = 0  # the synthetic generator's denoising step
    # the synthetic generator of a model preset's Q/K/V (wavealign.workloads.GENERATORS: clusters, scene); None: the
    # library's default (wavealign.workloads.DEFAULT_GENERATOR)
    generator: str | None = None


# GridConfig's list fields: the axes whose product is the grid, so an empty one means no cells
AXES = tuple(k for k, kind in typing.get_type_hints(GridConfig).items() if typing.get_origin(kind) is list)
ConfigStore.instance().store(name="sweep_schema", node=SweepConfig)


def check_fields(node: DictConfig, schema: type, where: str = "") -> None:
    """Every field of ``node`` (and of its dataclasses and maps of them) whose ``schema`` field declares a
    ``range`` (lo, hi, above) or ``choices`` holds to it: ``grid.reps=0; expected an integer in [1, 100,000]``,
    ``grid.seed has -1; ...``, ``ray.num_cpus=0; expected null or an integer >= 1``. ``where`` prefixes each key
    (``conf/workload/x.yaml: ``)."""
    hints = typing.get_type_hints(schema)
    for declared in dataclasses.fields(schema):
        kind, value, path = hints[declared.name], node[declared.name], f"{where}{declared.name}"
        if dataclasses.is_dataclass(kind):
            check_fields(value, kind, f"{path}.")
        elif typing.get_origin(kind) is dict and dataclasses.is_dataclass(item := typing.get_args(kind)[1]):
            for name, child in value.items():
                check_fields(child, item, f"{path}.{name}.")
        elif "choices" in declared.metadata and value not in declared.metadata["choices"]:
            raise ConfigError(f"{path}={value!r}; expected one of {declared.metadata['choices']}")
        elif "range" in declared.metadata:
            lo, hi, above = declared.metadata["range"]
            listed = typing.get_origin(kind) is list
            for one in value if listed else [value]:
                if one is not None and (not (lo < one if above else lo <= one) or (hi is not None and one > hi)):
                    nullable = type(None) in typing.get_args(typing.get_args(kind)[0] if listed else kind)
                    if hi is not None:
                        words = f"an integer in [{lo}, {hi:,}]" + (" or null" if nullable else "")
                    else:
                        words = ("null or an integer " if nullable else "") + f"{'>' if above else '>='} {lo}"
                    raise ConfigError(f"{path} has {one!r}; expected {words}" if listed else
                                      f"{path}={one!r}; expected {words}")


class SchemaField(typing.NamedTuple):
    """A key of the schema: its type, the dataclass declaring it (None inside a map of plain values, such as a
    method's parameters), and whether a map's entry lies on its path (``extra_grids.<name>.seed``)."""

    kind: Any
    owner: type | None
    in_map: bool


def schema_field(path: str, schema: type = SweepConfig) -> SchemaField | None:
    """The schema's key at the dotted ``path`` (``extra_grids.cpu.seed`` -> list[int] of GridConfig, in a map;
    ``grid.method_params.xattention`` -> Any); None where a dataclass on the way has no such field."""
    kind: Any = schema
    owner: type | None = None
    in_map = False
    for segment in path.split("."):
        if typing.get_origin(kind) is dict:  # the segment names an entry of the map
            kind, owner, in_map = typing.get_args(kind)[1], None, True
            continue
        if not dataclasses.is_dataclass(kind):
            return SchemaField(Any, None, in_map)
        hints = typing.get_type_hints(kind)
        if segment not in hints:
            return None
        owner, kind = kind, hints[segment]
    return SchemaField(kind, owner, in_map)


def field_default(owner: type, name: str) -> Any:
    """The default value of field ``name`` of dataclass ``owner`` (made by its factory where it has one)."""
    declared = {f.name: f for f in dataclasses.fields(owner)}[name]
    return declared.default if declared.default_factory is dataclasses.MISSING else declared.default_factory()


def key_paths(node: DictConfig | None = None, prefix: str = "") -> list[str]:
    """Every key of a config by its full dotted path (``grid.seq_k``, ``ray.address``): the schema's where ``node``
    is None. An interpolation is not resolved."""
    node = OmegaConf.structured(SweepConfig) if node is None else node
    paths = []
    for key in node:
        paths.append(f"{prefix}{key}")
        if isinstance(child := node._get_node(key), DictConfig):
            paths += key_paths(child, f"{prefix}{key}.")
    return paths
