"""Simulate one synthetic cell and time it: ``python -m wavealign.sim --heads 40 --q-blocks 2840``.

Prints the predicted L2 hit ratio, HBM bytes and kernel time, and the wall and CPU time of the
simulation alone (mask generation and reordering excluded; the numba compile is done by a warm-up on a tiny mask).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from wavealign import hardware, sim


def _random_mask(heads: int, q_blocks: int, density: float, seed: int) -> torch.Tensor:
    """Uniform random rows, generated head by head (cheap at 40 x 2840 x 2840 unlike a full argsort)."""
    rng = np.random.default_rng(seed)
    return torch.from_numpy(np.stack([rng.random((q_blocks, q_blocks)) < density for _ in range(heads)]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wavealign.sim", description=__doc__)
    parser.add_argument("--heads", type=int, default=40)
    parser.add_argument("--q-blocks", type=int, default=2840, help="query = kv blocks (2840 = 364K tokens)")
    parser.add_argument("--density", type=float, default=0.25)
    parser.add_argument("--hardware", default="h100", choices=hardware.names())
    parser.add_argument("--backend", default="fa4")
    parser.add_argument("--l2-partitions", type=int, default=None, choices=(1, 2),
                        help="default: the GPU's (wavealign.hardware: l2_partitions)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    sim.simulate(_random_mask(1, 8, 0.5, 0), hardware=args.hardware, backend=args.backend,
                 l2_partitions=args.l2_partitions)  # numba compile, kept out of the timing
    mask = _random_mask(args.heads, args.q_blocks, args.density, args.seed)
    start, start_cpu = time.perf_counter(), time.process_time()
    r = sim.simulate(mask, hardware=args.hardware, backend=args.backend, l2_partitions=args.l2_partitions)
    wall_s, cpu_s = time.perf_counter() - start, time.process_time() - start_cpu
    print(json.dumps({
        "heads": args.heads, "q_blocks": args.q_blocks, "density": args.density,
        "hardware": args.hardware, "backend": args.backend, "l2_partitions": r.l2_partitions,
        "kv_block_reads": int(mask.sum()), "l2_hit_pct": round(r.l2_hit_pct, 2),
        "hbm_read_bytes": r.hbm_read_bytes, "kernel_ms": round(r.kernel_time_s * 1e3, 3),
        "simulate_wall_s": round(wall_s, 2), "simulate_cpu_s": round(cpu_s, 2),
    }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
