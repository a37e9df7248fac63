"""The exact launch orders the order chooser (``launch_order.choose``) weighs, by name: one vocabulary for the
chooser, ``RowOrder.candidate``, the sweep's rows and the tables.

Each candidate is a plan: a stage set (``launch_order.STAGES``) and the spatial step's reorderer with its params.
The scheduler-aware ones (``wavealign.reorderers.rounds`` and ``balanced``) are meant for a static persistent tile
scheduler and are weighed only for a backend that declares one (``kernels.ExecutionFacts.scheduler``); the curve
only where the mask's rows have a latent position.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from wavealign.records import SPATIAL_STAGES

SCHEDULERS = ("streaming", "static-persistent")  # the same words as kernels.SCHEDULERS, which imports torch
STATIC = ("static-persistent",)
ORIGINAL = "original"


@dataclass(frozen=True)
class Candidate:
    """A named exact order: ``stages`` with ``reorderer`` (and ``params``) as its spatial step, weighed for the
    tile ``schedulers`` listed."""

    name: str
    stages: str
    reorderer: str = "identity"
    params: Mapping[str, Any] = field(default_factory=dict)
    schedulers: tuple[str, ...] = SCHEDULERS
    description: str = ""

    def plan_options(self) -> dict[str, Any]:
        """``launch_order.plan``'s keyword arguments for this order."""
        return {"stages": self.stages, "reorderer": self.reorderer, **self.params}


CANDIDATES: tuple[Candidate, ...] = (
    Candidate(ORIGINAL, "none", description="the original order (skipping the reorder)"),
    Candidate("temporal", "temporal", description="Stage 2 alone (O+S2)"),
    Candidate("spatial", "spatial", "wavealign", description="Stage 1 alone (O+S1)"),
    Candidate("wavealign", "both", "wavealign", description="WaveAlign, Stage 1 then Stage 2 (O+S1+S2)"),
    Candidate("longest-first", "spatial", "longest-first", description="each head by descending NNZ (FA3's LPT)"),
    Candidate("curve", "spatial", "curve", description="a Hilbert curve over the blocks' latent position"),
    Candidate("rounds", "spatial", "rounds", schedulers=STATIC, description="Stage 2 on the scheduler's rounds"),
    Candidate("balanced", "spatial", "balanced", schedulers=STATIC,
              description="balanced Stage 2: each round's longest row to the least-loaded CTA"),
    Candidate("wavealign-balanced", "spatial", "balanced", MappingProxyType({"base": "wavealign"}), STATIC,
              "Stage 1, then balanced Stage 2"),
)
BY_NAME: Mapping[str, Candidate] = MappingProxyType({c.name: c for c in CANDIDATES})


def get(name: str) -> Candidate:
    """The candidate called ``name``; a ValueError lists the known names otherwise."""
    try:
        return BY_NAME[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown launch-order candidate {name!r}; expected one of {list(BY_NAME)}") from None


def candidate_name(stages: str, reorderer: str, params: Mapping[str, Any] | None = None) -> str:
    """The name of the order a plan of ``stages`` with ``reorderer`` (its resolved ``params``) makes: a candidate's
    where one matches (the reorderer and the params a candidate fixes matter only where ``stages`` has a spatial
    step), else ``stages[reorderer]``."""
    from wavealign import reorderers

    given = {**(reorderers.get(reorderer).params if reorderer in reorderers.names() else {}), **(params or {})}
    for c in CANDIDATES:
        if c.stages != stages:
            continue
        if stages not in SPATIAL_STAGES:
            return c.name
        if c.reorderer == reorderer and all(given.get(k) == v for k, v in
                                            {**reorderers.get(reorderer).params, **c.params}.items()
                                            if k in _FIXED):
            return c.name
    return f"{stages}[{reorderer}]"


# the params some candidate fixes: the ones that tell two candidates of one reorderer apart
_FIXED = frozenset(k for c in CANDIDATES for k in c.params)
