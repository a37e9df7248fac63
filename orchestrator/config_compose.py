"""Composing the sweep config: ``conf/config.yaml`` and a sweep preset, Hydra-style overrides on top, against the
schema (``config_schema``), every refusal one line naming the override and what to type instead.

Each override is read by Hydra's own grammar and tried against the schema's structured config before composing
(``check_override``: a key no field has, a value of the wrong type, answered without importing the library), then
Hydra composes; what it refuses is said from its exception's fields (``config_errors``). Three rules no type says
stay here: Hydra's own settings do not apply to a sweep, a switch takes only true or false (OmegaConf reads
``resume=2`` as true), and no field may be deleted.
"""

from __future__ import annotations

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
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

from wavealign.orchestrator.config_errors import config_paths, message, nearest_key, not_a_key, typed, unknown_key
from wavealign.orchestrator.config_schema import (
    CONF_DIR,
    ConfigError,
    SweepConfig,
    key_paths,
    register_schema,
    schema_field,
)

GRAMMAR_URL = "https://hydra.cc/docs/1.2/advanced/override_grammar/basic"


def compose(overrides: list[str], conf_dir: Path = CONF_DIR) -> DictConfig:
    """``conf/config.yaml`` composed with ``overrides`` (each checked first: ``check_override``); ``key={}`` empties
    the map ``key``. Raises ``ConfigError``."""
    for override in overrides:
        check_override(override, conf_dir)
    register_schema()  # the schema's variants import the library (and torch): after what the schema alone refuses
    try:
        cfg = _compose(conf_dir, overrides)
    except MissingConfigException as exc:  # sweep=<name> with no conf/sweep/<name>.yaml
        group, _, name = str(exc.missing_cfg_file).partition("/")
        raise ConfigError(f"{group}={name} has no conf/{group}/{name}.yaml; expected one of {exc.options}") from None
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(_explain(exc, conf_dir, overrides)) from None
    _empty_maps(cfg, overrides)
    check_no_environment(OmegaConf.to_container(cfg, resolve=False))
    return cfg


# OmegaConf's resolvers that read the environment (``env`` is its old spelling): a sweep records its resolved config
_ENVIRONMENT = re.compile(r"\$\{\s*(?:oc\.env|env)\s*:\s*([^,}]*)")


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


def check_schema(cfg: DictConfig) -> None:
    """The composed config merged into the schema: a key Hydra's ``+key=value`` added that no field has (Hydra adds
    keys even to a struct config, so ``+grid.seeds=[0,1]`` composes) is refused with the field it most likely meant."""
    try:
        OmegaConf.merge(OmegaConf.structured(SweepConfig), OmegaConf.to_container(cfg))
    except (ConfigKeyError, ConfigAttributeError) as exc:
        raise ConfigError(unknown_key(exc, cfg)) from None
    except ValidationError as exc:
        raise ConfigError(typed(exc)) from None


def check_override(override: str, conf_dir: Path = CONF_DIR) -> None:
    """What an override may not say, before composing: text Hydra's grammar does not read; a comma list outside
    brackets (Hydra's multirun sweep: here a list is an axis of one sweep); Hydra's own settings
    (``hydra.run.dir=``: the sweep writes under ``run_root``, never in Hydra's output folders); a key no field of the
    schema has (``seq_k=`` for ``grid.seq_k=``); a deleted field; a switch given anything but true or false; and a
    value its field's type refuses, tried on the schema's structured config. An entry of a map (a preset's
    ``extra_grids``, a method's parameters) and a key added with ``+`` are the composed config's to check."""
    parsed = _parsed(override)
    key = parsed.key_or_group
    check_no_environment(override.partition("=")[2], key)  # before Hydra and torch load: the text says it
    if key == "hydra" or key.startswith(("hydra.", "hydra/")):
        raise ConfigError(f"{override}: Hydra's own settings do not apply to a sweep (it writes under run_root, "
                          "never in Hydra's output folders); expected sweep keys (run_root=<folder> for where "
                          "results go)")
    if parsed.is_sweep_override():
        value = override.partition("=")[2]
        raise ConfigError(f"{key}={value}: a list is written in brackets, {key}=[{value}] (each value is a cell of "
                          f"this one sweep; to give one text with commas, quote it: {key}='{value}')")
    if (group := Path(conf_dir) / key).is_dir():  # a config group (sweep=): one of its YAMLs, before the library loads
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
        return
    if parsed.is_add() or parsed.is_force_add():
        return
    if found is None:
        raise ConfigError(not_a_key(override, nearest_key(key, key_paths())))
    if found.owner is None or found.in_map:
        return
    value = parsed.value()
    if found.kind is bool and not isinstance(value, bool):
        raise ConfigError(f"{override}: {key} is a switch; expected {key}=true or {key}=false")
    if typing.get_origin(found.kind) is dict and not isinstance(value, dict):
        # OmegaConf cannot merge a list or a scalar into a map: a ConfigTypeError traceback, before the typed config
        raise ConfigError(f"{override}: {key} is a map; expected {key}={{name: ...}} ({key}={{}} for none)")
    try:
        OmegaConf.update(OmegaConf.structured(SweepConfig(variants={})), key, value, merge=True)
    except ValidationError as exc:
        raise ConfigError(typed(exc, override)) from None


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


def _explain(exc: BaseException, conf_dir: Path, overrides: list[str]) -> str:
    """Hydra's composition error in this project's words, from the OmegaConf error beneath it: a value of the wrong
    type in an entry of a map (``config_errors.typed``), a key the composed config lacks (``_missing_key_hint``).
    An error of another kind is passed on as ``config: <message>``."""
    cause = exc if isinstance(exc, OmegaConfBaseException) else exc.__cause__
    path = str(getattr(cause, "full_key", "") or "").partition("[")[0]
    if isinstance(cause, ValidationError) and path:
        return typed(cause, next((o for o in overrides if _key(o) == path), None))
    given = next((o for o in overrides if _key(o) == path or _key(o).startswith(f"{path}.")), None)
    if isinstance(cause, ConfigKeyError | ConfigAttributeError) and path and given is not None:
        return _missing_key_hint(path, given, conf_dir, overrides) or f"config: {message(exc)}"
    return f"config: {message(exc)}"


def _key(override: str) -> str:
    """The dotted key an override sets (``+grid.seq_k=[1]`` -> ``grid.seq_k``)."""
    return override.lstrip("+~").partition("=")[0]


def _missing_key_hint(path: str, given: str, conf_dir: Path, overrides: list[str]) -> str | None:
    """What to type instead of an override ``given`` of a key the config lacks (``path``, the first missing part):
    ``+`` to give a method, backend, measurer or reorderer parameters its sweep preset does not set, else the
    nearest key over the full dotted paths of the config composed without that override."""
    parent, _, key = path.rpartition(".")
    if parent.endswith("_params"):  # a name the preset gives no parameters: a new entry of the map
        return (f"{given}: {parent.rpartition('.')[2].removesuffix('_params')} {key!r} has no parameters set here; "
                f"to give some, add them: +{given}")
    try:
        composed = _compose(conf_dir, [o for o in overrides if o is not given])
    except (HydraException, OmegaConfBaseException):
        return None
    return not_a_key(given, nearest_key(_key(given), config_paths(composed)))


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


def override_keys(conf_dir: Path = CONF_DIR) -> list[str]:
    """What an override may set, short of an entry of a map: every key the schema declares, and the config groups
    of ``conf_dir`` (``sweep=``)."""
    return [*key_paths(), *sorted(p.name for p in Path(conf_dir).iterdir() if p.is_dir())]
