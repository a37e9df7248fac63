"""The synthetic Q/K/V generators by name, as a workload YAML names them (``generator: scene``): each a config class
(``HeadTypesConfig``) with its content model and the values fitted to Table I beside it. Each module that defines
one is imported here, and its class registers itself in ``GENERATORS`` as it is defined."""

from __future__ import annotations

from wavealign.workloads import scene  # noqa: F401  (defines SceneConfig: registers it)
from wavealign.workloads.clusters import DEFAULT_GENERATOR, GENERATORS, HeadTypesConfig

__all__ = ["DEFAULT_GENERATOR", "GENERATORS", "generator", "generator_name", "generator_names"]


def generator_names() -> list[str]:
    return sorted(GENERATORS)


def generator_name(name: str | None) -> str:
    """The generator a workload draws from: the one it names, or ``DEFAULT_GENERATOR`` where it names none."""
    name = name or DEFAULT_GENERATOR
    if name not in GENERATORS:
        raise ValueError(f"generator must be one of {generator_names()}, got {name!r}")
    return name


def generator(name: str | None) -> HeadTypesConfig:
    """The calibrated config of the generator ``name`` (``generator_name``; its YAML, or its hand-set defaults if
    none is shipped)."""
    return GENERATORS[generator_name(name)].calibrated()
