"""Run a sweep's simulated cells in this one process, so their masks are built on this process's GPU.

``wavealign sweep sweep=beyond_sim`` runs the same cells on Ray's CPU workers, which see no GPU (Ray hides it from
them): at 363,600 tokens x 40 heads a method's mask then takes many minutes a set. Here the sweep's config is composed
and validated as the sweep does it (``orchestrator.config``), its cells expanded (``orchestrator.grid``) and each
group run through ``wavealign.pipeline.run_group``, the sweep's own path, the groups on one mask back to back with
one input cache (the mask is built once, on the GPU where there is one); the rows go to ``RUN_ROOT/results`` in the
sweep's Parquet layout (``orchestrator.dataset``), where ``table.py`` and ``analysis.load`` read them.

    python benchmarks/results/beyond-sim/run_in_process.py RUN_ROOT [KEY=VALUE ...]   # Hydra overrides, as the sweep
"""

from __future__ import annotations

import itertools
import sys
import time
import uuid

from orchestrator import config, dataset, grid
from wavealign import inputs, pipeline


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-") or "=" in argv[0]:
        print("usage: run_in_process.py RUN_ROOT [KEY=VALUE ...]", file=sys.stderr)
        return 2
    run_root, overrides = argv[0], ["sweep=beyond_sim", *argv[1:]]
    cfg = config.load(overrides)
    config.validate(cfg)
    cells = grid.expand(cfg).cells
    sweep_id = uuid.uuid4().hex[:16]
    cache = inputs.InputCache()
    # the groups on one mask next to each other, so the cache builds it once
    ordered = sorted(cells, key=lambda c: (pipeline.inputs_key(c), c.group_id))
    print(f"{cfg.name}: {len(cells)} cells in {len({c.group_id for c in cells})} groups -> {run_root}", flush=True)
    for _, cells_of_group in itertools.groupby(ordered, key=lambda c: c.group_id):
        group = list(cells_of_group)
        start = time.perf_counter()
        results = pipeline.run_group(group, inputs=cache)
        rows = [dataset.make_row(c, r, sweep_id=sweep_id, sweep_name=cfg.name) for c, r in zip(group, results,
                                                                                              strict=True)]
        dataset.write(run_root, rows)
        failed = [r.error for r in results if r.status != "done"]
        print(f"{group[0].hardware} {group[0].inputs.method} {len(group)} cells, {time.perf_counter() - start:.1f} s"
              + (f"; failed: {failed}" if failed else ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
