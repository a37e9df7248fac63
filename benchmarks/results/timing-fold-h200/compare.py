"""Does ``timing.time_rounds`` time one launch as ``timing.time_cuda`` did? The check before ``bench-e2e`` and
``bench-masks`` move from ``time_cuda`` (one sync per block of reps) onto ``time_rounds`` (one sync per round).

    python benchmarks/results/timing-fold-h200/compare.py --out FILE.json

On the GPU: the triton backend's launch of a random 30 % mask (4 heads, 65,536 tokens, bf16), and the same mask in
WaveAlign's order; for each, ``time_cuda`` and ``time_rounds(paired=False)`` alternate 6 times (20 reps after 1
warm-up each); printed: each timer's median of medians and the ratio rounds/cuda per launch, with its range.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

from wavealign import kernels, launch_order
from wavealign.instruments import timing
from wavealign.kernels import LaunchShape
from wavealign.masks import synthetic


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    device = torch.device("cuda")
    tokens, heads, dim, block = 65536, 4, 128, 128
    blocks = tokens // block
    mask = synthetic.random_mask(heads, blocks, blocks, 0.3, seed=0).to(device)
    gen = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(1, heads, tokens, dim, generator=gen, device=device, dtype=torch.bfloat16)
               for _ in range(3))
    shape = LaunchShape.of(q, k, block, v=v)
    backend = kernels.get("triton")
    order = launch_order.plan(mask, wave_size=backend.wave_size("h200"), stages="both")
    rows = []
    for name, planned in (("original", None), ("wavealign", order)):
        launch = backend.plan(mask, planned, shape)
        fn = lambda launch=launch: launch.run(q, k, v)  # noqa: E731
        fn()
        for trial in range(6):
            cuda = timing.time_cuda(fn, reps=20, warmup=1).median_ms
            rounds = timing.summarize(timing.time_rounds([fn], device=device, reps=20, warmup=1,
                                                         paired=False).samples_ms[0]).median_ms
            rows.append({"launch": name, "trial": trial, "time_cuda_ms": cuda, "time_rounds_ms": rounds,
                         "ratio": rounds / cuda})
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(device), "torch": torch.__version__, "rows": rows}, f, indent=1)
    print("| launch | time_cuda ms (median of 6) | time_rounds ms | rounds / cuda (median) | range |")
    print("|---|---|---|---|---|")
    for name in ("original", "wavealign"):
        mine = [r for r in rows if r["launch"] == name]
        ratios = [r["ratio"] for r in mine]
        print(f"| {name} | {statistics.median(r['time_cuda_ms'] for r in mine):.4f} | "
              f"{statistics.median(r['time_rounds_ms'] for r in mine):.4f} | {statistics.median(ratios):.4f} | "
              f"{min(ratios):.4f}-{max(ratios):.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
