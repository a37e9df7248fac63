"""Time reorder.plan (Stage 1 + Stage 2) on a CPU or a GPU for one mask shape; prints the median."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from wavealign import reorder, synthetic


def time_plan(mask: torch.Tensor, stages: str, iters: int, wave_size: int, repeats: int) -> list[float]:
    """Wall-clock milliseconds of each of ``repeats`` plans after one warm-up (synchronised on CUDA)."""
    sync = torch.cuda.synchronize if mask.is_cuda else (lambda: None)
    reorder.plan(mask, wave_size=wave_size, stages=stages, iters=iters)
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        reorder.plan(mask, wave_size=wave_size, stages=stages, iters=iters)
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="wavealign bench-reorder", description=__doc__)
    parser.add_argument("--heads", type=int, default=40)
    parser.add_argument("--blocks", type=int, default=2840, help="query = kv blocks per head (2840: 364K tokens)")
    parser.add_argument("--density", type=float, default=0.25)
    parser.add_argument("--stages", default="both", choices=reorder.STAGES)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--wave-size", type=int, default=132)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, help="write the timings as JSON here")
    args = parser.parse_args(argv)

    mask = synthetic.random_mask(args.heads, args.blocks, args.blocks, args.density, seed=0, device=args.device)
    times = time_plan(mask, args.stages, args.iters, args.wave_size, args.repeats)
    record = {
        "heads": args.heads, "blocks": args.blocks, "density": args.density, "stages": args.stages,
        "iters": args.iters, "device": args.device, "repeats": args.repeats, "plan_ms": times,
        "median_ms": statistics.median(times), "torch": torch.__version__, "threads": torch.get_num_threads(),
        "host": platform.node(), "processor": platform.processor() or platform.machine(),
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2))
    print(f"reorder.plan {args.heads} heads x {args.blocks}x{args.blocks} @ {args.density:.0%}, stages="
          f"{args.stages}, T={args.iters} on {args.device}: median {record['median_ms']:.1f} ms "
          f"over {args.repeats} runs ({torch.get_num_threads()} threads)")
    return 0
