"""Per-hardware skip profiles: the small versioned file (``<hardware>.yaml``) the policy reads, the user's
(``wavealign.user_config.profiles_dir()``, where ``wavealign refresh-profiles`` installs) before the packaged
(``wavealign/profiles/``, read-only defaults), or only ``$WAVEALIGN_PROFILE_DIR``'s where that is set.

A fitted profile carries log-linear models of the kernel time in the original order, with WaveAlign, and of
the reorder cost; a provisional one carries the paper's rule (skip short sequences and very sparse or
already-local masks) until ``wavealign refresh-profiles`` replaces it.

Schema 2 adds the head count to the model inputs: the kernel time grows with heads while the reorder
plan, batched over heads, grows more slowly, so whether reordering pays depends on it. Schema 1 profiles
still load (their models read as having no head term).
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from wavealign import bounded, user_config
from wavealign import hardware as hw_registry
from wavealign.skip.mask_features import MODEL_FEATURES

logger = logging.getLogger(__name__)

PROFILE_SCHEMA_VERSION = 2
# the packaged profiles stay in wavealign/profiles/, beside this package: defaults no command writes to
PROFILE_DIR = Path(__file__).parent.with_name("profiles")
# a folder that replaces both the user's and the packaged profiles (e.g. one `refresh-profiles --fetch DIR` filled)
PROFILE_DIR_ENV = "WAVEALIGN_PROFILE_DIR"
# the model inputs of each profile schema (a schema-1 model has no head term)
_SCHEMA_FEATURES = {1: MODEL_FEATURES[:5], 2: MODEL_FEATURES}


class NoProfile(ValueError):
    """No skip profile exists for a GPU (nor, with the fallback, for any other): the policy's "reorder, no profile".
    A profile that exists but cannot be read is a plain ValueError naming the file, never taken for a missing one."""


@dataclass(frozen=True)
class Profile:
    """A per-hardware skip profile: a rule, optionally fitted log-linear time models, and optionally what the order
    chooser learned on that GPU, per backend (``chooser``: ``{backend: {bias: {candidate: x}, margin_pct: y}}``,
    ``launch_order.chooser.ChooserFit``)."""

    hardware: str
    provisional: bool
    rule: dict[str, float]
    models: dict[str, dict[str, Any]] | None
    provenance: dict[str, Any]
    version: str = "0"
    chooser: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> Profile:
        if not isinstance(data, dict):
            raise ValueError(f"skip profile {source} must be a mapping, got {type(data).__name__}")
        schema = data.get("schema_version")
        if schema not in _SCHEMA_FEATURES:
            raise ValueError(f"skip profile {source} has schema_version {schema!r}, expected one of "
                             f"{sorted(_SCHEMA_FEATURES)}")
        missing = {"hardware", "provisional", "rule"} - data.keys()
        if missing:
            raise ValueError(f"skip profile {source} lacks {sorted(missing)}")
        models = data.get("models")
        if models is not None:
            inputs = _SCHEMA_FEATURES[schema]
            models = {name: dict(model or {}) for name, model in models.items()}
            for name in ("kernel_original_ms", "kernel_wavealign_ms", "reorder_ms"):
                coef = (models.get(name) or {}).get("coef")
                if (not isinstance(coef, list) or len(coef) != len(inputs) + 1
                        or not all(isinstance(c, int | float) and math.isfinite(c) for c in coef)):
                    raise ValueError(f"skip profile {source}: models.{name}.coef must list an intercept and "
                                     f"{len(inputs)} finite coefficients for {inputs} (schema {schema}), got {coef!r}")
                # an older schema's model has no term for the newer inputs: coefficient 0
                models[name]["coef"] = [*coef, *[0.0] * (len(MODEL_FEATURES) - len(inputs))]
        rule = data["rule"]
        if not isinstance(rule, dict) or not all(isinstance(v, int | float) and math.isfinite(v)
                                                 for v in rule.values()):
            raise ValueError(f"skip profile {source}: rule must map names to finite numbers, got {rule!r}")
        chooser = data.get("chooser")
        if chooser is not None:
            from wavealign.launch_order.chooser import fit_from

            try:
                for backend in chooser:
                    fit_from(chooser, backend)
            except (ValueError, TypeError, AttributeError) as exc:
                raise ValueError(f"skip profile {source}: chooser: {exc}; expected {{backend: {{bias: {{candidate: "
                                 "number}, margin_pct: number}}") from None
        return cls(hardware=data["hardware"], provisional=bool(data["provisional"]), rule=dict(rule),
                   models=models, provenance=dict(data.get("provenance") or {}),
                   version=str(data.get("version", "0")), chooser=chooser)

    def to_dict(self) -> dict[str, Any]:
        out = {"schema_version": PROFILE_SCHEMA_VERSION, "hardware": self.hardware, "version": self.version,
               "provisional": self.provisional, "rule": self.rule, "models": self.models,
               "provenance": self.provenance}
        return out if self.chooser is None else {**out, "chooser": self.chooser}

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"skip profile file {path} does not exist")
        return cls.from_dict(bounded.load_yaml(path, "skip profile file"), str(path))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None, width=110))
        tmp.replace(path)
        return path


def profile_dirs() -> list[Path]:
    """The folders the runtime reads profiles from, the first holding a hardware's file winning:
    ``WAVEALIGN_PROFILE_DIR`` alone if set, else the user's (``user_config.profiles_dir()``) then the packaged.

    To decide with profiles from the MLflow registry, point ``WAVEALIGN_PROFILE_DIR`` at the folder that
    ``wavealign refresh-profiles --fetch DIR`` fills; the library itself never talks to MLflow.
    """
    if os.environ.get(PROFILE_DIR_ENV):
        return [Path(os.environ[PROFILE_DIR_ENV])]
    return [user_config.profiles_dir(), PROFILE_DIR]


def profile_dir() -> Path:
    """Where a fitted profile is installed for the runtime to read first: ``WAVEALIGN_PROFILE_DIR`` if set, else the
    user's folder (``profile_dirs()[0]``); never the packaged one."""
    return profile_dirs()[0]


def _searched() -> str:
    """The folders ``profile_dirs()`` names, for messages."""
    return " or ".join(str(folder) for folder in profile_dirs())


def profile_path(hardware: str) -> Path:
    """Where the runtime reads ``hardware``'s profile: ``<hardware>.yaml`` in the first of ``profile_dirs()`` that has
    it, else where it would be installed (``profile_dir()``)."""
    name = f"{hw_registry.get(hardware).name}.yaml"
    return next((folder / name for folder in profile_dirs() if (folder / name).is_file()), profile_dir() / name)


def profiled_hardware() -> list[str]:
    """Hardware ids that have a profile file in one of ``profile_dirs()``."""
    return [name for name in hw_registry.names() if profile_path(name).is_file()]


def _spec_distance(a: hw_registry.Hardware, b: hw_registry.Hardware) -> float:
    """How unlike two GPUs are for the skip model: summed |log ratio| of L2 size, HBM bandwidth, SM count
    and bf16 peak (the quantities that set kernel time and the L2 benefit of reordering)."""
    return sum(abs(math.log(getattr(a, key) / getattr(b, key)))
               for key in ("l2_bytes", "hbm_bytes_per_s", "sm_count", "peak_bf16_flops"))


def nearest_profiled(hardware: str | hw_registry.Hardware) -> str | None:
    """The profiled hardware id closest to ``hardware`` by ``_spec_distance`` (fitted beat provisional on a tie)."""
    target = hw_registry.get(hardware)
    candidates = [name for name in profiled_hardware() if name != target.name]
    if not candidates:
        return None
    return min(candidates, key=lambda name: (_spec_distance(target, hw_registry.get(name)),
                                             _load(profile_path(name)).provisional, name))


@lru_cache(maxsize=32)
def _load_cached(path: str, mtime_ns: int) -> Profile:
    return Profile.load(path)


def _load(path: Path) -> Profile:
    """Read a profile file, cached until the file changes (a refreshed profile is picked up at once)."""
    return _load_cached(str(path), path.stat().st_mtime_ns)


@lru_cache(maxsize=32)
def _warn_fallback(wanted: str, used: str, folder: str) -> None:
    """Warn once per (hardware, fallback, folder), not once per decision."""
    logger.warning("no skip profile for %s in %s; using the nearest profiled GPU's, %s (run `wavealign "
                   "refresh-profiles --hardware %s` on a sweep of it to fit its own)", wanted, folder, used, wanted)


def load_profile(hardware: str | Path, fallback: bool = True) -> Profile:
    """The profile for a hardware id, or from an explicit YAML path; cached until the file changes.

    A hardware id without a profile file falls back (with a logged warning) to the nearest profiled GPU's
    profile, unless ``fallback=False``; it is an error only when no profile exists at all.
    """
    if str(hardware).endswith((".yaml", ".yml")):
        path = Path(hardware)
        if not path.is_file():
            raise ValueError(f"skip profile file {path} does not exist")
        return _load(path)
    name = hw_registry.get(str(hardware)).name
    path = profile_path(name)
    if path.is_file():
        return _load(path)
    nearest = nearest_profiled(name) if fallback else None
    if nearest is None:
        raise NoProfile(f"no skip profile for {hardware!r} in {_searched()}"
                         + ("" if not fallback else " and no other GPU's profile there"))
    _warn_fallback(name, nearest, _searched())
    return _load(profile_path(nearest))


def current_profile(device: int | None = None) -> Profile:
    """The profile for this process's CUDA device (device name -> hardware id via ``hardware.detect``).

    An unknown GPU falls back, with a warning, to the profiled GPU nearest in SM count and L2 size as
    reported by the device; without CUDA this is a ``ValueError``.
    """
    import torch

    if not torch.cuda.is_available():
        raise ValueError("current_profile needs a CUDA device; pass a hardware id to load_profile instead")
    known = hw_registry.detect(device)
    if known is not None:
        return load_profile(known.name)
    props = torch.cuda.get_device_properties(device)
    candidates = profiled_hardware()
    if not candidates:
        raise ValueError(f"no skip profile in {_searched()} for GPU {props.name!r}")
    nearest = min(candidates, key=lambda n: abs(math.log(hw_registry.get(n).sm_count / props.multi_processor_count))
                  + abs(math.log(hw_registry.get(n).l2_bytes / max(props.L2_cache_size, 1))))
    _warn_fallback(props.name, nearest, _searched())
    return load_profile(nearest)
