"""The rules of a composed sweep config that no field's type says: each field's range or choices (its metadata,
``check_fields``), the names the registries know, each entry's parameters against the schema it registers, and rules
across fields (a backend its grid's hardware cannot run, a length a captured file fixes, a cell too large for this
machine). The sweep's plugins are imported first, so their entries are the registries' too.
"""

from __future__ import annotations

import inspect
import math
import re
import urllib.parse
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from orchestrator.config_entries import group_entry, search_dirs
from orchestrator.config_errors import expected, fits, suggest
from orchestrator.config_schema import AXES, CONF_DIR, MAX_SEQ_K, ConfigError, SweepConfig, check_fields
from orchestrator.grid_axes import (
    KINDS,
    block_size_for,
    declared_params,
    entry,
    grids,
    param_axes,
    param_combinations,
)
from orchestrator.redact import redact
from wavealign import hardware, registry, variants
from wavealign.records import CPU, SPATIAL_STAGES

# ray.init's addresses: 'auto', 'local', a head's host:port, or Ray Client's ray://host[:port]
_HOST = r"(?:\[[0-9A-Fa-f:.]+\]|[^\s/:\[\]]+)"  # a name, an IPv4 address or a bracketed IPv6 one
RAY_ADDRESS = re.compile(rf"auto|local|ray://{_HOST}(:\d+)?|{_HOST}:\d+")
# the URI schemes MLflow's tracking stores answer to ('' is a path: a file store); '+driver' suffixes are allowed
MLFLOW_SCHEMES = frozenset({"", "file", "sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks"})
SWEEP_NAME = re.compile(r"[\w.+-]{1,100}")


def validate(cfg: DictConfig, conf_dir: Path = CONF_DIR) -> None:
    """Import the sweep's plugins, then check fields against their ranges, names against the registries and fields
    against each other; raise ``ConfigError``."""
    try:
        registry.add_plugins(list(cfg.plugins))
    except (ValueError, ImportError) as exc:
        raise ConfigError(str(exc) if isinstance(exc, ValueError) else f"plugins={list(cfg.plugins)}: {exc}") from None
    check_fields(cfg, SweepConfig)
    for name, variant in cfg.variants.items():
        try:
            variants.Variant(name, variant.stages, variant.skip)
        except ValueError as exc:
            raise ConfigError(f"variants.{name}: {exc}") from None
    if not SWEEP_NAME.fullmatch(cfg.name):
        raise ConfigError(f"name={cfg.name!r}; expected a label of letters, digits, '_', '-', '.' or '+' (at most "
                          "100): it names the sweep's MLflow run and its console lines")
    if cfg.ray.object_store_mb is not None:
        _check_fits("ray.object_store_mb", cfg.ray.object_store_mb * 2**20)
    if cfg.ray.address is not None and not RAY_ADDRESS.fullmatch(cfg.ray.address):
        raise ConfigError(f"ray.address={cfg.ray.address!r}; expected null (an embedded local Ray), 'auto' (the "
                          "cluster this machine is part of), 'host:port' (its head) or 'ray://host:port' (Ray Client)")
    check_tracking_uri("mlflow.tracking_uri=", cfg.mlflow.tracking_uri)
    if not cfg.mlflow.experiment.strip():
        raise ConfigError(f"mlflow.experiment={cfg.mlflow.experiment!r}; expected the name of an MLflow experiment")
    root = Path(cfg.run_root)
    if not cfg.run_root.strip() or root.resolve() == Path(root.resolve().anchor):
        raise ConfigError(f"run_root={cfg.run_root!r}; expected a folder of the sweep's own (made if missing), not "
                          "the current folder's nothing or the filesystem's root")
    if root.exists() and not root.is_dir():
        raise ConfigError(f"run_root={cfg.run_root!r} is a file; expected a folder (made if missing) for the "
                          "sweep's results")
    for folder in cfg.conf_dirs:
        if not Path(folder).is_dir():
            raise ConfigError(f"conf_dirs has {folder!r}, which is not a folder; expected config roots holding "
                              "workload/ YAMLs")
    for where, grid in grids(cfg).items():
        _validate_grid(where, grid, cfg, search_dirs(cfg, conf_dir))


def check_tracking_uri(key: str, uri: Any) -> None:
    """``uri`` None, a path or a URI of a scheme MLflow stores runs under; else a ``ConfigError`` naming ``key``
    (``mlflow.tracking_uri=``, ``--tracking-uri ``) and the URI, its password redacted."""
    if uri is not None and not (isinstance(uri, str) and uri and
                                urllib.parse.urlparse(uri).scheme.split("+")[0] in MLFLOW_SCHEMES):
        raise ConfigError(f"{key}{redact(repr(uri))}; expected null (<run_root>/mlflow.db), a path, or a URI with a "
                          f"scheme MLflow stores runs under: {sorted(s for s in MLFLOW_SCHEMES if s)}")


def _registry_names(kind: str) -> list[str]:
    """The names a grid's ``kind`` axis may list: its registry's, plugins included."""
    from wavealign import kernels, masks, measurers, reorderers

    return {"method": masks.available, "backend": kernels.names, "measure": measurers.names,
            "reorderer": reorderers.names, "hardware": lambda: [*hardware.names(), CPU]}[kind]()


def _validate_grid(where: str, grid: DictConfig, cfg: DictConfig, dirs: list[Path]) -> None:
    from wavealign import placement

    for axis in AXES:
        if len(grid[axis]) == 0:
            raise ConfigError(f"{where}.{axis}=[] is empty; expected at least one value (each list is an axis of the "
                              "grid: an empty one makes no cells)")
    for kind, known in [*((k, _registry_names(k)) for k in ("hardware", *KINDS)), ("variant", sorted(cfg.variants))]:
        for value in grid[kind]:
            if value not in known:
                raise ConfigError(f"{where}.{kind} has unknown {kind} {value!r}; expected one of {known}")
    if grid.cpu_profile not in hardware.names():
        raise ConfigError(f"{where}.cpu_profile={grid.cpu_profile!r}; expected one of {hardware.names()}")
    workloads = {name: group_entry("workload", name, dirs) for name in grid.workload}
    for name, wl in workloads.items():
        if wl.captured is not None and len(grid.seq_k) != 1:
            raise ConfigError(f"{where}.seq_k={list(grid.seq_k)} with workload {name!r}, captured at a fixed length; "
                              "expected one value (the file sets the length)")
    if any(cfg.variants[v].stages in SPATIAL_STAGES for v in grid.variant):  # only these run a reorderer
        _check_latent_orders(where, grid, workloads)
    for k in grid.seq_k:
        if not math.isfinite(k) or k <= 0:
            raise ConfigError(f"{where}.seq_k has {k!r}; expected positive, finite thousands of tokens")
        if k > MAX_SEQ_K:
            raise ConfigError(f"{where}.seq_k has {k:g}: {k * 1000:,.0f} tokens, more than {MAX_SEQ_K * 1000:,} "
                              f"(seq_k counts thousands of tokens: 364 is 364,000; did you mean {k / 1000:g}?)")
    if cfg.ray.address is None:  # the cells run on this machine: its memory bounds them
        _check_cell_sizes(where, grid, workloads)
    for kind in KINDS:
        for name in grid[kind]:
            _check_params(kind, name, grid, where)
    for backend in grid.backend:
        if reasons := placement.refused_everywhere(backend, list(grid.hardware), list(grid.measure)):
            raise ConfigError(f"{where}.backend {backend!r} cannot run on any of {where}.hardware "
                              f"{list(grid.hardware)}: {reasons}")
        _check_backend_options(where, grid, backend)
    _drop_params_of_names_not_run(where, grid, cfg.overrides)


def _check_params(kind: str, name: str, grid: DictConfig, where: str) -> None:
    """The values ``<where>.<kind>_params.<name>`` lists against the parameter schema ``kind`` ``name`` registers
    (``registry.param_types``; none declared: none, unless a backend passes any option through), then its own
    checks on every listed value, as its builds run them. Checks across two params run where a cell builds; a
    backend's launch checks where its combinations are known (``_check_backend_options``)."""
    prefix, found = f"{where}.{kind}_params.{name}", entry(kind, name)
    given = grid[f"{kind}_params"].get(name)
    listed: dict[str, Any] = OmegaConf.to_container(given) if given is not None else {}  # type: ignore[assignment]
    declared = declared_params(kind, name)
    types = registry.param_types(f"{kind} {name!r}", declared, found.types)
    passes_any = kind == "backend" and not declared and any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(found.plan).parameters.values())
    for key, listed_value in listed.items():
        values = listed_value if isinstance(listed_value, list) else [listed_value]
        if key not in types and not passes_any:
            near = suggest(key, list(types))
            known = (f"expected one of {sorted(types)}" + (f"; did you mean {near}?" if near else "") if types else
                     f"expected none: {kind} {name!r} declares no params")
            raise ConfigError(f"{prefix}.{key}={listed_value!r} is not a parameter of {kind} {name!r}; {known}")
        if not values:
            raise ConfigError(f"{prefix}.{key}=[] is empty; expected at least one value (a list is an axis: an empty "
                              "one makes no cells)")
        for value in values:
            if key in types and not fits(value, types[key]):
                raise ConfigError(f"{prefix}.{key}: expected {expected(types[key])}, got {value!r}")
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{prefix}.{key} has {value!r}; expected a finite number")
            if kind != "backend":  # a backend's launch checks need the block size
                try:
                    found.resolve({key: value})
                except ValueError as exc:
                    raise ConfigError(f"{prefix}.{key} has {value!r}: {exc}") from None


def _drop_params_of_names_not_run(where: str, grid: DictConfig, overrides: list[str]) -> None:
    """Parameters of a name the grid does not run: the sweep preset's, for a name the command line replaced
    (grid.method=[xattention] over a preset tuning planted), are dropped; ones the command line gave itself are a
    mistake (a typo'd or forgotten name) and stop the sweep."""
    for kind in KINDS:
        names = list(grid[kind])
        for name in [n for n in grid[f"{kind}_params"] if n not in names]:
            key = f"{where}.{kind}_params.{name}"
            if any(o.lstrip("+~").startswith((f"{key}.", f"{key}=")) for o in overrides):
                raise ConfigError(f"{key}: {kind} {name!r} is not in {where}.{kind} {names}; expected parameters of "
                                  f"a {kind} the grid runs (add {name!r} to {where}.{kind}, or drop these with ~{key})")
            with open_dict(grid[f"{kind}_params"]):
                del grid[f"{kind}_params"][name]


def _check_backend_options(where: str, grid: DictConfig, name: str) -> None:
    """Each combination of the backend's parameters passes its own launch checks (``Backend.check_options``) for
    every mask block size the grid's cells get (``block_size``, else each GPU's default)."""
    check = entry("backend", name).check_options
    if check is None:
        return
    for options in param_combinations(param_axes("backend", name, grid)):
        for block_size in sorted({block_size_for(grid, hw) for hw in grid.hardware}):
            try:
                check(options, block_size)
            except ValueError as exc:
                given = {k: v for k, v in options.items() if v is not None}
                raise ConfigError(f"{where}.backend {name!r} with {given} and block_size {block_size}: {exc}") from None


def _check_fits(what: str, nbytes: int) -> None:
    """``blockmask.check_fits`` (``nbytes`` within this machine's memory) as a ``ConfigError``."""
    from wavealign.blockmask import check_fits

    try:
        check_fits(what, nbytes)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _check_cell_sizes(where: str, grid: DictConfig, workloads: dict[str, DictConfig]) -> None:
    """The largest cell of each workload, at the grid's longest ``seq_k`` and smallest block size, fits in this
    machine's memory (``placement.check_cell_fits``); on a cluster each worker checks its own allocations."""
    from wavealign import placement
    from wavealign.workloads import read_header

    block_size = min(block_size_for(grid, hw) for hw in grid.hardware)
    for name, wl in workloads.items():
        if wl.captured is not None:
            _, _, tokens, head_dim = read_header(wl.captured).shape
        else:
            tokens, head_dim = math.ceil(max(grid.seq_k) * 1000), wl.head_dim
        heads = len(wl.heads) if wl.model is not None or wl.captured is not None else wl.num_heads
        try:
            placement.check_cell_fits(f"{where}: a cell of workload {name!r}", heads, tokens, head_dim, block_size)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def _check_latent_orders(where: str, grid: DictConfig, workloads: dict[str, DictConfig]) -> None:
    """A reorderer that places blocks by their position in the latent video (``latent`` among its step params:
    ``curve``) with a bare-shape workload, which has none: refused here, before ``--dry-run`` says the grid is
    fine, instead of every such cell failing its run (exit 3)."""
    latent_orders = [name for name in grid.reorderer if "latent" in entry("reorderer", name).params]
    bare = [name for name, wl in workloads.items() if wl.model is None and wl.captured is None]
    if latent_orders and bare:
        raise ConfigError(f"{where}.reorderer has {latent_orders[0]!r}, which orders blocks by their place in the "
                          f"latent video (T, H, W), and {where}.workload has {bare[0]!r}, a bare shape with none; "
                          "expected a model preset or captured workload for it (or the reorderer in a grid of its "
                          "own: extra_grids)")

