"""The synthetic Q/K/V generators by name, as a workload YAML names them (``generator: scene``): each a config class
(``HeadTypesConfig``) with its content model and the values fitted to Table I beside it."""

from __future__ import annotations

from wavealign.workloads.scene import SceneConfig
from wavealign.workloads.synthetic import GeneratorConfig, HeadTypesConfig

GENERATORS: dict[str, type[HeadTypesConfig]] = {c.GENERATOR: c for c in (GeneratorConfig, SceneConfig)}
# the generator a workload gets unless it names one: the per-head cluster generator, fitted in calibrated.yaml
DEFAULT_GENERATOR = GeneratorConfig.GENERATOR


def generator_names() -> list[str]:
    return sorted(GENERATORS)


def generator(name: str) -> HeadTypesConfig:
    """The calibrated config of the generator ``name`` (its YAML, or its hand-set defaults if none is shipped)."""
    if name not in GENERATORS:
        raise ValueError(f"generator must be one of {generator_names()}, got {name!r}")
    return GENERATORS[name].calibrated()
