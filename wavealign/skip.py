"""Adaptive skip: cheap mask features and a per-hardware policy that decides whether reordering pays.

The policy reads a small versioned profile (``wavealign/profiles/<hardware>.yaml``). A fitted profile
carries log-linear models of the kernel time in the original order, with WaveAlign, and of the
reorder cost; a provisional one carries the paper's rule (skip short sequences and very sparse or
already-local masks) until ``wavealign refresh-profiles`` replaces it.

Schema 2 adds the head count to the model inputs: the kernel time grows with heads while the reorder
plan, batched over heads, grows more slowly, so whether reordering pays depends on it. Schema 1 profiles
still load (their models read as having no head term).
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import torch
import yaml

from wavealign import hardware as hw_registry
from wavealign.blockmask import MaskLike, as_dense

logger = logging.getLogger(__name__)

PROFILE_SCHEMA_VERSION = 2
PROFILE_DIR = Path(__file__).with_name("profiles")
# the inputs of a fitted model, in this order; log of counts and ratios, raw for bounded features
MODEL_FEATURES = ("log_num_q_blocks", "log_density", "nnz_cv", "adjacent_jaccard", "log_working_set_over_l2",
                  "log_num_heads")
# the model inputs of each profile schema (a schema-1 model has no head term)
_SCHEMA_FEATURES = {1: MODEL_FEATURES[:5], 2: MODEL_FEATURES}


@dataclass(frozen=True)
class SkipFeatures:
    """What the skip model sees of one attention call, averaged over heads (and batch)."""

    num_q_blocks: int
    num_kv_blocks: int
    seq_len_tokens: int
    density: float
    nnz_mean: float
    nnz_cv: float
    adjacent_jaccard: float
    wave_working_set_bytes: float
    working_set_over_l2: float
    num_heads: int = 1  # heads x batch: the (MB, NB) masks one call runs

    def model_inputs(self) -> list[float]:
        """The feature vector ``MODEL_FEATURES`` (logs floored to stay finite)."""
        tiny = 1e-9
        return [math.log(max(self.num_q_blocks, 1)), math.log(max(self.density, tiny)), self.nnz_cv,
                self.adjacent_jaccard, math.log(max(self.working_set_over_l2, tiny)),
                math.log(max(self.num_heads, 1))]

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def features(mask: MaskLike, hardware: str | hw_registry.Hardware, block_size: int = 128,
             head_dim: int = 128, wave_size: int | None = None, dtype_bytes: int = 2) -> SkipFeatures:
    """Compute the skip features of a (H, MB, NB) or (B, H, MB, NB) mask on its own device.

    The working set is the mean, over waves of ``wave_size`` consecutive rows of one head, of the union
    of their K/V blocks in bytes (K and V, ``block_size x head_dim`` each), divided by the L2 size.
    """
    hw = hw_registry.get(hardware)
    dense = as_dense(mask)
    rows = dense.reshape(-1, *dense.shape[-2:])
    g, mb, nb = rows.shape
    wave = int(wave_size or hw.wave_size())
    if wave < 1:
        raise ValueError(f"wave_size must be >= 1, got {wave_size}")
    nnz = rows.sum(-1, dtype=torch.float32)
    nnz_mean = float(nnz.mean())
    nnz_cv = float(nnz.std(correction=0) / nnz.mean()) if nnz_mean > 0 else 0.0
    if mb > 1:
        inter = (rows[:, 1:] & rows[:, :-1]).sum(-1, dtype=torch.float32)
        union = (rows[:, 1:] | rows[:, :-1]).sum(-1, dtype=torch.float32)
        # two empty rows are identical: overlap 1
        jaccard = float(torch.where(union > 0, inter / union.clamp_min(1), torch.ones_like(union)).mean())
    else:
        jaccard = 1.0
    pad = (-mb) % wave
    padded = torch.cat([rows, rows.new_zeros(g, pad, nb)], dim=1) if pad else rows
    union_blocks = padded.reshape(g, -1, wave, nb).any(2).sum(-1, dtype=torch.float32).mean()
    block_bytes = 2 * block_size * head_dim * dtype_bytes
    working_set = float(union_blocks) * block_bytes
    return SkipFeatures(
        num_q_blocks=mb, num_kv_blocks=nb, seq_len_tokens=mb * block_size,
        density=float(nnz_mean / nb), nnz_mean=nnz_mean, nnz_cv=nnz_cv, adjacent_jaccard=jaccard,
        wave_working_set_bytes=working_set, working_set_over_l2=working_set / hw.l2_bytes, num_heads=g,
    )


class Decision(NamedTuple):
    """Whether to reorder, why, and the predicted saving in ms (NaN where the profile has no model)."""

    reorder: bool
    reason: str
    predicted_gain_ms: float


@dataclass(frozen=True)
class Profile:
    """A per-hardware skip profile: a rule, and optionally fitted log-linear time models."""

    hardware: str
    provisional: bool
    rule: dict[str, float]
    models: dict[str, dict[str, Any]] | None
    provenance: dict[str, Any]
    version: str = "0"

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
                if not isinstance(coef, list) or len(coef) != len(inputs) + 1:
                    raise ValueError(f"skip profile {source}: models.{name}.coef must list an intercept and "
                                     f"{len(inputs)} coefficients for {inputs} (schema {schema})")
                # an older schema's model has no term for the newer inputs: coefficient 0
                models[name]["coef"] = [*coef, *[0.0] * (len(MODEL_FEATURES) - len(inputs))]
        return cls(hardware=data["hardware"], provisional=bool(data["provisional"]), rule=dict(data["rule"]),
                   models=models, provenance=dict(data.get("provenance") or {}),
                   version=str(data.get("version", "0")))

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": PROFILE_SCHEMA_VERSION, "hardware": self.hardware, "version": self.version,
                "provisional": self.provisional, "rule": self.rule, "models": self.models,
                "provenance": self.provenance}

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"skip profile file {path} does not exist")
        return cls.from_dict(yaml.safe_load(path.read_text()), str(path))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None, width=110))
        tmp.replace(path)
        return path


def _predict_ms(model: dict[str, Any], x: list[float]) -> float:
    coef = model["coef"]
    return math.exp(coef[0] + sum(c * v for c, v in zip(coef[1:], x, strict=True)))


class SkipPolicy:
    """Decides, from ``SkipFeatures``, whether WaveAlign's reorder is worth its cost on this hardware."""

    def __init__(self, profile: Profile | str | Path) -> None:
        self.profile = profile if isinstance(profile, Profile) else load_profile(profile)

    def decide(self, feats: SkipFeatures) -> Decision:
        p = self.profile
        if p.models is not None:
            x = feats.model_inputs()
            original = _predict_ms(p.models["kernel_original_ms"], x)
            aligned = _predict_ms(p.models["kernel_wavealign_ms"], x)
            cost = _predict_ms(p.models["reorder_ms"], x)
            gain = original - aligned - cost
            verdict = "reorder" if gain > 0 else "skip"
            return Decision(gain > 0, f"{verdict}: fitted model ({p.hardware} v{p.version}) predicts "
                                      f"{original:.3f} ms -> {aligned:.3f} + {cost:.3f} ms", gain)
        rule = p.rule
        checks = (
            (feats.seq_len_tokens < rule.get("min_seq_len_tokens", 0),
             f"sequence {feats.seq_len_tokens} tokens < {rule.get('min_seq_len_tokens')}"),
            (feats.density < rule.get("min_density", 0.0),
             f"density {feats.density:.3f} < {rule.get('min_density')}"),
            (feats.adjacent_jaccard > rule.get("max_adjacent_jaccard", 1.0),
             f"already local: adjacent-row Jaccard {feats.adjacent_jaccard:.3f} > "
             f"{rule.get('max_adjacent_jaccard')}"),
        )
        for failed, why in checks:
            if failed:
                return Decision(False, f"skip: {why} ({p.hardware} provisional rule)", math.nan)
        return Decision(True, f"reorder: passes the {p.hardware} provisional rule", math.nan)


def profile_dir() -> Path:
    """The folder the runtime reads profiles from: ``WAVEALIGN_PROFILE_DIR`` if set, else the packaged one.

    To decide with profiles from the MLflow registry, point it at the folder that
    ``wavealign refresh-profiles fetch=DIR`` fills; the library itself never talks to MLflow.
    """
    return Path(os.environ.get("WAVEALIGN_PROFILE_DIR", PROFILE_DIR))


def profile_path(hardware: str) -> Path:
    """Where the runtime looks for ``hardware``'s profile: ``profile_dir() / <hardware>.yaml``."""
    return profile_dir() / f"{hw_registry.get(hardware).name}.yaml"


def profiled_hardware() -> list[str]:
    """Hardware ids that have a profile file in ``profile_dir()``."""
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
                   "refresh-profiles hardware=%s` on a sweep of it to fit its own)", wanted, folder, used, wanted)


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
        raise ValueError(f"no skip profile for {hardware!r} at {path}"
                         + ("" if not fallback else f" and no other GPU's profile in {profile_dir()}"))
    _warn_fallback(name, nearest, str(profile_dir()))
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
        raise ValueError(f"no skip profile in {profile_dir()} for GPU {props.name!r}")
    nearest = min(candidates, key=lambda n: abs(math.log(hw_registry.get(n).sm_count / props.multi_processor_count))
                  + abs(math.log(hw_registry.get(n).l2_bytes / max(props.L2_cache_size, 1))))
    _warn_fallback(props.name, nearest, str(profile_dir()))
    return load_profile(nearest)
