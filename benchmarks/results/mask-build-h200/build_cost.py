"""What building one sweep group's inputs costs on the GPU, split into the workload's Q/K/V and the method's mask
(issue 17, item 2: "masks at 364K x 40 heads should take well under a second").

Each group of the grid (default: ``sweep=h200`` at 364K tokens, 40 heads, every method) is built as a sweep
worker builds it, ``pipeline.build_inputs``; the workload alone is timed first, and the mask's share is the rest.
Times are wall-clock milliseconds between CUDA synchronisations: a build is a sequence of many launches with host
work between them, and the worker waits for all of it. Each mask's SHA-256 is printed, so that two code versions
run one after the other (``PYTHONPATH`` naming each tree) can be checked to build the same masks.

    PYTHONPATH=<tree> python3 benchmarks/results/mask-build-h200/build_cost.py --label new --out $OUT/new.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

DEFAULT_OVERRIDES = ["sweep=h200", "grid.seq_k=[364]", "grid.backend=[triton]", "grid.variant=[original]",
                     "~extra_grids.dense_baseline", "grid.ncu=false", "mlflow.enabled=false"]


def synced_ms(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and the wall-clock ms it took, from an idle GPU to an idle GPU."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, (time.perf_counter() - start) * 1e3


def main() -> None:
    from orchestrator import config, grid
    from wavealign import pipeline

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="names this code version in the output")
    parser.add_argument("--out", type=Path, required=True, help="JSON file for the rows")
    parser.add_argument("overrides", nargs="*", default=DEFAULT_OVERRIDES, help="the sweep's config overrides")
    args = parser.parse_args()
    device = torch.device("cuda")
    groups: dict[str, Any] = {}
    for cell in grid.expand(config.load(args.overrides)).cells:
        groups.setdefault(cell.group_id, cell)
    rows = []
    for cell in groups.values():
        workload_ms = synced_ms(lambda c=cell: pipeline._workload_qkv(c, device))[1]  # Q/K/V freed at once
        torch.cuda.empty_cache()
        (mask, _qkv), build_ms = synced_ms(lambda c=cell: pipeline.build_inputs(c, device))
        digest = hashlib.sha256(mask.cpu().numpy().tobytes()).hexdigest()[:16]
        rows.append({"label": args.label, "method": cell.method, "seq_len_tokens": cell.seq_len_tokens,
                     "heads": cell.num_heads, "workload_ms": workload_ms, "build_ms": build_ms,
                     "mask_ms": build_ms - workload_ms, "density": float(mask.float().mean()), "mask_sha256": digest})
        print(json.dumps(rows[-1]), flush=True)
        del mask, _qkv
        torch.cuda.empty_cache()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                    "overrides": args.overrides, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
