"""A recorded cell's mask, rebuilt with this code: what Fig. 14 draws (one head before and after its launch order).

A row's ``cell_json`` says everything the sweep built the mask from; rebuilding it here goes through the sweep's own
``wavealign.inputs.build`` and the cell's own reorderer, so the picture is the launch order the kernel was given.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch


@dataclass(frozen=True)
class RebuiltHead:
    """One head of a recorded cell's mask, in its original order and in the cell's launch order."""

    head: torch.Tensor  # (1, MB, NB) bool, original order
    after: torch.Tensor  # the same head with its rows in launch order
    stages: str  # the stages that ordered ``after`` (a cell that ran none is drawn with both)
    reorderer: str
    wave_size: int
    hardware: str
    method: str
    seq_len_tokens: int


def rebuild_head(config: dict[str, Any]) -> RebuiltHead:
    """The first head of the cell ``config`` (a row's ``cell_json``), rebuilt and reordered on this process's device
    (a GPU when one is visible); only that head's Q/K are drawn for a model preset."""
    from wavealign import inputs, launch_order
    from wavealign.attention import AttentionStep
    from wavealign.records import Cell

    cell = Cell.from_flat(config)
    spec = cell.inputs
    if spec.model is not None:  # one head is all the figure shows: build only that head's Q/K
        spec = replace(spec, heads=list(spec.heads[:1]), num_heads=1)
    # the mask alone, no Q/K/V for a kernel, built on a GPU when one is visible
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    mask, _ = inputs.build(inputs.InputRequest(spec, cell.attention.geometry.block_size, device, with_qkv=False))
    head = mask[:1]
    step = AttentionStep.of(cell.attention, spec)  # the cell's own reorderer and its params
    stages = step.variant.stages if step.variant.reorders else "both"
    return RebuiltHead(head.cpu(), launch_order.permute_mask(head, step.plan_order(head, stages)).cpu(), stages,
                       cell.attention.reorderer, cell.attention.geometry.wave_size, cell.hardware, spec.method,
                       spec.seq_len_tokens)
