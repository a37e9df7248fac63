"""The sweep's config (Hydra 1.3): ``load(overrides)`` composes ``conf/config.yaml`` with Hydra-style overrides
(``sweep=paper_h100 grid.seq_k=[148,364] ray.address=auto``), brings old spellings to today's, imports the sweep's
plugins and validates it, before anything runs; every refusal is a ``ConfigError`` naming the key, the value and
what was expected.

Each job is a module of its own:

- ``config_schema``: the structured configs (dataclasses with real types), the one home of every default;
- ``config_compose``: overrides checked against the schema, Hydra's composition, its refusals in our words
  (``config_errors``);
- ``compat``: the first spellings of a sweep (and of a dataset row), upgraded once where they enter;
- ``config_plugins``: the ``plugins`` a sweep names, imported here and on every worker;
- ``config_validate``: the rules no type says (ranges, registry names, rules across fields), each grid entry's
  parameters held to the schema its registry entry gives (``config_params``);
- ``config_entries``: the workload YAMLs of ``conf/`` and the sweep's ``conf_dirs``.

The grid's axes, which expansion and validation both read, are ``grid_axes``.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from wavealign.orchestrator import compat
from wavealign.orchestrator.config_compose import check_schema, compose
from wavealign.orchestrator.config_entries import group_entry as group_entry
from wavealign.orchestrator.config_plugins import load_plugins
from wavealign.orchestrator.config_schema import CONF_DIR as CONF_DIR
from wavealign.orchestrator.config_schema import ConfigError as ConfigError
from wavealign.orchestrator.config_schema import GridConfig as GridConfig
from wavealign.orchestrator.config_validate import validate as validate
from wavealign.orchestrator.redact import redact_tree

# overrides that say how to run, not what: left out of the repro commands a sweep's rows carry
_NOT_REPRODUCED = ("only_cells=", "force=")


def load(overrides: list[str] | None = None, conf_dir: Path = CONF_DIR) -> DictConfig:
    """Compose ``conf/config.yaml`` with ``overrides``, upgrade its first spellings, import its plugins and validate
    it; raises ``ConfigError``."""
    given = list(overrides or [])
    cfg = compose(compat.upgrade_overrides(given), conf_dir)
    compat.upgrade_config(cfg)
    check_schema(cfg)
    cfg.overrides = [o for o in given if not o.startswith(_NOT_REPRODUCED)]
    load_plugins(cfg)
    validate(cfg, conf_dir)
    return cfg


def to_yaml(cfg: DictConfig) -> str:
    """The resolved config as YAML, every URI's password and token redacted: what a sweep writes
    (``sweeps/<id>/config.yaml``, an MLflow artifact too) and ``--cfg job`` prints."""
    return OmegaConf.to_yaml(OmegaConf.create(redact_tree(OmegaConf.to_container(cfg, resolve=True))))
