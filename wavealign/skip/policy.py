"""The skip policy: from a mask's ``SkipFeatures`` and a hardware ``Profile``, reorder or not.

With a fitted profile it reorders when the predicted saving (the original-order kernel time less
WaveAlign's kernel time and the reorder cost) is positive; with a provisional one it applies the
profile's rule.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NamedTuple

from wavealign.skip.mask_features import SkipFeatures
from wavealign.skip.profile import Profile, load_profile


class SkipDecision(NamedTuple):
    """Whether to reorder, why, and the predicted saving in ms (NaN where the profile has no model)."""

    reorder: bool
    reason: str
    predicted_gain_ms: float


def _predict_ms(model: dict[str, Any], x: list[float]) -> float:
    coef = model["coef"]
    return math.exp(coef[0] + sum(c * v for c, v in zip(coef[1:], x, strict=True)))


class SkipPolicy:
    """Decides, from ``SkipFeatures``, whether WaveAlign's reorder is worth its cost on this hardware."""

    def __init__(self, profile: Profile | str | Path) -> None:
        self.profile = profile if isinstance(profile, Profile) else load_profile(profile)

    def decide(self, feats: SkipFeatures) -> SkipDecision:
        p = self.profile
        if p.models is not None:
            x = feats.model_inputs()
            original = _predict_ms(p.models["kernel_original_ms"], x)
            aligned = _predict_ms(p.models["kernel_wavealign_ms"], x)
            cost = _predict_ms(p.models["reorder_ms"], x)
            gain = original - aligned - cost
            verdict = "reorder" if gain > 0 else "skip"
            return SkipDecision(gain > 0, f"{verdict}: fitted model ({p.hardware} v{p.version}) predicts "
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
                return SkipDecision(False, f"skip: {why} ({p.hardware} provisional rule)", math.nan)
        return SkipDecision(True, f"reorder: passes the {p.hardware} provisional rule", math.nan)
