"""The axes of a sweep's grids, read from a composed config: which grids there are, each entry's parameter axes
(its registry entry's defaults under the values the grid lists), their combinations, and the block size and profile
GPU a cell on some hardware takes.

Grid expansion (``grid``) and validation (``config_validate``) both read the axes here, so neither imports the other.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from omegaconf import DictConfig, OmegaConf

from wavealign import hardware as hardware_registry
from wavealign.records import CPU

# the kinds of entry a grid names: each an axis (``grid.<kind>``), a registry (``entry``) and a map of parameter axes
# (``grid.<kind>_params``)
KINDS = ("method", "backend", "measure", "reorderer")


def grids(cfg: DictConfig) -> dict[str, DictConfig]:
    """The sweep's grids by name: ``grid`` and each of ``extra_grids``."""
    return {"grid": cfg.grid, **{f"extra_grids.{k}": v for k, v in cfg.extra_grids.items()}}


def entry(kind: str, name: str) -> Any:
    """The registry entry ``kind`` (method, backend, measure or reorderer) ``name``: a ``masks.MaskMethod``,
    ``kernels.Backend``, ``measurers.Measurer`` or ``reorderers.Reorderer``."""
    from wavealign import kernels, masks, measurers, reorderers

    return {"method": masks.get, "backend": kernels.get, "measure": measurers.get, "reorderer": reorderers.get}[kind](
        name)


def declared_params(kind: str, name: str) -> dict[str, Any]:
    """What ``kind`` ``name`` declares a sweep may set, with its defaults: the entry's own module is the one place
    they are written (a method's workload identity, filled from the cell, left out)."""
    from wavealign import masks

    params = entry(kind, name).params
    return {k: v for k, v in params.items() if not (kind == "method" and k in masks.IDENTITY_PARAMS)}


def param_axes(kind: str, name: str, grid: DictConfig) -> dict[str, list[Any]]:
    """The parameter axes of ``kind`` ``name`` in a grid: each declared parameter at its default (one value), under
    ``<kind>_params.<name>`` of the grid (a list is an axis, a scalar one value). The values were checked when the
    config loaded (``config_validate``)."""
    given = grid[f"{kind}_params"].get(name)
    listed: dict[str, Any] = OmegaConf.to_container(given) if given is not None else {}  # type: ignore[assignment]
    return {**{k: [v] for k, v in declared_params(kind, name).items()},
            **{k: v if isinstance(v, list) else [v] for k, v in listed.items()}}


def param_combinations(axes: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """{a: [1, 2], b: [3]} -> [{a: 1, b: 3}, {a: 2, b: 3}]."""
    keys = sorted(axes)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(axes[k] for k in keys))]


def axis_product(axes: dict[str, list[Any]]) -> int:
    """How many combinations ``param_combinations`` gives, without making them."""
    return math.prod(len(values) for values in axes.values())


def profile_hardware(grid: DictConfig, hw: str) -> str:
    """The GPU whose figures a cell on ``hw`` takes: ``hw`` itself, or ``cpu_profile`` for a CPU cell."""
    return grid.cpu_profile if hw == CPU else hw


def block_size_for(grid: DictConfig, hw: str) -> int:
    """A cell's mask block size: the grid's ``block_size``, else its profile GPU's default."""
    return int(grid.block_size or hardware_registry.get(profile_hardware(grid, hw)).default_block_size)
