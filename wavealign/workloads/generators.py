"""The synthetic Q/K/V generators by name, as a workload YAML names them (``generator: scene``): each a config class
(``HeadTypesConfig``) with its content model and the values fitted to Table I beside it. Each module that defines
one is imported here, and its class registers itself in ``GENERATORS`` as it is defined."""

from __future__ import annotations

from wavealign.workloads import scene  # noqa: F401  (defines SceneConfig: registers it)
from wavealign.workloads.synthetic import DEFAULT_GENERATOR, GENERATORS, HeadTypesConfig

__all__ = ["DEFAULT_GENERATOR", "GENERATORS", "generator", "generator_names"]


def generator_names() -> list[str]:
    return sorted(GENERATORS)


def generator(name: str) -> HeadTypesConfig:
    """The calibrated config of the generator ``name`` (its YAML, or its hand-set defaults if none is shipped)."""
    if name not in GENERATORS:
        raise ValueError(f"generator must be one of {generator_names()}, got {name!r}")
    return GENERATORS[name].calibrated()
