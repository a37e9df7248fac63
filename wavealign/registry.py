"""A small name -> object registry that discovers its entries from the modules of one package.

Adding a method or backend is one module that registers itself; nothing else changes, because every
submodule of the package is imported on first lookup, and a sweep takes its names, parameters and their types
(``param_types``: what each entry registers) from the registry. A module outside the package (a user's own backend
or method) is imported too when ``WAVEALIGN_PLUGINS`` names it (comma-separated importable module names; the sweep
sets it from its ``plugins`` key, on every worker).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")

PLUGINS_ENV = "WAVEALIGN_PLUGINS"
MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def plugin_modules() -> list[str]:
    """The modules ``WAVEALIGN_PLUGINS`` names."""
    return [name.strip() for name in os.environ.get(PLUGINS_ENV, "").split(",") if name.strip()]


def import_plugins() -> None:
    """Import every module ``WAVEALIGN_PLUGINS`` names; one that cannot be imported is an error naming it."""
    for name in plugin_modules():
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ImportError(f"{PLUGINS_ENV} names module {name!r}, which cannot be imported: {exc}") from exc


def add_plugins(names: list[str]) -> None:
    """Import the modules ``names`` (a sweep's ``plugins``) here and, through ``WAVEALIGN_PLUGINS``, on every worker
    this process starts; a name that is not a dotted module name, or a module that cannot be imported, is an
    error."""
    if not names:
        return
    for name in names:
        if not MODULE_NAME.fullmatch(name):
            raise ValueError(f"plugins has {name!r}; expected the dotted name of an importable module "
                             "(my_package.backends), not a path")
    known = plugin_modules()
    os.environ[PLUGINS_ENV] = ",".join([*known, *(name for name in names if name not in known)])
    import_plugins()


def resolve_params(what: str, defaults: Mapping[str, Any], checks: Mapping[str, Callable[[str, Any], Any]],
                   given: Mapping[str, Any]) -> dict[str, Any]:
    """An entry's parameters: ``defaults`` overridden by ``given``, each through its check (``check(name, value)``
    returns the value as the entry takes it or raises naming it); an unknown name is a ValueError naming ``what``
    (e.g. "reorderer 'lsh'") and the known ones."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ValueError(f"{what} has no parameter(s) {unknown}; expected some of {sorted(defaults)}")
    merged = {**defaults, **given}
    return {key: checks[key](key, value) if key in checks else value for key, value in merged.items()}


SCALARS = (bool, int, float, str)


def param_types(what: str, defaults: Mapping[str, Any], types: Mapping[str, Any]) -> dict[str, Any]:
    """The parameter schema entry ``what`` (e.g. "method 'minference'") registers: the type it gives a parameter in
    its ``types`` (``{"budget": float | None}``), else its default's, a bool, int, float or str (an integer default
    takes integers, a real one any number). A default of None or a container says no type: without one in ``types``
    it is a ValueError, so no parameter goes unchecked. A sweep's config holds its values to this schema."""
    if unknown := sorted(set(types) - set(defaults)):
        raise ValueError(f"{what} gives types for {unknown}, which are not among its params {sorted(defaults)}")
    schema = {key: types.get(key, type(default)) for key, default in defaults.items()}
    if untyped := sorted(key for key, kind in schema.items() if key not in types and kind not in SCALARS):
        raise ValueError(f"{what} params {untyped} have defaults of no scalar type; expected their types in its types")
    return schema


class Registry(Generic[T]):
    """Entries keyed by name, filled by importing every submodule of ``package`` on first use."""

    def __init__(self, kind: str, package: str) -> None:
        self.kind = kind
        self.package = package
        self._entries: dict[str, T] = {}
        self._discovered = False

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator that files ``obj`` under ``name``; a second entry of the same name is an error."""

        def add(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = obj
            return obj

        return add

    def _discover(self) -> None:
        if self._discovered:
            return
        pkg = importlib.import_module(self.package)
        for mod in pkgutil.iter_modules(pkg.__path__):
            if not mod.name.startswith("_"):
                importlib.import_module(f"{self.package}.{mod.name}")
        import_plugins()
        # only now: a module that failed to import raises again on the next lookup instead of going missing
        self._discovered = True

    def get(self, name: str) -> T:
        self._discover()
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; expected one of {self.names()}") from None

    def names(self) -> list[str]:
        self._discover()
        return sorted(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        self._discover()
        return name in self._entries
