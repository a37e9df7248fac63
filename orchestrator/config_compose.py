"""Composing the sweep config: ``conf/config.yaml`` and a sweep preset, Hydra-style overrides on top, every refusal
one line naming the override and what to type instead. Each override is held to what no type says
(``check_override``); Hydra then composes, checking each value against its field's type (refusals said by
``config_errors.explain``). A sweep's first spellings become today's where they enter (``upgrade_overrides``,
``upgrade_config``):

- ``backend: [sim]`` with ``backend_params.sim.kernel: K`` (an axis) is ``backend: [K]`` with ``measure:
  [simulated]``, the sim backend's other params its ``measure_params.simulated``; a grid that lists real backends
  beside ``sim`` keeps them and its simulated cells move to an extra grid ``<name>_simulated``;
- ``ncu: true`` on a grid measures its ``timed`` cells with ``ncu``.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from orchestrator.config_errors import explain, suggest
from orchestrator.config_schema import (
    CONF_DIR,
    ConfigError,
    GridConfig,
    SweepConfig,
    key_paths,
    schema_field,
)
from orchestrator.dataset_compat import NCU_SWITCH, SIM_BACKEND, SIM_DEFAULT_KERNEL, SIM_KERNEL
from orchestrator.grid_axes import grids

GRAMMAR_URL = "https://hydra.cc/docs/1.2/advanced/override_grammar/basic"
# OmegaConf's resolvers that read the environment (``env`` is its old spelling): a sweep records its resolved config
_ENVIRONMENT = re.compile(r"\$\{\s*(?:oc\.env|env)\s*:\s*([^,}]*)")


def compose(overrides: list[str], conf_dir: Path = CONF_DIR) -> DictConfig:
    """``conf/config.yaml`` composed with ``overrides`` in today's spelling; ``key={}`` empties the map ``key``."""
    overrides = upgrade_overrides(overrides)
    for override in overrides:
        check_override(override, conf_dir)
    try:
        cfg = _compose(conf_dir, overrides)
    except MissingConfigException as exc:  # a preset's defaults name a YAML that is not there
        group, _, name = str(exc.missing_cfg_file).partition("/")
        raise ConfigError(f"{group}={name} has no conf/{group}/{name}.yaml; expected one of {exc.options}") from None
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(_explain_composing(exc, conf_dir, overrides)) from None
    _empty_maps(cfg, overrides)
    check_no_environment(OmegaConf.to_container(cfg, resolve=False))
    upgrade_config(cfg)
    return cfg


def check_no_environment(value: Any, where: str = "") -> None:
    """Refuse an interpolation that reads an environment variable (``${oc.env:SECRET}``) anywhere in the config: its
    value would be written into everything the sweep records (``.lock``, ``config.yaml``, ``summary.txt``, every
    Parquet row, ``mlflow.db``), which no redaction can know to hide."""
    if isinstance(value, str):
        if found := _ENVIRONMENT.search(value):
            raise ConfigError(f"{where}={value!r}: reads the environment variable {found[1].strip()} into what the "
                              "sweep records (config.yaml, rows, MLflow); expected the value itself (an MLflow "
                              "password goes in MLFLOW_TRACKING_PASSWORD, which is never recorded)")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_no_environment(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_no_environment(item, f"{where}[{index}]")


def check_override(override: str, conf_dir: Path = CONF_DIR) -> None:
    """What an override may not say, before composing: text Hydra's grammar does not read, a comma list outside
    brackets (Hydra's multirun), Hydra's own settings, a preset with no YAML, a key no field has (``+`` or not), a
    deleted field, a switch given anything but true or false (OmegaConf reads ``resume=2`` as true), a scalar for a
    map. An entry of a map (a preset's ``extra_grids``, a method's parameters) is the composed config's to check."""
    parsed = _parsed(override)
    key, value = parsed.key_or_group, override.partition("=")[2]
    check_no_environment(value, key)
    if key == "hydra" or key.startswith(("hydra.", "hydra/")):
        raise ConfigError(f"{override}: Hydra's own settings do not apply to a sweep (it writes under run_root, "
                          "never in Hydra's output folders); expected sweep keys (run_root=<folder> for where "
                          "results go)")
    if parsed.is_sweep_override():
        raise ConfigError(f"{key}={value}: a list is written in brackets, {key}=[{value}] (each value is a cell of "
                          f"this one sweep; to give one text with commas, quote it: {key}='{value}')")
    if (group := Path(conf_dir) / key).is_dir():  # a config group (sweep=): one of its YAMLs
        name = parsed.value()
        if isinstance(name, str) and not parsed.is_delete() and not (group / f"{name}.yaml").is_file():
            raise ConfigError(f"{key}={name} has no conf/{key}/{name}.yaml; expected one of "
                              f"{sorted(p.stem for p in group.glob('*.yaml'))}")
        return
    found = schema_field(key)
    if parsed.is_delete():
        if found is not None and found.owner is not None:
            empty = f" (none: {key}={{}})" if typing.get_origin(found.kind) is dict else ""
            raise ConfigError(f"~{key}: {key} cannot be deleted; expected it set{empty}")
    elif parsed.is_add() or parsed.is_force_add():
        if found is None and not _is_ncu_switch(override.lstrip("+")):  # Hydra adds keys even to a struct config
            raise ConfigError(_not_a_field(key, parsed.value()))
    elif found is None:
        near = suggest(key, key_paths())
        raise ConfigError(_not_a_key(override, near))
    elif found.owner is not None and not found.in_map:
        if found.kind is bool and not isinstance(parsed.value(), bool):
            raise ConfigError(f"{override}: {key} is a switch; expected {key}=true or {key}=false")
        if typing.get_origin(found.kind) is dict and not isinstance(parsed.value(), dict):
            raise ConfigError(f"{override}: {key} is a map; expected {key}={{name: ...}} ({key}={{}} for none)")


def _not_a_field(key: str, value: Any) -> str:
    """A key added with ``+`` that its dataclass has no field for, with the sibling it most likely meant."""
    parent = key.rpartition(".")[0]
    holder = schema_field(parent) if parent else None
    owner = holder.kind if holder is not None and dataclasses.is_dataclass(holder.kind) else SweepConfig
    names = list(typing.get_type_hints(owner))
    near = suggest(key, [f"{parent}.{name}" if parent else name for name in names])
    return f"{key}={value!r} is not a sweep config key; " + (f"did you mean {near}?" if near else
                                                             f"expected one of {sorted(names)}")


def _not_a_key(given: str, near: str | None) -> str:
    """An override ``given`` whose key the config lacks, with the key it most likely meant."""
    value = given.partition("=")[2]
    return f"{given} is not a sweep config key; " + (f"did you mean {near}={value}?" if near else
                                                     "see wavealign sweep --cfg job for the keys")


def _parsed(override: str) -> Override:
    """``override`` as Hydra's override grammar reads it; text it does not read is a ``ConfigError``."""
    try:
        return OverridesParser.create().parse_overrides([override])[0]
    except HydraException:
        raise ConfigError(f"{override!r} is not a KEY=VALUE override; expected e.g. grid.seq_k=[148,364] (lists in "
                          f"brackets, maps in braces, text with spaces or commas quoted; {GRAMMAR_URL})") from None


def _compose(conf_dir: Path, overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3", job_name="wavealign-sweep"):
        return hydra_compose(config_name="config", overrides=overrides)


def _key(override: str) -> str:
    """The dotted key an override sets (``+grid.seq_k=[1]`` -> ``grid.seq_k``)."""
    return override.lstrip("+~").partition("=")[0]


def _explain_composing(exc: BaseException, conf_dir: Path, overrides: list[str]) -> str:
    """Hydra's refusal of ``overrides``: ``explain``'s, or for a key the composed config lacks, ``+`` to give an
    entry parameters its preset does not set, else the nearest key of the config composed without it."""
    cause = exc if isinstance(exc, OmegaConfBaseException) else exc.__cause__
    path = str(getattr(cause, "full_key", "") or "").partition("[")[0]
    given = next((o for o in overrides if _key(o) == path or _key(o).startswith(f"{path}.")), None)
    if not (isinstance(cause, ConfigKeyError | ConfigAttributeError) and path and given is not None):
        return explain(exc, next((o for o in overrides if _key(o) == path), None) if path else None)
    parent, _, key = path.rpartition(".")
    if parent.endswith("_params"):  # a name the preset gives no parameters: a new entry of the map
        return (f"{given}: {parent.rpartition('.')[2].removesuffix('_params')} {key!r} has no parameters set here; "
                f"to give some, add them: +{given}")
    try:
        composed = _compose(conf_dir, [o for o in overrides if o is not given])
    except (HydraException, OmegaConfBaseException):
        return explain(exc)
    return _not_a_key(given, suggest(_key(given), key_paths(composed)))


def _empty_maps(cfg: DictConfig, overrides: list[str]) -> None:
    """``key={}`` empties the map ``key`` (``extra_grids={}``: ``grid`` alone), where Hydra would merge it."""
    for override in overrides:
        key, sep, value = override.partition("=")
        if sep and value.strip() == "{}" and not key.startswith(("+", "~")) and \
                isinstance(OmegaConf.select(cfg, key), DictConfig):
            parent, _, name = key.rpartition(".")
            with open_dict(cfg):
                (OmegaConf.select(cfg, parent) if parent else cfg)[name] = {}


def override_keys(conf_dir: Path = CONF_DIR) -> list[str]:
    """What an override may set, short of a map's entry: the schema's keys and ``conf_dir``'s groups (``sweep=``)."""
    return [*key_paths(), *sorted(p.name for p in Path(conf_dir).iterdir() if p.is_dir())]


def upgrade_overrides(overrides: list[str]) -> list[str]:
    """``overrides`` with the first spelling of Nsight Compute (``grid.ncu=true``: a key the schema lacks) added with
    ``+``, for ``upgrade_config``."""
    for override in overrides:
        key, _, value = override.partition("=")
        if _is_ncu_switch(override) and value.strip().lower() not in ("true", "false"):
            raise ConfigError(f"{override}: {key} is a switch; expected {key}=true or {key}=false (or today's "
                              f"{key.rpartition('.')[0]}.measure=[ncu])")
    return [f"+{o}" if _is_ncu_switch(o) else o for o in overrides]


def _is_ncu_switch(override: str) -> bool:
    segments = override.partition("=")[0].split(".")
    return segments == ["grid", NCU_SWITCH] or (len(segments) == 3 and segments[0] == "extra_grids"
                                                 and segments[2] == NCU_SWITCH)


def upgrade_config(cfg: DictConfig) -> None:
    """A composed sweep config in today's spelling (the module docstring lists the rewrites), in place."""
    with open_dict(cfg):
        for where, grid in list(grids(cfg).items()):
            if NCU_SWITCH in grid:
                with open_dict(grid):  # a key today's schema lacks: Hydra added it (upgrade_overrides)
                    profiled = grid[NCU_SWITCH]
                    del grid[NCU_SWITCH]
                if profiled:
                    grid.measure = ["ncu" if m == "timed" else m for m in grid.measure]
            if SIM_BACKEND not in grid.backend:
                continue
            sim = OmegaConf.to_container(grid.backend_params.get(SIM_BACKEND) or OmegaConf.create({}))
            modelled = sim.pop(SIM_KERNEL, SIM_DEFAULT_KERNEL)  # type: ignore[union-attr]
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
