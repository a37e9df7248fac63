"""The sweep's structured config (Hydra 1.3): schema dataclasses, composition from ``conf/``, validation.

``load(overrides)`` composes ``conf/config.yaml`` with Hydra-style overrides
(``sweep=paper_h100 grid.seq_k=[148,364] ray.address=auto``) against the dataclasses below, so a typo'd
key fails at composition (one added with ``+`` fails in ``check_keys``); ``validate`` then checks every name
against the project's registries, every method and backend parameter against its YAML, and every number against
its range, before anything runs. Errors are ``ConfigError`` naming the offender.

Importing this module costs Hydra and OmegaConf only: the library's registries (which import torch) are imported
where a config is composed or validated, so that an override the schema alone refuses (``check_override``: a key
it lacks, a value of the wrong type) and a flag's respelling (``key_paths``) answer in a fraction of a second.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import itertools
import math
import os
import re
import typing
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from wavealign import conf_dir, registry
from wavealign import hardware as hardware_registry
from wavealign.orchestrator.redact import redact, redact_tree
from wavealign.records import CPU, ORIGINAL_VARIANT

CONF_DIR = conf_dir()  # the checkout's conf/, or wavealign/conf in an installed wheel
# timed repetitions (or warm-ups) of one cell: each keeps its time, and 100,000 of the shortest launch (~10 us) is
# already a second; more is a typo that would hold a worker (and its timings' memory) for hours
MAX_REPS = 100_000
# The longest sequence a grid may ask for, in thousands of tokens: ten times the paper's longest (436K); a value
# past it is nearly always tokens typed where thousands were meant, which would fill every worker's memory
MAX_SEQ_K = 4096


class ConfigError(ValueError):
    """A sweep config that cannot run; the message names the key, the value and what was expected."""


@dataclass
class VariantConfig:
    """A reorder variant (``wavealign.variants``): which WaveAlign stages, and whether the skip policy may veto them."""

    stages: str = "both"
    skip: str = "force"  # "force" applies ``stages``; "policy" lets wavealign.skip fall back to "none"


def _library_variants() -> dict[str, VariantConfig]:
    """The variants every sweep may name: ``wavealign.variants.VARIANTS`` (a sweep's ``variants:`` may add more)."""
    from wavealign import variants

    return {name: VariantConfig(v.stages, v.skip) for name, v in variants.VARIANTS.items()}


@dataclass
class GridConfig:
    """One cartesian grid of cells. Lists are axes; ``*_params`` map a name to its own parameter axes."""

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
    wave_size: list[Any] = field(default_factory=lambda: [None])  # None: the hardware's wave for the backend
    seed: list[int] = field(default_factory=lambda: [0])
    # e.g. {xattention: {threshold: [0.8, 0.9]}}: each listed value is an axis (a scalar is one value)
    method_params: dict[str, Any] = field(default_factory=dict)
    backend_params: dict[str, Any] = field(default_factory=dict)
    measure_params: dict[str, Any] = field(default_factory=dict)
    reorderer_params: dict[str, Any] = field(default_factory=dict)
    block_size: Any = None  # None: the hardware's default block size
    cpu_profile: str = "h100"  # GPU description whose wave size and skip profile "cpu" cells plan for
    reps: int = 5
    warmup: int = 1  # calls before the timed reps; the first call (timed apart: first_call_ms) is one of them
    ncu: bool = False  # the first spelling of measure ncu: true measures the grid's timed cells with ncu instead


@dataclass
class RayConfig:
    """Where cells run: an embedded local Ray (address None), ``auto``, or ``ray://host:port``."""

    address: Any = None
    num_cpus: Any = None  # embedded Ray only; None = this machine's
    num_gpus: Any = None
    object_store_mb: Any = None
    max_retries: int = 2  # a worker that dies mid-cell is restarted and the cell retried this often
    wait_for_nodes: bool = False  # keep cells for absent GPU types waiting instead of unschedulable
    wait_timeout_s: float = 3600.0
    # a worker not up this long after it is started (or back after dying) is dropped: Ray may never place it
    worker_start_timeout_s: float = 300.0
    # build the inputs (mask, Q/K/V) of a worker's next group in the background while its current group is timed
    # (on a stream of their own on a GPU); off by default until it is shown not to move the kernel medians
    prefetch_inputs: bool = False
    # run the driver and the embedded Ray in a network namespace of their own (Linux; `wavealign sweep` only): Ray's
    # servers then listen where no other host, nor this host outside the sweep, can reach them (orchestrator/netns.py)
    private_network: bool = False


@dataclass
class MlflowConfig:
    """MLflow tracking; the default store is ``<run_root>/mlflow.db`` (sqlite)."""

    enabled: bool = True
    tracking_uri: Any = None
    experiment: str = "wavealign"


@dataclass
class SweepConfig:
    """The whole sweep: ``grid`` plus any ``extra_grids``, where results go, and how to run."""

    name: str = "custom"
    run_root: str = "wavealign-runs"
    grid: GridConfig = field(default_factory=GridConfig)
    extra_grids: dict[str, GridConfig] = field(default_factory=dict)
    variants: dict[str, VariantConfig] = field(default_factory=_library_variants)
    ray: RayConfig = field(default_factory=RayConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    resume: bool = True  # skip cells already done in the dataset
    force: bool = False  # re-run them anyway
    dry_run: bool = False
    progress: bool = True
    batch_cells: int = 32  # at most this many cells per Parquet file / MLflow batch (each finished group is written)
    # your own backends and mask methods: importable modules that register them (on the driver and every worker),
    # and config roots holding their backend/ and method/ YAMLs (searched after conf/)
    plugins: list[str] = field(default_factory=list)
    conf_dirs: list[str] = field(default_factory=list)
    only_cells: list[str] = field(default_factory=list)  # run just these cell ids of the grid (a row's repro command)
    # a larger sweep is refused (and --dry-run only counts it): enumerating millions of cells takes minutes
    max_cells: int = 100_000
    overrides: list[str] = field(default_factory=list)  # filled by ``load``: the overrides composed, for repro commands


@dataclass
class NamedConfig:
    """The form of ``conf/method``, ``conf/backend``, ``conf/measure`` and ``conf/reorderer`` entries: the name, and
    values for some of the parameters the entry's module declares (``declared_params``)."""

    name: str = "?"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class WorkloadConfig:
    """``conf/workload/<name>.yaml``: a model preset (Q/K/V from wavealign.workloads), a captured file, or a bare
    shape."""

    name: str = "?"
    model: Any = None  # a wavealign.workloads preset id; None = bare shape with random Q/K/V
    # a wavealign-qkv/1 file (`wavealign capture`): its Q/K/V and length; heads picks some of its heads, model is
    # read from the file, and the grid's seq_k must be one value (the file fixes the length)
    captured: Any = None
    resolution: Any = None
    heads: list[int] = field(default_factory=lambda: [0])  # preset heads to take
    num_heads: int = 1  # bare shapes
    head_dim: int = 128
    layer: int = 0
    step: int = 0  # the synthetic generator's denoising step
    # the synthetic generator of a model preset's Q/K/V (wavealign.workloads.GENERATORS: clusters, scene); None: the
    # library's default (wavealign.workloads.DEFAULT_GENERATOR)
    generator: Any = None


def register_schema() -> None:
    """File the schema in Hydra's ConfigStore as ``sweep_schema`` (``conf/config.yaml``'s first default)."""
    ConfigStore.instance().store(name="sweep_schema", node=SweepConfig)


def load(overrides: list[str] | None = None, conf_dir: Path = CONF_DIR) -> DictConfig:
    """Compose ``conf/config.yaml`` with ``overrides``, import its plugins and validate it; raises ``ConfigError``."""
    overrides = list(overrides or [])
    for override in overrides:
        check_override(override, conf_dir)
    register_schema()  # the schema's variants import the library (and torch): after what the schema alone refuses
    try:
        cfg = _compose(conf_dir, overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(_explain(_message(exc), conf_dir, overrides)) from None
    check_keys(cfg)  # first: a key deleted with ~ is missing for everything below
    cfg.overrides = [o for o in overrides if not o.startswith(("only_cells=", "force="))]
    _empty_maps(cfg, overrides)
    load_plugins(cfg)
    upgrade_first_spellings(cfg)
    validate(cfg, conf_dir)
    return cfg


def check_override(override: str, conf_dir: Path = CONF_DIR) -> None:
    """What the schema alone refuses, before composing (which imports the library's registries, and torch with
    them), and what composition would take silently: Hydra's own settings (``hydra.run.dir=...``: the sweep writes
    under ``run_root``, never in Hydra's output folders); a key no field of the schema has (``seq_k=`` for
    ``grid.seq_k=``; one added with ``+``, or an entry of a map, is checked once composed); a switch (a ``bool`` of
    the schema, such as ``resume``) given anything but true or false (OmegaConf reads ``resume=2`` as true); a
    number, or a list of numbers, given text that is no number; a list given one value."""
    key, sep, value = override.partition("=")
    path = key.lstrip("+~")
    if path == "hydra" or path.startswith(("hydra.", "hydra/")):
        raise ConfigError(f"{override}: Hydra's own settings do not apply to a sweep (it writes under run_root, "
                          "never in Hydra's output folders); expected sweep keys (run_root=<folder> for where "
                          "results go)")
    if not sep or key.startswith("~"):
        return
    found = _schema_field(path.split("."))
    if found is None:
        if not key.startswith("+") and not (Path(conf_dir) / path).is_dir():  # not a config group (sweep=)
            raise ConfigError(not_a_key(override, nearest_key(path, key_paths())))
        return
    kind, owner, declared = found
    if kind is bool and value.strip().lower() not in ("true", "false"):
        raise ConfigError(f"{override}: {path} is a switch; expected {path}=true or {path}=false")
    element = typing.get_args(kind)[0] if typing.get_origin(kind) is list else None
    if element is None and kind not in NUMBER_NAMES:
        return
    given = _parsed_value(override)
    if not isinstance(given, str | int | float | list):  # a sweep (a,b), a map or unparsed: composition explains
        return
    what = "a grid axis" if owner is GridConfig else path
    if element in NUMBER_NAMES or kind in NUMBER_NAMES:
        texts = [item for item in (given if isinstance(given, list) else [given]) if isinstance(item, str)]
        if any(not _reads_as_number(text) for text in texts):
            if element is None:
                raise ConfigError(f"{path}={value}: expected {NUMBER_NAMES[kind]}")
            example = ",".join(str(v) for v in declared.default_factory())  # type: ignore[misc]
            raise ConfigError(f"{path}={value}: {what} is a list of {NUMBER_NAMES[element].split()[-1]}s; "
                              f"expected e.g. {path}=[{example}]")
    if element is not None and not isinstance(given, list):
        raise ConfigError(f"{path}={value}: {what} is a list; expected {path}=[{value}]")


NUMBER_NAMES = {int: "an integer", float: "a number"}  # how an expected number is named: "expected an integer"


def _schema_field(segments: list[str], schema: type = SweepConfig) -> tuple[Any, type | None, Any] | None:
    """(type, the dataclass declaring it, its ``dataclasses.Field``) of the schema's key at ``segments``
    (``["ray", "prefetch_inputs"]`` -> bool, RayConfig, the field); past a map of plain values
    (``grid.method_params.xattention.threshold``) ``(Any, None, None)``; None where a dataclass on the way has no
    such field."""
    kind: Any = schema
    owner: type | None = None
    declared: Any = None
    for segment in segments:
        if typing.get_origin(kind) is dict:
            kind, owner, declared = typing.get_args(kind)[1], None, None
            continue
        if not dataclasses.is_dataclass(kind):
            return Any, None, None
        fields = {f.name: f for f in dataclasses.fields(kind)}
        if segment not in fields:
            return None
        owner, declared, kind = kind, fields[segment], typing.get_type_hints(kind)[segment]
    return kind, owner, declared


def _parsed_value(override: str) -> Any:
    """The value of ``override`` as Hydra's override grammar reads it (``[0,x]`` -> ``[0, 'x']``), or None where the
    grammar does not read it (composition then names the mistake)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_overrides([override])[0].value()
    except HydraException:
        return None


def _reads_as_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _empty_maps(cfg: DictConfig, overrides: list[str]) -> None:
    """``key={}`` empties the map ``key`` (``extra_grids={}``: the sweep runs ``grid`` alone): Hydra merges an empty
    map into the composed one, which leaves it as it was."""
    for override in overrides:
        key, sep, value = override.partition("=")
        if sep and value.strip() == "{}" and not key.startswith(("+", "~")):
            node = OmegaConf.select(cfg, key)
            if isinstance(node, DictConfig):
                parent, _, name = key.rpartition(".")
                with open_dict(cfg):
                    (OmegaConf.select(cfg, parent) if parent else cfg)[name] = {}


def to_yaml(cfg: DictConfig) -> str:
    """The resolved config as YAML, every URI's password and token redacted: what a sweep writes
    (``sweeps/<id>/config.yaml``, an MLflow artifact too) and ``--cfg job`` prints."""
    return OmegaConf.to_yaml(OmegaConf.create(redact_tree(OmegaConf.to_container(cfg, resolve=True))))


def upgrade_first_spellings(cfg: DictConfig) -> None:
    """Sweeps written before measurers keep loading, meaning what they meant:

    - ``backend: [sim]`` with ``backend_params.sim.kernel: K`` (an axis) is ``backend: [K]`` with
      ``measure: [simulated]``, the sim backend's other params its ``measure_params.simulated``; a grid that lists
      real backends beside ``sim`` keeps them and its simulated cells move to an extra grid ``<name>_simulated``;
    - ``ncu: true`` measures the grid's ``timed`` cells with ``ncu``."""
    from wavealign.orchestrator.dataset import SIM_BACKEND, SIM_DEFAULT_KERNEL, SIM_KERNEL

    with open_dict(cfg):
        for where, grid in list(grids(cfg).items()):
            if grid.ncu:
                grid.measure = ["ncu" if m == "timed" else m for m in grid.measure]
                grid.ncu = False
            if SIM_BACKEND not in grid.backend:
                continue
            sim = OmegaConf.to_container(grid.backend_params.get(SIM_BACKEND) or OmegaConf.create({}))
            modelled = sim.pop(SIM_KERNEL, SIM_DEFAULT_KERNEL)
            simulated = grid if list(grid.backend) == [SIM_BACKEND] else OmegaConf.create(
                OmegaConf.to_container(grid))
            simulated.backend = modelled if isinstance(modelled, list) else [modelled]
            simulated.measure = ["simulated"]
            simulated.measure_params = {"simulated": sim} if sim else {}
            simulated.backend_params.pop(SIM_BACKEND, None)
            if simulated is not grid:
                grid.backend = [b for b in grid.backend if b != SIM_BACKEND]
                grid.backend_params.pop(SIM_BACKEND, None)
                cfg.extra_grids[f"{where.rpartition('.')[2]}_simulated"] = OmegaConf.merge(
                    OmegaConf.structured(GridConfig), simulated)


def load_plugins(cfg: DictConfig) -> None:
    """Import the modules ``cfg.plugins`` names, here and (through ``WAVEALIGN_PLUGINS``) on every worker."""
    if not cfg.plugins:
        return
    for name in cfg.plugins:
        if not isinstance(name, str) or not MODULE_NAME.fullmatch(name):
            raise ConfigError(f"plugins has {name!r}; expected the dotted name of an importable module "
                              "(my_package.backends), not a path")
    known = registry.plugin_modules()
    os.environ[registry.PLUGINS_ENV] = ",".join([*known, *(p for p in cfg.plugins if p not in known)])
    try:
        registry.import_plugins()
    except ImportError as exc:
        raise ConfigError(f"plugins={list(cfg.plugins)}: {exc}") from None


MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def search_dirs(cfg: DictConfig, conf_dir: Path = CONF_DIR) -> list[Path]:
    """Where ``group_entry`` looks: ``conf_dir``, then the sweep's ``conf_dirs``."""
    return [Path(conf_dir), *(Path(d) for d in cfg.conf_dirs)]


def _compose(conf_dir: Path, overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3", job_name="wavealign-sweep"):
        return compose(config_name="config", overrides=overrides)


GRAMMAR_URL = "https://hydra.cc/docs/1.2/advanced/override_grammar/basic"


def _explain(message: str, conf_dir: Path, overrides: list[str]) -> str:
    """Hydra's or OmegaConf's composition error in this project's words, naming the override and the spelling to
    type instead: a list is an axis of one sweep (never ``--multirun``), a key is found by its full dotted path.
    A message of another kind is passed on as ``config: <message>``."""
    if (ambiguous := re.search(r"Ambiguous value for argument '([^=']+)=([^']*)'", message)) is not None:
        key, value = ambiguous.groups()
        return (f"{key}={value}: a list is written in brackets, {key}=[{value}] (each value is a cell of this one "
                f"sweep; to give one text with commas, quote it: {key}='{value}')")
    if (typed := re.search(r"Value '([^']*)' of type '\w+' could not be converted to (\w+).*Error merging override "
                           r"(\S+?)=", message)) is not None:
        value, kind, key = typed.groups()
        return f"{key}={value}: expected {'an' if kind[0] in 'AEIOU' else 'a'} {kind.lower()}"
    if "override_grammar" in message or "LexerNoViableAltException" in message:
        bad = next((o for o in overrides if not _parses(o)), None)
        if bad is not None:
            return (f"{bad!r} is not a KEY=VALUE override; expected e.g. grid.seq_k=[148,364] (lists in brackets, "
                    f"maps in braces, text with spaces or commas quoted; {GRAMMAR_URL})")
    missing = re.search(r"Key '([^']+)' (?:not in|is not in).*Could not override '([^']+)'", message)
    if missing is not None and (hint := _missing_key_hint(*missing.groups(), conf_dir, overrides)) is not None:
        return hint
    if (unknown := re.search(r"Could not find '(\w+)/([^']+)' Available options in '\w+': (.*?) Config search",
                             message)) is not None:
        group, name, options = unknown.groups()
        return f"{group}={name} has no conf/{group}/{name}.yaml; expected one of {options.split()}"
    return f"config: {message}"


def _parses(override: str) -> bool:
    """Whether Hydra's override grammar reads ``override``."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        OverridesParser.create().parse_overrides([override])
    except HydraException:
        return False
    return True


def _missing_key_hint(key: str, path: str, conf_dir: Path, overrides: list[str]) -> str | None:
    """What to type instead of an override of a key the config lacks: the nearest key over the full dotted paths of
    the config composed without that override (``seq_k`` -> ``grid.seq_k``), or ``+`` to give a method, backend,
    measurer or reorderer parameters its sweep preset does not set."""
    given = next((o for o in overrides if o.lstrip("+~").split("=")[0] == path), path)
    segments = path.split(".")
    parent = ".".join(segments[:segments.index(key)]) if key in segments else path.rpartition(".")[0]
    if parent.endswith("_params"):  # a name the preset gives no parameters: a new entry of the map
        return (f"{given}: {parent.rpartition('.')[2].removesuffix('_params')} {key!r} has no parameters set here; "
                f"to give some, add them: +{given}")
    try:
        composed = _compose(conf_dir, [o for o in overrides if o is not given])
    except (HydraException, OmegaConfBaseException):
        return None
    return not_a_key(given, nearest_key(path, config_paths(composed)))


def not_a_key(given: str, near: str | None) -> str:
    """The message for an override ``given`` whose key the config lacks, with the key it most likely meant."""
    value = given.partition("=")[2]
    expected = f"did you mean {near}={value}?" if near else "see wavealign sweep --cfg job for the keys"
    return f"{given} is not a sweep config key; {expected}"


def key_paths() -> list[str]:
    """The full dotted path of every key the schema declares (``grid.seq_k``, ``ray.address``), read from its
    dataclasses, so without composing (which imports the library's registries); the entries of its maps (a
    preset's ``extra_grids``, a method's parameters) are a composed config's (``config_paths``)."""
    return _schema_paths(SweepConfig)


def _schema_paths(schema: type, prefix: str = "") -> list[str]:
    paths = []
    for key, kind in typing.get_type_hints(schema).items():
        paths.append(f"{prefix}{key}")
        if dataclasses.is_dataclass(kind):
            paths += _schema_paths(kind, f"{prefix}{key}.")
    return paths


def config_paths(node: DictConfig, prefix: str = "") -> list[str]:
    """Every key of a config by its full dotted path (``grid.seq_k``, ``ray.address``)."""
    paths = []
    for key in node:
        path = f"{prefix}{key}"
        paths.append(path)
        child = node._get_node(key)  # the node itself: an interpolation is not resolved
        if isinstance(child, DictConfig):
            paths += config_paths(child, f"{path}.")
    return paths


def nearest_key(key: str, paths: Sequence[str]) -> str | None:
    """The path among ``paths`` a mistyped ``key`` most likely meant: one ending in the same last segment
    (``reps`` -> ``grid.reps``; the shortest, then the first in order), else the closest full path, else the path of the
    closest last segment; None when nothing is close."""
    ordered = sorted(set(paths) - {key}, key=lambda p: (p.count("."), p))
    leaf = key.rpartition(".")[2]
    same_leaf = [p for p in ordered if p.rpartition(".")[2] == leaf]
    if same_leaf:
        return same_leaf[0]
    close = difflib.get_close_matches(key, ordered, n=1, cutoff=0.75)
    if close:
        return close[0]
    by_leaf: dict[str, str] = {}
    for path in ordered:
        by_leaf.setdefault(path.rpartition(".")[2], path)
    close = difflib.get_close_matches(leaf, list(by_leaf), n=1)
    return by_leaf[close[0]] if close else None


def _message(exc: BaseException) -> str:
    """Hydra's and OmegaConf's message without their trailing full-key/object-type context lines."""
    text = str(exc) if exc.__cause__ is None else f"{exc.__cause__}\n{exc}"
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("To append to your config")]
    kept = [ln for ln in lines if not ln.startswith(("full_key:", "object_type=", "reference_type="))]
    return " ".join(kept) or type(exc).__name__


def entry_path(root: Path, group: str, name: Any) -> Path:
    """``<root>/<group>/<name>.yaml``, where ``name`` (a workload, method, backend, ... a config names) is a plain
    name: no folder separator and no leading dot, so that it names a file of that folder; else a ``ConfigError``
    (``../../etc/x`` or ``/tmp/x`` read a YAML outside every config root). Links a config root holds are its
    owner's to make and are followed."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.startswith("."):
        raise ConfigError(f"{group} {name!r} is not a name; expected the stem of a conf/{group}/<name>.yaml")
    return Path(root) / group / f"{name}.yaml"


def group_entry(group: str, name: str, dirs: Sequence[Path] = (CONF_DIR,)) -> DictConfig:
    """Read ``<dir>/<group>/<name>.yaml`` from the first of ``dirs`` that has it (``entry_path``), against its
    schema (unknown keys are an error). The file is read through the bounded YAML reader (``wavealign.bounded``:
    no alias bomb, no Python tags), and a value that is an interpolation (``${oc.env:TOKEN}``) is refused
    without resolving it: an entry is plain values, and resolving one could print a secret in an error."""
    from wavealign import bounded

    found = [path for d in dirs if (path := entry_path(Path(d), group, name)).is_file()]
    if not found:
        known = sorted({p.stem for d in dirs for p in (Path(d) / group).glob("*.yaml")})
        raise ConfigError(f"{group} {name!r} has no conf/{group}/{name}.yaml (searched {[str(d) for d in dirs]}); "
                          f"expected one of {known}")
    path = found[0]
    schema = WorkloadConfig if group == "workload" else NamedConfig
    try:
        loaded = OmegaConf.create(bounded.check_yaml(bounded.read_text(path, "config entry", bounded.MAX_YAML_BYTES),
                                                     f"config entry {str(path)!r}") or {})
        _refuse_interpolations(loaded, f"conf/{group}/{name}.yaml")
        entry = OmegaConf.merge(OmegaConf.structured(schema), loaded)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    except OmegaConfBaseException as exc:
        raise ConfigError(f"conf/{group}/{name}.yaml: {_message(exc)}") from None
    if entry.name != name:
        raise ConfigError(f"conf/{group}/{name}.yaml declares name {entry.name!r}; expected {name!r}")
    return entry


def _refuse_interpolations(node: Any, where: str) -> None:
    """A ``ConfigError`` for the first value of ``node`` that is an interpolation, named by its key and its text
    (never resolved)."""
    container = OmegaConf.to_container(node, resolve=False) if isinstance(node, DictConfig | ListConfig) else node
    todo: list[tuple[str, Any]] = [("", container)]
    while todo:
        key, value = todo.pop()
        if isinstance(value, dict):
            todo += [(f"{key}.{k}" if key else str(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            todo += [(f"{key}[{i}]", v) for i, v in enumerate(value)]
        elif isinstance(value, str) and "${" in value:
            raise ConfigError(f"{where}: {key}={value!r} is an interpolation; expected a plain value (a config "
                              "root's entries are read as written, never resolved)")


def method_names() -> list[str]:
    """Mask methods a cell may name: the ``wavealign.masks`` registry."""
    from wavealign import masks

    return masks.available()


def backend_names() -> list[str]:
    """Backends a cell may name: the ``wavealign.kernels`` registry."""
    from wavealign import kernels

    return kernels.names()


def reorderer_names() -> list[str]:
    """Reorderers a cell may name: the ``wavealign.reorderers`` registry."""
    from wavealign import reorderers

    return reorderers.names()


def grids(cfg: DictConfig) -> dict[str, DictConfig]:
    """The sweep's grids by name: ``grid`` and each of ``extra_grids``."""
    return {"grid": cfg.grid, **{f"extra_grids.{k}": v for k, v in cfg.extra_grids.items()}}


# ray.init's addresses: 'auto', 'local', a head's host:port, or Ray Client's ray://host[:port]
_HOST = r"(?:\[[0-9A-Fa-f:.]+\]|[^\s/:\[\]]+)"  # a name, an IPv4 address or a bracketed IPv6 one
RAY_ADDRESS = re.compile(rf"auto|local|ray://{_HOST}(:\d+)?|{_HOST}:\d+")
# the URI schemes MLflow's tracking stores answer to ('' is a path: a file store); '+driver' suffixes are allowed
MLFLOW_SCHEMES = frozenset({"", "file", "sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks"})


SWEEP_NAME = re.compile(r"[\w.+-]{1,100}")


def check_tracking_uri(key: str, uri: Any) -> None:
    """``uri`` None, a path or a URI of a scheme MLflow stores runs under; else a ``ConfigError`` naming ``key``
    (``mlflow.tracking_uri=``, ``--tracking-uri ``) and the URI, its password redacted."""
    if uri is not None and not (isinstance(uri, str) and uri and
                                urllib.parse.urlparse(uri).scheme.split("+")[0] in MLFLOW_SCHEMES):
        raise ConfigError(f"{key}{redact(repr(uri))}; expected null (<run_root>/mlflow.db), a path, or a URI with a "
                          f"scheme MLflow stores runs under: {sorted(s for s in MLFLOW_SCHEMES if s)}")


def validate(cfg: DictConfig, conf_dir: Path = CONF_DIR) -> None:
    """Check every key against the schema, names against the registries and numbers against their ranges; raise
    ``ConfigError``."""
    from wavealign import variants

    check_keys(cfg)
    for name, variant in cfg.variants.items():
        if variant.stages not in variants.STAGES:
            raise ConfigError(f"variants.{name}.stages={variant.stages!r}; expected one of {variants.STAGES}")
        if variant.skip not in variants.SKIP_MODES:
            raise ConfigError(f"variants.{name}.skip={variant.skip!r}; expected one of {variants.SKIP_MODES}")
        fixed = variants.VARIANTS.get(name)
        if fixed is not None and (variant.stages, variant.skip) != (fixed.stages, fixed.skip):
            what = "the baseline every speedup refers to" if name == ORIGINAL_VARIANT else "a variant of the library"
            raise ConfigError(f"variants.{name}: stages={variant.stages!r}, skip={variant.skip!r}; {name!r} is {what} "
                              f"(stages {fixed.stages!r}, skip {fixed.skip!r}) and is fixed; expected it unchanged "
                              "(add your own under another name)")
    if not isinstance(cfg.name, str) or not SWEEP_NAME.fullmatch(cfg.name):
        raise ConfigError(f"name={cfg.name!r}; expected a label of letters, digits, '_', '-', '.' or '+' (at most "
                          "100): it names the sweep's MLflow run and its console lines")
    for key in ("batch_cells", "max_cells"):
        if cfg[key] < 1:
            raise ConfigError(f"{key}={cfg[key]}; expected >= 1")
    if cfg.ray.max_retries < 0:
        raise ConfigError(f"ray.max_retries={cfg.ray.max_retries}; expected >= 0")
    for key, least in (("num_cpus", 1), ("num_gpus", 0), ("object_store_mb", 1)):
        value = cfg.ray[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise ConfigError(f"ray.{key}={value!r}; expected null or an integer >= {least}")
    if cfg.ray.object_store_mb is not None:
        _check_fits("ray.object_store_mb", cfg.ray.object_store_mb * 2**20)
    for key in ("wait_timeout_s", "worker_start_timeout_s"):
        if not cfg.ray[key] > 0:  # nan too; inf waits for ever
            raise ConfigError(f"ray.{key}={cfg.ray[key]}; expected > 0")
    address = cfg.ray.address
    if address is not None and not (isinstance(address, str) and RAY_ADDRESS.fullmatch(address)):
        raise ConfigError(f"ray.address={address!r}; expected null (an embedded local Ray), 'auto' (the cluster "
                          "this machine is part of), 'host:port' (its head) or 'ray://host:port' (Ray Client)")
    check_tracking_uri("mlflow.tracking_uri=", cfg.mlflow.tracking_uri)
    if not isinstance(cfg.mlflow.experiment, str) or not cfg.mlflow.experiment.strip():
        raise ConfigError(f"mlflow.experiment={cfg.mlflow.experiment!r}; expected the name of an MLflow experiment")
    if not str(cfg.run_root).strip() or Path(cfg.run_root).resolve() == Path(Path(cfg.run_root).resolve().anchor):
        raise ConfigError(f"run_root={cfg.run_root!r}; expected a folder of the sweep's own (made if missing), not "
                          "the current folder's nothing or the filesystem's root")
    for folder in cfg.conf_dirs:
        if not Path(folder).is_dir():
            raise ConfigError(f"conf_dirs has {folder!r}, which is not a folder; expected config roots holding "
                              "backend/, method/, reorderer/ YAMLs")
    if Path(cfg.run_root).exists() and not Path(cfg.run_root).is_dir():
        raise ConfigError(f"run_root={cfg.run_root!r} is a file; expected a folder (made if missing) for the "
                          "sweep's results")
    for where, grid in grids(cfg).items():
        _validate_grid(where, grid, cfg, search_dirs(cfg, conf_dir))


def check_keys(cfg: DictConfig) -> None:
    """Every key of a composed config is a field of the schema. Hydra's ``+key=value`` adds keys even to a struct
    config, so a typo such as ``+grid.seeds=[0,1]`` composes; this catches it. Of the maps, ``extra_grids`` and
    ``variants`` hold schema entries whose keys are checked here; ``*_params`` are checked by ``param_axes``."""
    _check_keys(cfg, SweepConfig, "")


def _check_keys(node: DictConfig, schema: type, prefix: str) -> None:
    fields = typing.get_type_hints(schema)
    for key in fields:
        if key not in node:  # deleted with ~key: nothing would stand in for it
            empty = f" (none: {prefix}{key}={{}})" if typing.get_origin(fields[key]) is dict else ""
            raise ConfigError(f"~{prefix}{key}: {prefix}{key} cannot be deleted; expected it set{empty}")
    for key in node:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            expected = f"did you mean {prefix}{close[0]}?" if close else f"expected one of {sorted(fields)}"
            value = OmegaConf.to_container(node)[key]  # type: ignore[index]
            raise ConfigError(f"{prefix}{key}={value!r} is not a sweep config key; {expected}")
        kind = fields[key]
        if dataclasses.is_dataclass(kind):
            _check_keys(node[key], kind, f"{prefix}{key}.")
        elif typing.get_origin(kind) is dict and dataclasses.is_dataclass(entry := typing.get_args(kind)[1]):
            for name in node[key]:
                _check_keys(node[key][name], entry, f"{prefix}{key}.{name}.")


# GridConfig's list fields: the axes whose product is the grid, so an empty one means no cells
AXES = tuple(k for k, kind in typing.get_type_hints(GridConfig).items() if typing.get_origin(kind) is list)


def declared_params(kind: str, name: str) -> dict[str, Any]:
    """What ``kind`` (method, backend, measure or reorderer) ``name`` declares a sweep may set, with its defaults:
    the entry's own module is the one place they are written (a method's workload identity, filled from the cell,
    left out)."""
    from wavealign import kernels, masks, measurers, reorderers

    if kind == "method":
        return {k: v for k, v in masks.get(name).params.items() if k not in masks.IDENTITY_PARAMS}
    registry = {"backend": kernels.get, "measure": measurers.get, "reorderer": reorderers.get}[kind]
    return dict(registry(name).params)


def param_axes(kind: str, name: str, grid: DictConfig, where: str,
               dirs: Sequence[Path] = (CONF_DIR,)) -> dict[str, list[Any]]:
    """The parameter axes of ``kind`` (method, backend, measure or reorderer) ``name`` in a grid: the parameters
    its module declares (``declared_params``, one value each: the default), the values ``conf/<kind>/<name>.yaml``
    sets for some of them (none in the shipped entries), then ``<where>.<kind>_params.<name>`` (a list is an axis,
    a scalar one value). Only declared parameters may be given (none declared: none, unless the backend passes any
    option through); no axis may be empty, numbers must be finite, and a method's, measurer's or reorderer's own
    checks pass (the ones its builds use), so a bad value stops the sweep here instead of failing every cell.
    Checks across two params (flexprefill's max_budget >= min_budget) run only where a cell builds its mask."""
    from wavealign import masks, measurers, reorderers

    declared = declared_params(kind, name)
    passes_any = not declared and kind == "backend" and _passes_any_option(name)
    entry: dict[str, Any] = OmegaConf.to_container(group_entry(kind, name, dirs).params)  # type: ignore[assignment]
    prefix = f"{where}.{kind}_params.{name}"
    given = grid[f"{kind}_params"].get(name)
    if given is not None and not isinstance(given, DictConfig):
        raise ConfigError(f"{prefix}={given!r}; expected a map of parameter names to values")
    override: dict[str, Any] = OmegaConf.to_container(given) if given is not None else {}  # type: ignore[assignment]
    for source, values in ((f"conf/{kind}/{name}.yaml params", entry), (prefix, override)):
        for key, value in values.items():
            if key not in declared and not passes_any:
                raise ConfigError(f"{source}.{key}={value!r} is not a parameter of {kind} {name!r}; "
                                  f"{_declared(kind, name, declared, str(key))}")
    axes = {**{k: [v] for k, v in {**declared, **entry}.items()},
            **{k: v if isinstance(v, list) else [v] for k, v in override.items()}}
    for key, values in axes.items():
        path = (f"{prefix}.{key}" if key in override else f"conf/{kind}/{name}.yaml params.{key}" if key in entry
                else f"{kind} {name!r}'s default {key}")
        if not values:
            raise ConfigError(f"{path}=[] is empty; expected at least one value (a list is an axis: an empty one "
                              "makes no cells)")
        own_checks = {"method": masks.get, "reorderer": reorderers.get, "measure": measurers.get}.get(kind)
        for value in values:
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{path} has {value!r}; expected a finite number")
            if own_checks is not None:
                try:
                    own_checks(name).resolve({key: value})
                except ValueError as exc:
                    raise ConfigError(f"{path} has {value!r}: {exc}") from None
    return axes


def _passes_any_option(backend: str) -> bool:
    """Whether the backend's planner takes any option (``**options``, e.g. FlexAttention's kernel_options), which
    its YAML, declaring none, cannot list."""
    from wavealign import kernels

    parameters = inspect.signature(kernels.get(backend).plan).parameters.values()
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _declared(kind: str, name: str, base: dict[str, Any], key: str) -> str:
    if not base:
        return f"expected none: {kind} {name!r} declares no params"
    close = difflib.get_close_matches(key, list(base), n=1)
    return f"expected one of {sorted(base)}" + (f"; did you mean {close[0]}?" if close else "")


def param_combinations(axes: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """{a: [1, 2], b: [3]} -> [{a: 1, b: 3}, {a: 2, b: 3}]."""
    keys = sorted(axes)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(axes[k] for k in keys))]


def axis_product(axes: dict[str, list[Any]]) -> int:
    """How many combinations ``param_combinations`` gives, without making them."""
    return math.prod(len(values) for values in axes.values())


def _check_names(where: str, values, known: list[str]) -> None:
    for value in values:
        if value not in known:
            raise ConfigError(f"{where} has unknown {where.rsplit('.', 1)[-1]} {value!r}; expected one of {known}")


def _check_placement(where: str, grid: DictConfig, name: str) -> None:
    """A backend a grid names must run on (or be simulated for) one of the grid's hardware with one of its
    measurers (``wavealign.placement``); the combinations that cannot are filtered when the grid expands."""
    from wavealign import placement

    reasons: dict[str, None] = {}  # in order, once each
    for measure, hw in itertools.product(grid.measure, grid.hardware):
        reason = placement.hardware_refused(hw, name, measure)
        if reason is None:
            return
        reasons[reason] = None
    raise ConfigError(f"{where}.backend {name!r} cannot run on any of {where}.hardware {list(grid.hardware)}: "
                      f"{'; '.join(reasons)}")


def _validate_grid(where: str, grid: DictConfig, cfg: DictConfig, dirs: list[Path]) -> None:
    from wavealign import launch_order, measurers
    from wavealign.blockmask import MAX_SEED

    for axis in AXES:
        if len(grid[axis]) == 0:
            raise ConfigError(f"{where}.{axis}=[] is empty; expected at least one value (each list is an axis of the "
                              "grid: an empty one makes no cells)")
    gpu_ids = hardware_registry.names()
    _check_names(f"{where}.hardware", grid.hardware, [*gpu_ids, CPU])
    _check_names(f"{where}.backend", grid.backend, backend_names())
    _check_names(f"{where}.measure", grid.measure, measurers.names())
    _check_names(f"{where}.method", grid.method, method_names())
    _check_names(f"{where}.variant", grid.variant, sorted(cfg.variants))
    _check_names(f"{where}.reorderer", grid.reorderer, reorderer_names())
    if grid.cpu_profile not in gpu_ids:
        raise ConfigError(f"{where}.cpu_profile={grid.cpu_profile!r}; expected one of {gpu_ids}")
    for name in grid.workload:
        wl = group_entry("workload", name, dirs)
        _validate_workload(wl)
        if wl.captured is not None and len(grid.seq_k) != 1:
            raise ConfigError(f"{where}.seq_k={list(grid.seq_k)} with workload {name!r}, captured at a fixed length; "
                              "expected one value (the file sets the length)")
    for k in grid.seq_k:
        if isinstance(k, bool) or not isinstance(k, int | float) or not math.isfinite(k) or k <= 0:
            raise ConfigError(f"{where}.seq_k has {k!r}; expected positive, finite thousands of tokens")
        if k > MAX_SEQ_K:
            raise ConfigError(f"{where}.seq_k has {k:g}: {k * 1000:,.0f} tokens, more than {MAX_SEQ_K * 1000:,} "
                              f"(seq_k counts thousands of tokens: 364 is 364,000; did you mean {k / 1000:g}?)")
    for seed in grid.seed:
        _check_integer(f"{where}.seed", seed, 0, MAX_SEED, listed=True)  # torch's generator seeds, and an int64 column
    for w in grid.wave_size:
        _check_integer(f"{where}.wave_size", w, 1, launch_order.MAX_WAVE_SIZE, null=True, listed=True)
    _check_integer(f"{where}.block_size", grid.block_size, 1, MAX_SEQ_K * 1000, null=True)
    _check_integer(f"{where}.reps", grid.reps, 1, MAX_REPS)
    _check_integer(f"{where}.warmup", grid.warmup, 0, MAX_REPS)
    if cfg.ray.address is None:  # the cells run on this machine: its memory bounds them
        _check_cell_sizes(where, grid, dirs)
    for method in grid.method:
        param_axes("method", method, grid, where, dirs)
    for backend in grid.backend:
        axes = param_axes("backend", backend, grid, where, dirs)
        _check_placement(where, grid, backend)
        _check_backend_options(where, grid, backend, axes)
    for name in grid.measure:
        param_axes("measure", name, grid, where, dirs)
    for name in grid.reorderer:
        param_axes("reorderer", name, grid, where, dirs)
    # parameters of a name the grid does not run: the sweep preset's, for a name the command line replaced
    # (grid.method=[xattention] over a preset tuning planted), are dropped; ones the command line gave itself are
    # a mistake (a typo'd or forgotten name) and stop the sweep
    for kind in ("method", "backend", "measure", "reorderer"):
        names = list(grid[kind])
        for name in list(grid[f"{kind}_params"]):
            if name in names:
                continue
            key = f"{where}.{kind}_params.{name}"
            if not any(o.lstrip("+~").startswith((f"{key}.", f"{key}=")) for o in cfg.get("overrides", [])):
                with open_dict(grid[f"{kind}_params"]):
                    del grid[f"{kind}_params"][name]
                continue
            raise ConfigError(f"{key}: {kind} {name!r} is not in {where}.{kind} {names}; expected parameters of a "
                              f"{kind} the grid runs (add {name!r} to {where}.{kind}, or drop these with ~{key})")


def _check_integer(key: str, value: Any, lo: int, hi: int, null: bool = False, listed: bool = False) -> None:
    """``value`` of ``key`` (one item of it where ``listed``, an axis) an integer in [lo, hi], or None where ``null``,
    as the library takes one (``blockmask.check_int``: a boolean, a float or text is not an integer); else a
    ``ConfigError``."""
    from wavealign.blockmask import check_int

    if value is None and null:
        return
    try:
        check_int(key, value, lo=lo, hi=hi)
    except ValueError:
        got = f"{key} has {value!r}" if listed else f"{key}={value!r}"
        raise ConfigError(f"{got}; expected an integer in [{lo}, {hi:,}]" + (" or null" if null else "")) from None


def _check_fits(what: str, nbytes: int) -> None:
    """``blockmask.check_fits`` (``nbytes`` within this machine's memory) as a ``ConfigError``."""
    from wavealign.blockmask import check_fits

    try:
        check_fits(what, nbytes)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _check_cell_sizes(where: str, grid: DictConfig, dirs: list[Path]) -> None:
    """The largest cell of each workload, at the grid's longest ``seq_k`` and smallest block size, must fit in this
    machine's memory, where a sweep on its embedded Ray runs it: at least its Q, K and V (2 bytes a number, as on a
    GPU) and its bool block mask. A workload of 1e8 heads or a ``block_size`` of 1 (a 530 GB mask at 364K tokens)
    is refused here, not by a worker's out-of-memory kill. (On a cluster, each worker's own allocations are checked
    against its node, ``blockmask.check_fits``.)"""
    block_size = min(block_size_for(grid, hw) for hw in grid.hardware)
    longest = max(grid.seq_k)
    for name in grid.workload:
        wl = group_entry("workload", name, dirs)
        if wl.captured is not None:
            from wavealign import workloads

            _, heads, tokens, head_dim = workloads.read_header(wl.captured).shape
            heads = len(wl.heads)
        else:
            heads = len(wl.heads) if wl.model is not None else int(wl.num_heads)
            tokens, head_dim = math.ceil(longest * 1000), int(wl.head_dim)
        blocks = math.ceil(tokens / block_size)
        _check_fits(f"{where}: a cell of workload {name!r} ({heads} heads x {tokens:,} tokens x {head_dim}, "
                    f"block_size {block_size})", 3 * 2 * heads * tokens * head_dim + heads * blocks * blocks)


def profile_hardware(grid: DictConfig, hw: str) -> str:
    """The GPU whose figures a cell on ``hw`` takes: ``hw`` itself, or ``cpu_profile`` for a CPU cell."""
    return grid.cpu_profile if hw == CPU else hw


def block_size_for(grid: DictConfig, hw: str) -> int:
    """A cell's mask block size: the grid's ``block_size``, else its profile GPU's default."""
    return int(grid.block_size or hardware_registry.get(profile_hardware(grid, hw)).default_block_size)


def _check_backend_options(where: str, grid: DictConfig, name: str, axes: dict[str, list[Any]]) -> None:
    """Each combination of the backend's parameters passes its own launch checks (``Backend.check_options``) for
    every mask block size the grid's cells get (``block_size``, else each GPU's default)."""
    from wavealign import kernels

    check = kernels.get(name).check_options
    if check is None:
        return
    sizes = {block_size_for(grid, hw) for hw in grid.hardware}
    for options in param_combinations(axes):
        for block_size in sorted(sizes):
            try:
                check(options, block_size)
            except ValueError as exc:
                given = {k: v for k, v in options.items() if v is not None}
                raise ConfigError(f"{where}.backend {name!r} with {given} and block_size {block_size}: {exc}") from None


def _validate_workload(wl: DictConfig) -> None:
    from wavealign import workloads

    where = f"conf/workload/{wl.name}.yaml"
    if wl.generator is not None and (wl.model is None or wl.captured is not None):
        raise ConfigError(f"{where}: generator={wl.generator!r} without a model preset; expected a model (a captured "
                          "file or a bare shape draws no synthetic Q/K/V)")
    if wl.generator is not None and wl.generator not in workloads.generator_names():
        raise ConfigError(f"{where}: generator={wl.generator!r}; expected one of {workloads.generator_names()}")
    if wl.captured is not None:
        try:
            header = workloads.read_header(wl.captured)
        except ValueError as exc:
            raise ConfigError(f"{where}: captured={wl.captured!r}: {exc}") from None
        if wl.model is not None:
            raise ConfigError(f"{where}: model={wl.model!r} with captured; expected no model (the file names it: "
                              f"{header.model!r})")
        if len(wl.heads) == 0 or min(wl.heads) < 0 or max(wl.heads) >= header.shape[1]:
            raise ConfigError(f"{where}: heads {list(wl.heads)}; expected indices in [0, {header.shape[1]}) of "
                              f"{wl.captured}")
        return
    if wl.model is not None:
        if wl.model not in workloads.models():
            raise ConfigError(f"{where}: model {wl.model!r}; expected one of {workloads.models()}")
        if len(wl.heads) == 0 or min(wl.heads) < 0 or max(wl.heads) >= workloads.MODELS[wl.model].heads:
            raise ConfigError(f"{where}: heads {list(wl.heads)}; expected indices in "
                              f"[0, {workloads.MODELS[wl.model].heads}) of {wl.model}")
    for key in ("num_heads", "head_dim"):
        if wl[key] < 1:
            raise ConfigError(f"{where}: {key}={wl[key]}; expected >= 1")
    if wl.layer < 0:
        raise ConfigError(f"{where}: layer={wl.layer}; expected >= 0")
    if wl.model is not None and wl.layer >= workloads.MODELS[wl.model].layers:
        raise ConfigError(f"{where}: layer={wl.layer}; expected < {workloads.MODELS[wl.model].layers}, the layers "
                          f"of {wl.model}")
    steps = workloads.generator(wl.generator).num_steps
    if not 0 <= wl.step < steps:
        raise ConfigError(f"{where}: step={wl.step}; expected a denoising step in [0, {steps})")
