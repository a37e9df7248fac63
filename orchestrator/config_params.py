"""Each grid entry's parameters held to a schema derived from its registry entry, when the config loads.

A method, backend, measurer or reorderer declares its parameters once, in its own module (``params`` defaults and
``checks``); ``wavealign.registry.param_types`` reads their types from that. Here those types become a structured
config of axes (every parameter a list of its type), and OmegaConf refuses a key the entry lacks or a value of the
wrong type, named by the grid key and the entry (``grid.method_params.xattention.threshold: expected a number, got
'abc'``). The entry's own checks then run on every listed value (ranges, choices), as its builds run them, so a bad
value stops the sweep here instead of failing every cell.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from wavealign import registry
from wavealign.orchestrator.config_schema import ConfigError, expected
from wavealign.orchestrator.grid_axes import declared_params, entry


def check_params(kind: str, name: str, grid: DictConfig, where: str) -> None:
    """The values ``<where>.<kind>_params.<name>`` lists against ``kind`` ``name``'s schema, then its own checks: no
    undeclared key (none declared: none, unless the backend passes any option through), no value of another type,
    no empty axis, no number that is not finite. Checks across two params (flexprefill's max_budget >= min_budget)
    run where a cell builds its mask; a backend's launch checks where its combinations are known
    (``config_validate``)."""
    prefix = f"{where}.{kind}_params.{name}"
    given = grid[f"{kind}_params"].get(name)
    listed: dict[str, Any] = OmegaConf.to_container(given) if given is not None else {}  # type: ignore[assignment]
    axes = {key: value if isinstance(value, list) else [value] for key, value in listed.items()}
    found = entry(kind, name)
    if not (kind == "backend" and not found.params and _passes_any_option(found.plan)):
        _check_schema(kind, name, prefix, listed, axes)
    own = getattr(found, "resolve", None)  # a backend has none: its launch checks need the block size
    for key, values in axes.items():
        if not values:
            raise ConfigError(f"{prefix}.{key}=[] is empty; expected at least one value (a list is an axis: an empty "
                              "one makes no cells)")
        for value in values:
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{prefix}.{key} has {value!r}; expected a finite number")
            if own is not None:
                try:
                    own({key: value})
                except ValueError as exc:
                    raise ConfigError(f"{prefix}.{key} has {value!r}: {exc}") from None


def _check_schema(kind: str, name: str, prefix: str, listed: dict[str, Any], axes: dict[str, list[Any]]) -> None:
    """``axes`` merged into the structured config of ``kind`` ``name``'s parameter axes: OmegaConf refuses what the
    schema has no key or no type for."""
    declared = declared_params(kind, name)
    types = registry.param_types(declared, getattr(entry(kind, name), "checks", {}))
    schema = dataclasses.make_dataclass("ParamAxes", [(key, list[kind_], dataclasses.field(default_factory=list))
                                                      for key, kind_ in types.items()])
    try:
        OmegaConf.merge(OmegaConf.structured(schema), axes)
    except ConfigKeyError as exc:
        key = str(exc.key)
        raise ConfigError(f"{prefix}.{key}={listed[key]!r} is not a parameter of {kind} {name!r}; "
                          f"{_declared(kind, name, declared, key)}") from None
    except ValidationError as exc:
        key = str(exc.full_key).partition("[")[0]
        raise ConfigError(f"{prefix}.{key}: expected {expected(types[key])}, got {exc.value!r}") from None


def _passes_any_option(plan: Any) -> bool:
    """Whether a backend's planner takes any option (``**options``, e.g. FlexAttention's kernel_options), which
    declaring none cannot list."""
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(plan).parameters.values())


def _declared(kind: str, name: str, base: dict[str, Any], key: str) -> str:
    if not base:
        return f"expected none: {kind} {name!r} declares no params"
    close = difflib.get_close_matches(key, list(base), n=1)
    return f"expected one of {sorted(base)}" + (f"; did you mean {close[0]}?" if close else "")
