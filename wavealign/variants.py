"""What a user picks about the launch order, in one vocabulary: a variant is the reorder stages it runs and whether
the skip policy may veto them.

    VARIANTS["adaptive"]           # Variant(name='adaptive', stages='both', skip='policy')
    VARIANTS["auto"]               # the order chooser picks each mask's exact order (launch_order.choose)
    get("wavealign").paper_label   # 'O+S1+S2' (the paper's Fig. 12 names, derived from the stages)

The sweep's ``grid.variant`` names these (a sweep may add its own under ``variants:``), the integrations'
``reorder=`` takes them (``"always"`` and ``"never"``, their first spelling, name ``wavealign`` and ``original``),
and the analysis and figures derive their labels and colours from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from wavealign.records import ORIGINAL_VARIANT, STAGES

# "force": run the variant's stages; "policy": the skip policy (wavealign.skip) may fall back to the original order;
# "choose": the order chooser (launch_order.chooser) picks the order, among them the original (skipping is choosing it)
SKIP_MODES = ("force", "policy", "choose")
# how the paper's figures name each stage set (Fig. 12's ablation)
PAPER_LABELS: Mapping[str, str] = MappingProxyType(
    {"none": "Original", "spatial": "O+S1", "temporal": "O+S2", "both": "O+S1+S2"})


@dataclass(frozen=True)
class Variant:
    """A launch order to ask of every mask: ``stages`` (``launch_order.STAGES``), and ``skip``, whether the skip policy
    may veto them (``SKIP_MODES``)."""

    name: str
    stages: str
    skip: str = "force"
    color: str | None = None  # its colour in figures (a matplotlib colour); None: one fixed by its name

    def __post_init__(self) -> None:
        if self.stages not in STAGES:
            raise ValueError(f"variant {self.name!r}: stages={self.stages!r}; expected one of {STAGES}")
        if self.skip not in SKIP_MODES:
            raise ValueError(f"variant {self.name!r}: skip={self.skip!r}; expected one of {SKIP_MODES}")
        fixed = globals().get("VARIANTS", {}).get(self.name)  # the library's, once made, are fixed
        if fixed is not None and (self.stages, self.skip) != (fixed.stages, fixed.skip):
            what = "the baseline every speedup refers to" if self.name == ORIGINAL_VARIANT else \
                "a variant of the library"
            raise ValueError(f"stages={self.stages!r}, skip={self.skip!r}; {self.name!r} is {what} (stages "
                             f"{fixed.stages!r}, skip {fixed.skip!r}) and is fixed; expected it unchanged (add your "
                             "own under another name)")

    @property
    def paper_label(self) -> str:
        if self.skip == "choose":
            return "Auto (chosen order)"
        return PAPER_LABELS[self.stages] + (" (adaptive)" if self.skip == "policy" else "")


VARIANTS: Mapping[str, Variant] = MappingProxyType({v.name: v for v in (
    Variant(ORIGINAL_VARIANT, "none", color="tab:blue"),  # the baseline every speedup of a group refers to
    Variant("spatial", "spatial", color="tab:orange"),
    Variant("temporal", "temporal", color="tab:green"),
    Variant("wavealign", "both", color="tab:red"),
    Variant("adaptive", "both", "policy", color="tab:purple"),  # O+S1+S2 unless the skip profile says it will not pay
    # the chooser's pick for each mask, backend and GPU (its stages are the widest a pick may run; it takes no
    # reorderer of the grid's: the candidates name their own)
    Variant("auto", "both", "choose", color="tab:brown"),
)})
# the integrations' first words for their reorder= argument
REORDER_WORDS: Mapping[str, str] = MappingProxyType({"always": "wavealign", "never": ORIGINAL_VARIANT})


def get(name: str) -> Variant:
    """The variant called ``name`` (or ``always`` / ``never``); a ValueError lists the known names otherwise."""
    try:
        return VARIANTS[REORDER_WORDS.get(name, name)]
    except (KeyError, TypeError):
        raise ValueError(f"unknown variant {name!r}; expected one of {[*VARIANTS, *REORDER_WORDS]}") from None


def forced(stages: str) -> str:
    """The variant that runs ``stages`` with no veto (``both`` -> ``wavealign``): how a stage set is named and
    coloured where a row records its stages only."""
    return next(v.name for v in VARIANTS.values() if v.stages == stages and v.skip == "force")
