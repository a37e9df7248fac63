"""Where the order chooser's host time goes on one 40-head layer (issue 47: "state its cost beside the plan's").

The sweep's own mask of a family at 363,600 tokens (``bands.masks``, built on the GPU), ranked for FA4 on this GPU as
a live layer ranks it: each candidate's plan (on the mask's device, and on the host copy the background chooser
uses), its prediction (``sim.predict``: the whole launch's schedule and the L2 replay of 4 heads), one at a time; then
``launch_order.rank`` whole (its candidates side by side on threads), from the GPU mask and from the host copy.

    python benchmarks/results/orders-h200/choose_cost.py OUT.csv [--method xattention] [--seq-k 364]
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import torch
from bands import masks

from wavealign import hardware, kernels, sim
from wavealign.launch_order import chooser


def seconds(work) -> tuple[object, float]:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    value = work()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return value, time.perf_counter() - start


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--method", default="xattention")
    parser.add_argument("--seq-k", type=int, default=364, choices=(148, 364))
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gpu = hardware.detect().name if device.type == "cuda" else "h100"
    method, mask, latent, _ = next(masks(args.seq_k, {args.method}, device))
    wave = kernels.get("fa4").wave_size(gpu)
    host = mask.cpu()
    rows = []
    launched, s = seconds(lambda: sim.launch_rows(mask.to(device)))
    rows.append(dict(step="launch_rows", candidate="", where=device.type, seconds=round(s, 3)))
    for c in chooser.eligible("fa4", gpu, latent=latent):
        for where, m in ((device.type, mask.to(device)), ("host", host)):
            order, s = seconds(lambda m=m, c=c: chooser.plan_candidate(m, c, wave_size=wave, latent=latent))
            rows.append(dict(step="plan", candidate=c.name, where=where, seconds=round(s, 3)))
        _, s = seconds(lambda order=order: sim.predict(launched, order, hardware=gpu, backend="fa4", wave_size=wave,
                                                       sample_heads=chooser.DEFAULT_SAMPLE_HEADS))
        rows.append(dict(step="predict", candidate=c.name, where="host", seconds=round(s, 3)))
    for where, m in ((device.type, mask.to(device)), ("host", host)):
        choice, s = seconds(lambda m=m: chooser.rank(m, backend="fa4", hardware=gpu, latent=latent))
        rows.append(dict(step="rank", candidate=choice.candidate, where=where, seconds=round(s, 3)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, ["gpu", "method", "seq_k", "step", "candidate", "where", "seconds"])
        writer.writeheader()
        writer.writerows({"gpu": gpu, "method": method, "seq_k": args.seq_k, **r} for r in rows)
    for r in rows:
        print(f"{r['step']:12s} {r['candidate']:14s} {r['where']:5s} {r['seconds']:8.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
