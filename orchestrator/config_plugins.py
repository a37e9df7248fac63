"""A sweep's plugins: the modules its ``plugins`` key names, imported on the driver now and on every worker (through
``WAVEALIGN_PLUGINS``), so that the backends, methods, measurers and reorderers they register are the registries'
entries like any other: named by a grid, their parameters and types declared by their own modules."""

from __future__ import annotations

import os
import re

from omegaconf import DictConfig

from wavealign import registry
from wavealign.orchestrator.config_schema import ConfigError

MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def load_plugins(cfg: DictConfig) -> None:
    """Import the modules ``cfg.plugins`` names, here and (through ``WAVEALIGN_PLUGINS``) on every worker."""
    if not cfg.plugins:
        return
    for name in cfg.plugins:
        if not MODULE_NAME.fullmatch(name):
            raise ConfigError(f"plugins has {name!r}; expected the dotted name of an importable module "
                              "(my_package.backends), not a path")
    known = registry.plugin_modules()
    os.environ[registry.PLUGINS_ENV] = ",".join([*known, *(p for p in cfg.plugins if p not in known)])
    try:
        registry.import_plugins()
    except ImportError as exc:
        raise ConfigError(f"plugins={list(cfg.plugins)}: {exc}") from None
