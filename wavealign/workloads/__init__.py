"""Video-DiT attention inputs: shape presets of the paper's models, synthetic Q/K/V generators with their
structure (by name: ``scene``, the default, and ``clusters``), and a loader for Q/K/V captured from a real model.

    wl = preset("wan2.1-14b", frames=401, resolution="720p")   # seq_len 363600, 40 heads x 128
    q, k, v = synthetic(wl, heads=[0, 1], seed=0)               # each (1, 2, seq_len, 128)
    q, k, v = synthetic(wl, heads=[0, 1], config=generator("clusters"))
"""

from wavealign.workloads.captured import FORMAT, CapturedHeader, CapturedQKV, load_captured, read_header, save_captured
from wavealign.workloads.checks import check_workload
from wavealign.workloads.clusters import (
    HEAD_TYPES,
    GeneratorConfig,
    HeadProfile,
    HeadSpec,
    HeadTypesConfig,
    default_config,
    head_specs,
    head_types,
    iter_heads,
    synthetic,
)
from wavealign.workloads.generators import DEFAULT_GENERATOR, GENERATORS, generator, generator_name, generator_names
from wavealign.workloads.presets import MODELS, ModelSpec, RopeAxes, Workload, models, preset
from wavealign.workloads.rope import apply_rope, positions
from wavealign.workloads.scene import SceneConfig

__all__ = [
    "DEFAULT_GENERATOR", "FORMAT", "GENERATORS", "HEAD_TYPES", "MODELS", "CapturedHeader", "CapturedQKV",
    "GeneratorConfig", "HeadProfile", "HeadSpec", "HeadTypesConfig", "ModelSpec", "RopeAxes", "SceneConfig",
    "Workload", "apply_rope", "check_workload",
    "default_config", "generator", "generator_name", "generator_names", "head_specs",
    "head_types", "iter_heads", "load_captured", "models", "positions", "preset", "read_header", "save_captured",
    "synthetic",
]
