"""A config root's entries: ``<root>/workload/<name>.yaml``, found in ``conf/`` and then the sweep's ``conf_dirs``,
read as written (bounded, never resolved) against ``WorkloadConfig`` and held to the library's rules for a workload
(``wavealign.workloads.check_workload``). Methods, backends, measurers and reorderers have no entries here: their
registries name them and declare their parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from orchestrator.config_errors import explain
from orchestrator.config_schema import CONF_DIR, ConfigError, WorkloadConfig, check_fields


def search_dirs(cfg: DictConfig, conf_dir: Path = CONF_DIR) -> list[Path]:
    """Where ``group_entry`` looks: ``conf_dir``, then the sweep's ``conf_dirs``."""
    return [Path(conf_dir), *(Path(d) for d in cfg.conf_dirs)]


def entry_path(root: Path, group: str, name: Any) -> Path:
    """``<root>/<group>/<name>.yaml``, where ``name`` is a plain name (no folder separator, no leading dot), so that
    it names a file of that folder; else a ``ConfigError`` (``../../etc/x`` or ``/tmp/x`` read a YAML outside every
    config root). Links a config root holds are its owner's to make and are followed."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.startswith("."):
        raise ConfigError(f"{group} {name!r} is not a name; expected the stem of a conf/{group}/<name>.yaml")
    return Path(root) / group / f"{name}.yaml"


def group_entry(group: str, name: str, dirs: Sequence[Path] = (CONF_DIR,)) -> DictConfig:
    """``<dir>/<group>/<name>.yaml`` from the first of ``dirs`` that has it, against its schema and its rules. The
    file is read through the bounded YAML reader (``wavealign.bounded``: no alias bomb, no Python tags), and an
    interpolation (``${oc.env:TOKEN}``) is refused without resolving it: resolving one could print a secret."""
    from wavealign import bounded, workloads

    found = [path for d in dirs if (path := entry_path(Path(d), group, name)).is_file()]
    if not found:
        known = sorted({p.stem for d in dirs for p in (Path(d) / group).glob("*.yaml")})
        raise ConfigError(f"{group} {name!r} has no conf/{group}/{name}.yaml (searched {[str(d) for d in dirs]}); "
                          f"expected one of {known}")
    path, where = found[0], f"conf/{group}/{name}.yaml"
    try:
        loaded = OmegaConf.create(bounded.check_yaml(bounded.read_text(path, "config entry", bounded.MAX_YAML_BYTES),
                                                     f"config entry {str(path)!r}") or {})
        _refuse_interpolations(OmegaConf.to_container(loaded, resolve=False), where)
        entry = OmegaConf.merge(OmegaConf.structured(WorkloadConfig), loaded)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{where}: {explain(exc)}") from None
    if entry.name != name:
        raise ConfigError(f"{where} declares name {entry.name!r}; expected {name!r}")
    check_fields(entry, WorkloadConfig, f"{where}: ")
    try:
        workloads.check_workload(entry.model, entry.captured, entry.generator, list(entry.heads), entry.layer,
                                 entry.step)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return entry


def _refuse_interpolations(value: Any, where: str, key: str = "") -> None:
    """A ``ConfigError`` for the first value that is an interpolation, named by its key and its text."""
    if isinstance(value, dict | list):
        for k, v in value.items() if isinstance(value, dict) else enumerate(value):
            _refuse_interpolations(v, where, f"{key}[{k}]" if isinstance(value, list) else f"{key}.{k}" if key else k)
    elif isinstance(value, str) and "${" in value:
        raise ConfigError(f"{where}: {key}={value!r} is an interpolation; expected a plain value (a config root's "
                          "entries are read as written, never resolved)")
