"""Adaptive skip: cheap mask features and a per-hardware policy that decides whether reordering pays.

The policy reads a small versioned profile (``wavealign/profiles/<hardware>.yaml``). A fitted profile
carries log-linear models of the kernel time in the original order, with WaveAlign, and of the
reorder cost; a provisional one carries the paper's rule (skip short sequences and very sparse or
already-local masks) until ``wavealign refresh-profiles`` replaces it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import torch
import yaml

from wavealign import hardware as hw_registry
from wavealign.blockmask import MaskLike, as_dense

PROFILE_SCHEMA_VERSION = 1
PROFILE_DIR = Path(__file__).with_name("profiles")
# the inputs of a fitted model, in this order; log of counts and ratios, raw for bounded features
MODEL_FEATURES = ("log_num_q_blocks", "log_density", "nnz_cv", "adjacent_jaccard", "log_working_set_over_l2")


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

    def model_inputs(self) -> list[float]:
        """The feature vector ``MODEL_FEATURES`` (logs floored to stay finite)."""
        tiny = 1e-9
        return [math.log(max(self.num_q_blocks, 1)), math.log(max(self.density, tiny)), self.nnz_cv,
                self.adjacent_jaccard, math.log(max(self.working_set_over_l2, tiny))]

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
        wave_working_set_bytes=working_set, working_set_over_l2=working_set / hw.l2_bytes,
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
        if data.get("schema_version") != PROFILE_SCHEMA_VERSION:
            raise ValueError(f"skip profile {source} has schema_version {data.get('schema_version')!r}, "
                             f"expected {PROFILE_SCHEMA_VERSION}")
        missing = {"hardware", "provisional", "rule"} - data.keys()
        if missing:
            raise ValueError(f"skip profile {source} lacks {sorted(missing)}")
        models = data.get("models")
        if models is not None:
            for name in ("kernel_original_ms", "kernel_wavealign_ms", "reorder_ms"):
                coef = (models.get(name) or {}).get("coef")
                if not isinstance(coef, list) or len(coef) != len(MODEL_FEATURES) + 1:
                    raise ValueError(f"skip profile {source}: models.{name}.coef must list an intercept and "
                                     f"{len(MODEL_FEATURES)} coefficients for {MODEL_FEATURES}")
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
        tmp.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))
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


def profile_path(hardware: str) -> Path:
    """Where the runtime looks for ``hardware``'s profile (``WAVEALIGN_PROFILE_DIR`` overrides the folder)."""
    import os

    folder = Path(os.environ.get("WAVEALIGN_PROFILE_DIR", PROFILE_DIR))
    return folder / f"{hw_registry.get(hardware).name}.yaml"


@lru_cache(maxsize=32)
def _load_cached(path: str, mtime_ns: int) -> Profile:
    return Profile.load(path)


def load_profile(hardware: str | Path) -> Profile:
    """The profile for a hardware id, or from an explicit YAML path; cached until the file changes."""
    path = Path(hardware) if str(hardware).endswith((".yaml", ".yml")) else profile_path(str(hardware))
    if not path.is_file():
        raise ValueError(f"no skip profile for {hardware!r} at {path}")
    return _load_cached(str(path), path.stat().st_mtime_ns)
