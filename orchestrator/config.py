"""The sweep's config (Hydra 1.3): ``load(overrides)`` composes ``conf/config.yaml`` with Hydra-style overrides
(``sweep=paper_h100 grid.seq_k=[148,364] ray.address=auto``), in today's spelling, and validates it, before anything
runs; every refusal is a ``ConfigError`` naming the key, the value and what was expected.

- ``config_schema``: the structured configs, the one home of every default, range and choice;
- ``config_compose``: the overrides checked, Hydra's composition, the first spellings of a sweep upgraded;
- ``config_errors``: Hydra's and OmegaConf's refusals in one line (``explain``), the key meant (``suggest``);
- ``config_validate``: the sweep's plugins, then the rules no type says (registry names, each entry's parameters
  against the schema it registers, rules across fields);
- ``config_entries``: the workload YAMLs of ``conf/`` and the sweep's ``conf_dirs``.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from orchestrator.config_compose import compose
from orchestrator.config_entries import group_entry as group_entry
from orchestrator.config_schema import CONF_DIR as CONF_DIR
from orchestrator.config_schema import ConfigError as ConfigError
from orchestrator.config_schema import GridConfig as GridConfig
from orchestrator.config_validate import validate as validate
from orchestrator.redact import redact_tree

# overrides that say how to run, not what: left out of the repro commands a sweep's rows carry
_NOT_REPRODUCED = ("only_cells=", "force=")


def load(overrides: list[str] | None = None, conf_dir: Path = CONF_DIR) -> DictConfig:
    """Compose ``conf/config.yaml`` with ``overrides`` and validate it; raises ``ConfigError``."""
    given = list(overrides or [])
    cfg = compose(given, conf_dir)
    cfg.overrides = [o for o in given if not o.startswith(_NOT_REPRODUCED)]
    validate(cfg, conf_dir)
    return cfg


def to_yaml(cfg: DictConfig) -> str:
    """The resolved config as YAML, every URI's password and token redacted: what a sweep writes
    (``sweeps/<id>/config.yaml``, an MLflow artifact too) and ``--cfg job`` prints."""
    return OmegaConf.to_yaml(OmegaConf.create(redact_tree(OmegaConf.to_container(cfg, resolve=True))))
