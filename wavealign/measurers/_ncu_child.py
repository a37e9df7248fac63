"""The program ``ncu`` profiles (``measurers.ncu``): ``python -m wavealign.measurers._ncu_child CELLS.json`` builds
the group's inputs once; per cell it plans the order and the launch, warms up, then runs one launch between profiler
start/stop, opened by the marker kernel."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from wavealign import inputs, placement
from wavealign.attention import AttentionStep
from wavealign.instruments import ncu
from wavealign.records import Cell


def main(spec_path: str) -> int:
    cells = [Cell.from_flat(c) for c in json.loads(Path(spec_path).read_text())["cells"]]
    device = placement.device(cells[0])
    mask, qkv = inputs.build(cells[0], device)
    for cell in cells:
        step = AttentionStep.for_cell(cell)
        order = None if cell.stages == "none" else step.plan_order(mask, cell.stages)
        launch = step.launch(mask, order, inputs.launch_shape(cell, qkv, device))
        ncu.profile_one_launch(lambda launch=launch: launch.run(*qkv), marker=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
