"""OmegaConf's refusals in this project's words: one line naming the key, the value and what its field takes.

An OmegaConf error carries what it refused (``full_key``, ``value``, the dataclass or list type that refused it), so
the message is built from those and the schema's own types, never by reading OmegaConf's or Hydra's text. Also here:
the nearest key a mistyped one most likely meant, over full dotted paths.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException, ValidationError

from wavealign.orchestrator.config_schema import GridConfig, expected, field_default, plural


def describe(exc: BaseException, given: str | None = None) -> str:
    """An OmegaConf error as one line: a value of the wrong type as ``typed`` says it, another kind as OmegaConf's
    own message (``message``). ``given`` is the override that carried the value, as typed, where there was one."""
    if isinstance(exc, ValidationError) and exc.full_key:
        return typed(exc, given)
    return message(exc)


def typed(exc: ValidationError, given: str | None = None) -> str:
    """A value the schema's type refused: ``grid.reps=three: expected an integer``; a list given one value,
    ``grid.seq_k=148: a grid axis is a list; expected grid.seq_k=[148]``; an item of a list,
    ``grid.wave_size has inf; expected an integer or null``."""
    path = str(exc.full_key).partition("[")[0]
    shown = given.partition("=")[2] if given else repr(exc.value)
    if exc.object_type is list:  # an item of a list field: its reference type is list[item]
        return f"{path} has {exc.value!r}; expected {expected(typing.get_args(exc.ref_type)[0])}"
    owner, key = exc.object_type, str(exc.key)
    hint = typing.get_type_hints(owner).get(key) if dataclasses.is_dataclass(owner) else None
    if typing.get_origin(hint) is not list:
        return f"{path}={shown}: expected {expected(hint)}"
    what = "a grid axis" if owner is GridConfig else path
    item = typing.get_args(hint)[0]
    if _fits(exc.value, item):
        return f"{path}={shown}: {what} is a list; expected {path}=[{shown}]"
    example = ",".join(str(v) for v in field_default(owner, key))
    return f"{path}={shown}: {what} is a list of {plural(item)}; expected e.g. {path}=[{example}]"


def _fits(value: Any, kind: Any) -> bool:
    """Whether ``value`` is one item of type ``kind`` (an integer is a number; a switch is no number)."""
    kinds = tuple(k for k in (typing.get_args(kind) or (kind,)) if k is not type(None))
    if isinstance(value, bool):
        return bool in kinds
    return isinstance(value, kinds) or (float in kinds and isinstance(value, int))


def message(exc: BaseException) -> str:
    """Hydra's and OmegaConf's message without their trailing full-key/object-type context lines."""
    text = str(exc) if exc.__cause__ is None else f"{exc.__cause__}\n{exc}"
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("To append to your config")]
    kept = [ln for ln in lines if not ln.startswith(("full_key:", "object_type=", "reference_type="))]
    return " ".join(kept) or type(exc).__name__


def not_a_key(given: str, near: str | None) -> str:
    """The message for an override ``given`` whose key the config lacks, with the key it most likely meant."""
    value = given.partition("=")[2]
    expected_key = f"did you mean {near}={value}?" if near else "see wavealign sweep --cfg job for the keys"
    return f"{given} is not a sweep config key; {expected_key}"


def config_paths(node: DictConfig, prefix: str = "") -> list[str]:
    """Every key of a config by its full dotted path (``grid.seq_k``, ``ray.address``)."""
    paths = []
    for key in node:
        path = f"{prefix}{key}"
        paths.append(path)
        child = node._get_node(key)  # the node itself: an interpolation is not resolved
        if isinstance(child, DictConfig):
            paths += config_paths(child, f"{path}.")
    return paths


def nearest_key(key: str, paths: Sequence[str]) -> str | None:
    """The path among ``paths`` a mistyped ``key`` most likely meant: one ending in the same last segment
    (``reps`` -> ``grid.reps``; the shortest, then the first in order), else the closest full path, else the path of
    the closest last segment; None when nothing is close."""
    ordered = sorted(set(paths) - {key}, key=lambda p: (p.count("."), p))
    leaf = key.rpartition(".")[2]
    same_leaf = [p for p in ordered if p.rpartition(".")[2] == leaf]
    if same_leaf:
        return same_leaf[0]
    close = difflib.get_close_matches(key, ordered, n=1, cutoff=0.75)
    if close:
        return close[0]
    by_leaf: dict[str, str] = {}
    for path in ordered:
        by_leaf.setdefault(path.rpartition(".")[2], path)
    close = difflib.get_close_matches(leaf, list(by_leaf), n=1)
    return by_leaf[close[0]] if close else None


def unknown_key(exc: OmegaConfBaseException, node: DictConfig) -> str:
    """A key no field of its dataclass has (added with ``+``: Hydra adds keys even to a struct config), with its
    value from ``node`` and the field it most likely meant."""
    path = str(exc.full_key)
    parent, _, key = path.rpartition(".")
    fields = list(typing.get_type_hints(exc.object_type)) if dataclasses.is_dataclass(exc.object_type) else []
    close = difflib.get_close_matches(key, fields, n=1)
    prefix = f"{parent}." if parent else ""
    hint = f"did you mean {prefix}{close[0]}?" if close else f"expected one of {sorted(fields)}"
    holder = OmegaConf.select(node, parent) if parent else node
    value = OmegaConf.to_container(holder)[key]  # type: ignore[index]
    return f"{path}={value!r} is not a sweep config key; {hint}"
