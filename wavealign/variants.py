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
from typing import Any

from wavealign.records import ORIGINAL_VARIANT, SPATIAL_STAGES, STAGES, TEMPORAL_STAGES, AttentionSpec

# "force": run the variant's stages; "policy": the skip policy (wavealign.skip) may fall back to the original order;
# "choose": the order chooser (launch_order.chooser) picks the order, among them the original (skipping is choosing it)
SKIP_MODES = ("force", "policy", "choose")
DEFAULT_MARKER = "X"  # a variant's marker in figures where it names none (a sweep's own variant)
# how the paper's figures name each stage set (Fig. 12's ablation)
PAPER_LABELS: Mapping[str, str] = MappingProxyType(
    {"none": "Original", "spatial": "O+S1", "temporal": "O+S2", "both": "O+S1+S2"})


@dataclass(frozen=True)
class Variant:
    """A launch order to ask of every mask: ``stages`` (``launch_order.STAGES``), and ``skip``, whether the skip policy
    may veto them (``SKIP_MODES``); how figures draw it (``color``, ``marker``); and what it is: ``spatial`` and
    ``temporal`` (the stages it runs), ``is_baseline`` (the original, every speedup's reference). A dataset row records
    it as the columns ``variant``, ``stages`` and ``skip`` (``columns``; read back with ``recorded``)."""

    name: str
    stages: str
    skip: str = "force"
    color: str | None = None  # its colour in figures (a matplotlib colour); None: one fixed by its name
    marker: str = DEFAULT_MARKER  # its marker in figures (a matplotlib marker)

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
    def spatial(self) -> bool:
        """Whether it runs a spatial stage (a reorderer: WaveAlign's Stage 1 or a baseline's grouping)."""
        return self.stages in SPATIAL_STAGES

    @property
    def temporal(self) -> bool:
        """Whether it runs Stage 2 (the temporal order within each wave)."""
        return self.stages in TEMPORAL_STAGES

    @property
    def reorders(self) -> bool:
        """Whether it runs any stage: a launch order other than the original one."""
        return self.spatial or self.temporal

    @property
    def is_baseline(self) -> bool:
        """Whether it is the original order, the baseline its group's speedups refer to (timed beside it)."""
        return self.name == ORIGINAL_VARIANT

    def columns(self) -> dict[str, str]:
        """Its columns in a cell's flat view (``records.AttentionSpec``): what a dataset row records of it."""
        return {"variant": self.name, "stages": self.stages, "skip": self.skip}

    @property
    def paper_label(self) -> str:
        if self.skip == "choose":
            return "Auto (chosen order)"
        return PAPER_LABELS[self.stages] + (" (adaptive)" if self.skip == "policy" else "")


VARIANTS: Mapping[str, Variant] = MappingProxyType({v.name: v for v in (
    # the baseline every speedup of a group refers to
    Variant(ORIGINAL_VARIANT, "none", color="tab:blue", marker="o"),
    Variant("spatial", "spatial", color="tab:orange", marker="s"),
    Variant("temporal", "temporal", color="tab:green", marker="^"),
    Variant("wavealign", "both", color="tab:red", marker="D"),
    # O+S1+S2 unless the skip profile says it will not pay
    Variant("adaptive", "both", "policy", color="tab:purple", marker="v"),
    # the chooser's pick for each mask, backend and GPU (its stages are the widest a pick may run; it takes no
    # reorderer of the grid's: the candidates name their own)
    Variant("auto", "both", "choose", color="tab:brown", marker="P"),
)})
# the integrations' first words for their reorder= argument
REORDER_WORDS: Mapping[str, str] = MappingProxyType({"always": "wavealign", "never": ORIGINAL_VARIANT})


def get(name: str) -> Variant:
    """The variant called ``name`` (or ``always`` / ``never``); a ValueError lists the known names otherwise."""
    try:
        return VARIANTS[REORDER_WORDS.get(name, name)]
    except (KeyError, TypeError):
        raise ValueError(f"unknown variant {name!r}; expected one of {[*VARIANTS, *REORDER_WORDS]}") from None


def recorded(name: str, stages: str | None, skip: str = "force") -> Variant:
    """The variant a cell records (``Variant.columns``): the library's of that name (fixed: a sweep cannot change
    them), else the sweep's own (declared under ``variants:``), made from the recorded ``stages`` and ``skip``."""
    known = VARIANTS.get(name)
    return known if known is not None else Variant(name, stages, skip)


def of_row(row: Mapping[str, Any]) -> Variant:
    """The variant a dataset row (or a cell's flat view) records: ``recorded`` from its columns."""
    return recorded(row["variant"], row.get("stages"), row.get("skip") or "force")


def of_spec(spec: AttentionSpec) -> Variant:
    """The variant a cell's attention step runs (``recorded`` from its spec's columns)."""
    return recorded(spec.variant, spec.stages, spec.skip)


def forced(stages: str) -> str:
    """The variant that runs ``stages`` with no veto (``both`` -> ``wavealign``): how a stage set is named and
    coloured where a row records its stages only."""
    return next(v.name for v in VARIANTS.values() if v.stages == stages and v.skip == "force")
