"""Adaptive skip: cheap mask features and a per-hardware policy that decides whether reordering pays.

Three parts, in the order data flows through them:

- ``mask_features``: the mask statistics the skip model reads (``SkipFeatures``, ``features``, ``MODEL_FEATURES``);
- ``profile``: the versioned per-hardware profiles (``Profile``, ``load_profile``, ``current_profile``) and
  where the runtime finds them (``profile_dir``, ``nearest_profiled``);
- ``policy``: the decision itself (``SkipPolicy.decide -> SkipDecision``), from a profile's fitted models or
  its provisional rule.
"""

from wavealign.skip.mask_features import MODEL_FEATURES, SkipFeatures, features, wave_working_set_bytes
from wavealign.skip.policy import SkipDecision, SkipPolicy
from wavealign.skip.profile import (
    PROFILE_DIR,
    PROFILE_SCHEMA_VERSION,
    NoProfile,
    Profile,
    current_profile,
    load_profile,
    nearest_profiled,
    profile_dir,
    profile_path,
    profiled_hardware,
)

__all__ = [
    "MODEL_FEATURES",
    "PROFILE_DIR",
    "PROFILE_SCHEMA_VERSION",
    "NoProfile",
    "Profile",
    "SkipDecision",
    "SkipFeatures",
    "SkipPolicy",
    "current_profile",
    "features",
    "load_profile",
    "nearest_profiled",
    "profile_dir",
    "profile_path",
    "profiled_hardware",
    "wave_working_set_bytes",
]
