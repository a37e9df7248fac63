"""Config refusals in this project's words: ``explain`` turns a Hydra or OmegaConf exception into one line naming the
key, the value and what its field takes, built from what the exception carries (``full_key``, ``value``, the type
that refused it) and the schema's own types, never from Hydra's text; ``suggest`` finds the key a mistyped one most
likely meant."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Sequence
from typing import Any

from omegaconf.errors import ValidationError

from orchestrator.config_schema import GridConfig, field_default

# how a message names what a field of each type takes, one value and several
_ONE = {bool: "true or false", int: "an integer", float: "a number", str: "a text"}
_SEVERAL = {bool: "switches", int: "integers", float: "numbers", str: "names"}


def explain(exc: BaseException, given: str | None = None) -> str:
    """A Hydra or OmegaConf error as one line. A value the schema's type refused: ``grid.reps=three: expected an
    integer``; a list given one value, ``grid.seq_k=148: a grid axis is a list; expected grid.seq_k=[148]``; an item
    of a list, ``grid.wave_size has inf; expected an integer or null``. Another error: its own message, without its
    context lines. ``given`` is the override that carried the value, as typed."""
    cause = exc if isinstance(exc, ValidationError) else exc.__cause__
    if not (isinstance(cause, ValidationError) and cause.full_key):
        return _message(exc)
    path = str(cause.full_key).partition("[")[0]
    shown = given.partition("=")[2] if given else repr(cause.value)
    if cause.object_type is list:  # an item of a list field: its reference type is list[item]
        return f"{path} has {cause.value!r}; expected {expected(typing.get_args(cause.ref_type)[0])}"
    owner, key = cause.object_type, str(cause.key)
    hint = typing.get_type_hints(owner).get(key) if dataclasses.is_dataclass(owner) else None
    if typing.get_origin(hint) is not list:
        return f"{path}={shown}: expected {expected(hint)}"
    what = "a grid axis" if owner is GridConfig else path
    item = typing.get_args(hint)[0]
    if fits(cause.value, item):
        return f"{path}={shown}: {what} is a list; expected {path}=[{shown}]"
    example = ",".join(str(v) for v in field_default(owner, key))
    return f"{path}={shown}: {what} is a list of {plural(item)}; expected e.g. {path}=[{example}]"


def _message(exc: BaseException) -> str:
    """Hydra's and OmegaConf's message without their trailing full-key/object-type context lines."""
    text = str(exc) if exc.__cause__ is None else f"{exc.__cause__}\n{exc}"
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    context = ("full_key:", "object_type=", "reference_type=", "To append to your config")
    return " ".join(ln for ln in lines if not ln.startswith(context)) or type(exc).__name__


def suggest(key: str, candidates: Sequence[str]) -> str | None:
    """The candidate a mistyped dotted ``key`` most likely meant: one ending in the same last segment (``reps`` ->
    ``grid.reps``; the shortest, then the first in order), else the closest whole, else the one of the closest last
    segment; None when nothing is close."""
    ordered = sorted(set(candidates) - {key}, key=lambda p: (p.count("."), p))
    leaf = key.rpartition(".")[2]
    if same_leaf := [p for p in ordered if p.rpartition(".")[2] == leaf]:
        return same_leaf[0]
    if close := difflib.get_close_matches(key, ordered, n=1, cutoff=0.75):
        return close[0]
    by_leaf: dict[str, str] = {}
    for path in ordered:
        by_leaf.setdefault(path.rpartition(".")[2], path)
    close = difflib.get_close_matches(leaf, list(by_leaf), n=1)
    return by_leaf[close[0]] if close else None


def fits(value: Any, kind: Any) -> bool:
    """Whether ``value`` is one value of type ``kind`` (an integer is a number, a switch no number; ``list[int]``
    a list of integers; ``Any`` anything)."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return any(fits(value, one) for one in typing.get_args(kind))
    if typing.get_origin(kind) is list:
        return isinstance(value, list) and all(fits(v, typing.get_args(kind)[0]) for v in value)
    if kind is Any or kind is type(None):
        return kind is Any or value is None
    if isinstance(value, bool):
        return kind is bool
    return isinstance(value, kind) or (kind is float and isinstance(value, int))


def expected(hint: Any) -> str:
    """What a field of type ``hint`` takes, in a message's words: ``int | None`` -> "an integer or null",
    ``list[float]`` -> "a list of numbers"."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is list:
        return f"a list of {plural(args[0])}"
    nullable = type(None) in args
    base = next(a for a in args if a is not type(None)) if nullable else hint
    return (f"a list of {plural(typing.get_args(base)[0])}" if typing.get_origin(base) is list
            else _ONE.get(base, "a value")) + (" or null" if nullable else "")


def plural(hint: Any) -> str:
    """Several values of type ``hint``: "numbers", "integers" (null left out)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return _SEVERAL.get(args[0] if args else hint, "values")
