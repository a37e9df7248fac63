"""The rules of a composed sweep config that no field's type says: ranges, the names the registries know, and rules
across fields (a backend its grid's hardware cannot run, a length a captured file fixes, a cell too large for this
machine, the library's variants left as they are). The schema's types have been checked when the config was
composed (``config_compose``), each entry's parameters here against its registry entry (``config_params``).
"""

from __future__ import annotations

import itertools
import math
import re
import urllib.parse
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, open_dict

from wavealign import hardware as hardware_registry
from wavealign.orchestrator.compat import SPATIAL_STAGES
from wavealign.orchestrator.config_entries import group_entry, search_dirs
from wavealign.orchestrator.config_params import check_params
from wavealign.orchestrator.config_schema import AXES, CONF_DIR, ConfigError
from wavealign.orchestrator.grid_axes import KINDS, block_size_for, grids, param_axes, param_combinations
from wavealign.orchestrator.redact import redact
from wavealign.records import CPU, ORIGINAL_VARIANT

# timed repetitions (or warm-ups) of one cell: each keeps its time, and 100,000 of the shortest launch (~10 us) is
# already a second; more is a typo that would hold a worker (and its timings' memory) for hours
MAX_REPS = 100_000
# The longest sequence a grid may ask for, in thousands of tokens: ten times the paper's longest (436K); a value
# past it is nearly always tokens typed where thousands were meant, which would fill every worker's memory
MAX_SEQ_K = 4096
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
    """Check names against the registries, numbers against their ranges and fields against each other; raise
    ``ConfigError``."""
    _validate_variants(cfg)
    if not SWEEP_NAME.fullmatch(cfg.name):
        raise ConfigError(f"name={cfg.name!r}; expected a label of letters, digits, '_', '-', '.' or '+' (at most "
                          "100): it names the sweep's MLflow run and its console lines")
    for key in ("batch_cells", "max_cells"):
        if cfg[key] < 1:
            raise ConfigError(f"{key}={cfg[key]}; expected >= 1")
    _validate_ray(cfg.ray)
    check_tracking_uri("mlflow.tracking_uri=", cfg.mlflow.tracking_uri)
    if not cfg.mlflow.experiment.strip():
        raise ConfigError(f"mlflow.experiment={cfg.mlflow.experiment!r}; expected the name of an MLflow experiment")
    if not cfg.run_root.strip() or Path(cfg.run_root).resolve() == Path(Path(cfg.run_root).resolve().anchor):
        raise ConfigError(f"run_root={cfg.run_root!r}; expected a folder of the sweep's own (made if missing), not "
                          "the current folder's nothing or the filesystem's root")
    for folder in cfg.conf_dirs:
        if not Path(folder).is_dir():
            raise ConfigError(f"conf_dirs has {folder!r}, which is not a folder; expected config roots holding "
                              "workload/ YAMLs")
    if Path(cfg.run_root).exists() and not Path(cfg.run_root).is_dir():
        raise ConfigError(f"run_root={cfg.run_root!r} is a file; expected a folder (made if missing) for the "
                          "sweep's results")
    for where, grid in grids(cfg).items():
        _validate_grid(where, grid, cfg, search_dirs(cfg, conf_dir))


def _validate_variants(cfg: DictConfig) -> None:
    """Each variant's stages and skip mode known, and the library's variants as the library defines them."""
    from wavealign import variants

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


def _validate_ray(ray: DictConfig) -> None:
    if ray.max_retries < 0:
        raise ConfigError(f"ray.max_retries={ray.max_retries}; expected >= 0")
    for key, least in (("num_cpus", 1), ("num_gpus", 0), ("object_store_mb", 1)):
        if ray[key] is not None and ray[key] < least:
            raise ConfigError(f"ray.{key}={ray[key]!r}; expected null or an integer >= {least}")
    if ray.object_store_mb is not None:
        _check_fits("ray.object_store_mb", ray.object_store_mb * 2**20)
    for key in ("wait_timeout_s", "worker_start_timeout_s"):
        if not ray[key] > 0:  # nan too; inf waits for ever
            raise ConfigError(f"ray.{key}={ray[key]}; expected > 0")
    if ray.address is not None and not RAY_ADDRESS.fullmatch(ray.address):
        raise ConfigError(f"ray.address={ray.address!r}; expected null (an embedded local Ray), 'auto' (the cluster "
                          "this machine is part of), 'host:port' (its head) or 'ray://host:port' (Ray Client)")


def _check_names(where: str, values, known: list[str]) -> None:
    for value in values:
        if value not in known:
            raise ConfigError(f"{where} has unknown {where.rsplit('.', 1)[-1]} {value!r}; expected one of {known}")


def _registry_names(kind: str) -> list[str]:
    """The names a grid's ``kind`` axis may list: its registry's, plugins included."""
    from wavealign import kernels, masks, measurers, reorderers

    return {"method": masks.available, "backend": kernels.names, "measure": measurers.names,
            "reorderer": reorderers.names}[kind]()


def _validate_grid(where: str, grid: DictConfig, cfg: DictConfig, dirs: list[Path]) -> None:
    from wavealign import launch_order
    from wavealign.blockmask import MAX_SEED

    for axis in AXES:
        if len(grid[axis]) == 0:
            raise ConfigError(f"{where}.{axis}=[] is empty; expected at least one value (each list is an axis of the "
                              "grid: an empty one makes no cells)")
    gpu_ids = hardware_registry.names()
    _check_names(f"{where}.hardware", grid.hardware, [*gpu_ids, CPU])
    for kind in KINDS:
        _check_names(f"{where}.{kind}", grid[kind], _registry_names(kind))
    _check_names(f"{where}.variant", grid.variant, sorted(cfg.variants))
    if grid.cpu_profile not in gpu_ids:
        raise ConfigError(f"{where}.cpu_profile={grid.cpu_profile!r}; expected one of {gpu_ids}")
    for name in grid.workload:
        wl = group_entry("workload", name, dirs)
        _validate_workload(wl)
        if wl.captured is not None and len(grid.seq_k) != 1:
            raise ConfigError(f"{where}.seq_k={list(grid.seq_k)} with workload {name!r}, captured at a fixed length; "
                              "expected one value (the file sets the length)")
    if any(cfg.variants[v].stages in SPATIAL_STAGES for v in grid.variant):  # only these run a reorderer
        _check_latent_orders(where, grid, dirs)
    for k in grid.seq_k:
        if not math.isfinite(k) or k <= 0:
            raise ConfigError(f"{where}.seq_k has {k!r}; expected positive, finite thousands of tokens")
        if k > MAX_SEQ_K:
            raise ConfigError(f"{where}.seq_k has {k:g}: {k * 1000:,.0f} tokens, more than {MAX_SEQ_K * 1000:,} "
                              f"(seq_k counts thousands of tokens: 364 is 364,000; did you mean {k / 1000:g}?)")
    for seed in grid.seed:  # torch's generator seeds, and an int64 column
        _check_range(f"{where}.seed has {seed!r}", seed, 0, MAX_SEED)
    for w in grid.wave_size:
        if w is not None:
            _check_range(f"{where}.wave_size has {w!r}", w, 1, launch_order.MAX_WAVE_SIZE, " or null")
    if grid.block_size is not None:
        _check_range(f"{where}.block_size={grid.block_size!r}", grid.block_size, 1, MAX_SEQ_K * 1000, " or null")
    _check_range(f"{where}.reps={grid.reps!r}", grid.reps, 1, MAX_REPS)
    _check_range(f"{where}.warmup={grid.warmup!r}", grid.warmup, 0, MAX_REPS)
    if cfg.ray.address is None:  # the cells run on this machine: its memory bounds them
        _check_cell_sizes(where, grid, dirs)
    for kind in KINDS:
        for name in grid[kind]:
            check_params(kind, name, grid, where)
    for backend in grid.backend:
        _check_placement(where, grid, backend)
        _check_backend_options(where, grid, backend)
    _drop_params_of_names_not_run(where, grid, cfg.overrides)


def _drop_params_of_names_not_run(where: str, grid: DictConfig, overrides: list[str]) -> None:
    """Parameters of a name the grid does not run: the sweep preset's, for a name the command line replaced
    (grid.method=[xattention] over a preset tuning planted), are dropped; ones the command line gave itself are a
    mistake (a typo'd or forgotten name) and stop the sweep."""
    for kind in KINDS:
        names = list(grid[kind])
        for name in list(grid[f"{kind}_params"]):
            if name in names:
                continue
            key = f"{where}.{kind}_params.{name}"
            if not any(o.lstrip("+~").startswith((f"{key}.", f"{key}=")) for o in overrides):
                with open_dict(grid[f"{kind}_params"]):
                    del grid[f"{kind}_params"][name]
                continue
            raise ConfigError(f"{key}: {kind} {name!r} is not in {where}.{kind} {names}; expected parameters of a "
                              f"{kind} the grid runs (add {name!r} to {where}.{kind}, or drop these with ~{key})")


def _check_range(given: str, value: int, lo: int, hi: int, or_else: str = "") -> None:
    """``value`` (shown as ``given``: ``grid.reps=0``, ``grid.seed has -1``) in [lo, hi]; else a ``ConfigError``."""
    if not lo <= value <= hi:
        raise ConfigError(f"{given}; expected an integer in [{lo}, {hi:,}]{or_else}")


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


def _check_backend_options(where: str, grid: DictConfig, name: str) -> None:
    """Each combination of the backend's parameters passes its own launch checks (``Backend.check_options``) for
    every mask block size the grid's cells get (``block_size``, else each GPU's default)."""
    from wavealign import kernels

    check = kernels.get(name).check_options
    if check is None:
        return
    sizes = {block_size_for(grid, hw) for hw in grid.hardware}
    for options in param_combinations(param_axes("backend", name, grid)):
        for block_size in sorted(sizes):
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
            heads = len(wl.heads) if wl.model is not None else wl.num_heads
            tokens, head_dim = math.ceil(longest * 1000), wl.head_dim
        blocks = math.ceil(tokens / block_size)
        _check_fits(f"{where}: a cell of workload {name!r} ({heads} heads x {tokens:,} tokens x {head_dim}, "
                    f"block_size {block_size})", 3 * 2 * heads * tokens * head_dim + heads * blocks * blocks)


def _check_latent_orders(where: str, grid: DictConfig, dirs: list[Path]) -> None:
    """A reorderer that places blocks by their position in the latent video (``latent`` among its step params:
    ``curve``) with a bare-shape workload, which has none: refused here, before ``--dry-run`` says the grid is
    fine, instead of every such cell failing its run (exit 3)."""
    from wavealign import reorderers

    latent_orders = [name for name in grid.reorderer if "latent" in reorderers.get(name).params]
    if not latent_orders:
        return
    for name in grid.workload:
        wl = group_entry("workload", name, dirs)
        if wl.model is None and wl.captured is None:
            raise ConfigError(f"{where}.reorderer has {latent_orders[0]!r}, which orders blocks by their place in the "
                              f"latent video (T, H, W), and {where}.workload has {name!r}, a bare shape with none; "
                              "expected a model preset or captured workload for it (or the reorderer in a grid of "
                              "its own: extra_grids)")


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
