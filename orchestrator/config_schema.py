"""The sweep config's schema: Hydra structured configs (dataclasses with real types), the one home of every default.

``conf/config.yaml`` names this schema (``sweep_schema``, filed in Hydra's ConfigStore by ``register_schema``) and a
sweep preset; it restates none of the values below. OmegaConf checks each value against its field's type when the
config is composed (``grid.reps=three``, a list given one value, a key no field has), so ``config_validate`` keeps
only the rules a type cannot say: ranges, names the registries know, and rules across fields.

Importing this module costs OmegaConf and Hydra's ConfigStore only: the library's variants (which import torch) are
read when the schema is filed, after what the schema alone refuses (``config_compose.check_override``).
Follows Hydra's structured-config tutorial (hydra.cc/docs/tutorials/structured_config/schema).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore

from wavealign import conf_dir
from wavealign.records import CPU

CONF_DIR = conf_dir()  # the checkout's conf/, or wavealign/conf in an installed wheel


class ConfigError(ValueError):
    """A sweep config that cannot run; the message names the key, the value and what was expected."""


@dataclass
class VariantConfig:
    """A reorder variant (``wavealign.variants``): which WaveAlign stages, and whether the skip policy may veto them."""

    stages: str = "both"
    skip: str = "force"  # "force" applies ``stages``; "policy" lets wavealign.skip fall back to "none"


def _library_variants() -> dict[str, VariantConfig]:
    """The variants every sweep may name: ``wavealign.variants.VARIANTS`` ("original" is the baseline every speedup
    refers to); a sweep's ``variants:`` may add its own as ``{name: {stages: spatial, skip: policy}}``."""
    from wavealign import variants

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
    wave_size: list[int | None] = field(default_factory=lambda: [None])  # None: the hardware's wave for the backend
    seed: list[int] = field(default_factory=lambda: [0])
    # e.g. {xattention: {threshold: [0.8, 0.9]}}: each listed value is an axis (a scalar is one value); each entry's
    # keys and types are its registry entry's (config_params)
    method_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    backend_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    measure_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    reorderer_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    block_size: int | None = None  # None: the hardware's default block size
    cpu_profile: str = "h100"  # GPU description whose wave size and skip profile "cpu" cells plan for
    reps: int = 5
    warmup: int = 1  # calls before the timed reps; the first call (timed apart: first_call_ms) is one of them


@dataclass
class RayConfig:
    """Where cells run: an embedded local Ray (address None), ``auto``, or ``ray://host:port``."""

    address: str | None = None  # None: start a local Ray with this machine's CPUs/GPUs; `auto` or ray://host:10001
    num_cpus: int | None = None  # embedded Ray only; None = this machine's
    num_gpus: int | None = None
    object_store_mb: int | None = None
    max_retries: int = 2  # a worker that dies mid-cell is restarted and the cell retried this often
    wait_for_nodes: bool = False  # keep cells for absent GPU types waiting instead of unschedulable
    wait_timeout_s: float = 3600.0
    # a worker not up this long after it is started (or back after dying) is dropped: Ray may never place it
    worker_start_timeout_s: float = 300.0
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
    run_root: str = "wavealign-runs"  # mlflow.db (sqlite), results/ (Parquet) and sweeps/ land here
    grid: GridConfig = field(default_factory=GridConfig)
    extra_grids: dict[str, GridConfig] = field(default_factory=dict)
    variants: dict[str, VariantConfig] = field(default_factory=_library_variants)
    ray: RayConfig = field(default_factory=RayConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    resume: bool = True  # skip cells already done in the dataset
    force: bool = False  # re-run them anyway
    dry_run: bool = False  # print grid size, cells per GPU type, filtered combinations, time estimate
    progress: bool = True
    batch_cells: int = 32  # at most this many cells per Parquet file / MLflow batch (each finished group is written)
    # your own backends, mask methods, measurers and reorderers: importable modules that register them (on the driver
    # and every worker); the registries are the list of names a grid may use
    plugins: list[str] = field(default_factory=list)
    conf_dirs: list[str] = field(default_factory=list)  # config roots holding workload/ YAMLs (searched after conf/)
    only_cells: list[str] = field(default_factory=list)  # run just these cell ids of the grid (a row's repro command)
    # a larger sweep is refused (and --dry-run only counts it): enumerating millions of cells takes minutes
    max_cells: int = 100_000
    overrides: list[str] = field(default_factory=list)  # filled by ``load``: the overrides composed, for repro commands


@dataclass
class WorkloadConfig:
    """``conf/workload/<name>.yaml``: a model preset (Q/K/V from wavealign.workloads), a captured file, or a bare
    shape."""

    name: str = "?"
    model: str | None = None  # a wavealign.workloads preset id; None = bare shape with random Q/K/V
    # a wavealign-qkv/1 file (`wavealign capture`): its Q/K/V and length; heads picks some of its heads, model is
    # read from the file, and the grid's seq_k must be one value (the file fixes the length)
    captured: str | None = None
    resolution: str | None = None
    heads: list[int] = field(default_factory=lambda: [0])  # preset heads to take
    num_heads: int = 1  # bare shapes
    head_dim: int = 128
    layer: int = 0
    step: int = 0  # the synthetic generator's denoising step
    # the synthetic generator of a model preset's Q/K/V (wavealign.workloads.GENERATORS: clusters, scene); None: the
    # library's default (wavealign.workloads.DEFAULT_GENERATOR)
    generator: str | None = None


# GridConfig's list fields: the axes whose product is the grid, so an empty one means no cells
AXES = tuple(k for k, kind in typing.get_type_hints(GridConfig).items() if typing.get_origin(kind) is list)


def register_schema() -> None:
    """File the schema in Hydra's ConfigStore as ``sweep_schema`` (``conf/config.yaml``'s first default)."""
    ConfigStore.instance().store(name="sweep_schema", node=SweepConfig)


class SchemaField(typing.NamedTuple):
    """A key of the schema: its type, the dataclass declaring it (None inside a map of plain values, such as a
    method's parameters), and whether a map's entry lies on its path (``extra_grids.<name>.seed``)."""

    kind: Any
    owner: type | None
    in_map: bool


def schema_field(path: str, schema: type = SweepConfig) -> SchemaField | None:
    """The schema's key at the dotted ``path`` (``ray.prefetch_inputs`` -> bool of RayConfig;
    ``extra_grids.cpu.seed`` -> list[int] of GridConfig, in a map; ``grid.method_params.xattention`` -> Any: the
    composed config decides whether it is there); None where a dataclass on the way has no such field."""
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
    if declared.default_factory is not dataclasses.MISSING:
        return declared.default_factory()
    return declared.default


def key_paths(schema: type = SweepConfig, prefix: str = "") -> list[str]:
    """The full dotted path of every key the schema declares (``grid.seq_k``, ``ray.address``), read from its
    dataclasses, so without composing; the entries of its maps (a preset's ``extra_grids``, a method's parameters)
    are a composed config's (``config_compose.config_paths``)."""
    paths = []
    for key, kind in typing.get_type_hints(schema).items():
        paths.append(f"{prefix}{key}")
        if dataclasses.is_dataclass(kind):
            paths += key_paths(kind, f"{prefix}{key}.")
    return paths


# how a message names what a field of each type takes, one value and several
_ONE = {bool: "true or false", int: "an integer", float: "a number", str: "a text"}
_SEVERAL = {bool: "switches", int: "integers", float: "numbers", str: "names"}


def expected(hint: Any) -> str:
    """What a field of type ``hint`` takes, in a message's words: ``int | None`` -> "an integer or null",
    ``list[float]`` -> "a list of numbers"."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is list:
        return f"a list of {plural(args[0])}"
    nullable = type(None) in args
    base = next(a for a in args if a is not type(None)) if nullable else hint
    return _ONE.get(base, "a value") + (" or null" if nullable else "")


def plural(hint: Any) -> str:
    """Several values of type ``hint``: "numbers", "integers" (null left out)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return _SEVERAL.get(args[0] if args else hint, "values")
