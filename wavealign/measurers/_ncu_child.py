"""The program ``ncu`` profiles (``measurers.ncu``): ``python -m wavealign.measurers._ncu_child CELLS.json`` builds
the group's inputs once on the GPU; per cell it plans the order and the launch, warms up, then runs one launch
between profiler start/stop, opened by the marker kernel. The cells are the group's as the grid built them (their
flat view, ``Cell.flat``), each with the stages it applied and the candidate its chooser picked (``measurers.ncu``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from wavealign import inputs
from wavealign.attention import AttentionStep
from wavealign.instruments import ncu
from wavealign.records import Cell


def main(spec_path: str) -> int:
    launches = json.loads(Path(spec_path).read_text())["launches"]
    cells = [Cell.from_flat(launch["cell"]) for launch in launches]
    device = torch.device("cuda")
    first = cells[0]
    mask, qkv = inputs.build(inputs.InputRequest(first.inputs, first.attention.geometry.block_size, device,
                                                 with_qkv=True))
    for cell, replayed in zip(cells, launches, strict=True):
        step, stages = AttentionStep.of(cell.attention, cell.inputs), replayed["stages"]
        order = None if stages == "none" else step.plan_order(mask, stages, replayed["candidate"])
        launch = step.launch(mask, order, inputs.launch_shape(cell.inputs, cell.attention.geometry, qkv, device))
        ncu.profile_one_launch(lambda launch=launch: launch.run(*qkv), marker=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
