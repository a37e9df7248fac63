"""The GPUs users buy next, by simulation at 40 heads (issue 47, item 5), and the H200's static-path predictions.

For each of the seven families, the mask of Wan2.1-14B at 363,600 tokens x 40 heads (the sweep's own inputs: the
``orders_h200`` cells' ``InputSpec``, built on this GPU) is ranked by the order chooser (``launch_order.rank``) on
every head (``sample_heads=None``) for FA4 on the B200 (SM100: 256-row units of paired blocks, static persistent
scheduler) and the H100 (SM90, streaming), with one and with two L2 partitions; each candidate's kernel time is then
re-derived over the borrowed exposed-HBM share 0.1-0.4 from its compute and memory times. Then the same at 147,600
tokens for triton-static and FA4 on the H200, whose predictions the measured sweep rows are checked against.
Every figure written is SIMULATED. The masks are built on the GPU (``--device cuda``, as the sweep builds them) or,
where no GPU is lent, on the CPU from the same seeded specs (``--device cpu``: the same generators, other random
draws); each row names where (``mask_device``). Where the kernel pairs blocks into units (the B200), each row also
carries the OR-inflation of the kernel's own pairing (token adjacency) beside the chooser's, so what pairing removes
is read off.

    python benchmarks/results/orders-h200/bands.py OUT [--methods M,M] [--lengths 364,148] [--device cpu]
        # -> OUT/bands.csv (364), OUT/h200_predictions.csv (148)
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
import time
from pathlib import Path

import torch

from orchestrator import config, grid
from wavealign import inputs, sim
from wavealign import masks as wavealign_masks
from wavealign.launch_order import chooser, pairing
from wavealign.records import InputSpec

EXPOSED = (0.1, 0.21, 0.4)  # the borrowed band, and the H200's fitted share (kernels/fa4.py)
FIELDS = ("hardware", "backend", "method", "seq_k", "l2_partitions", "candidate", "exposed", "kernel_ms",
          "compute_ms", "memory_ms", "limit_ms", "speedup", "limit_speedup", "or_inflation", "or_inflation_adjacent",
          "chosen", "mask_device")


def masks(seq_k: int, methods: set[str] | None, device: torch.device):
    """(method, mask, latent) of each family (of ``methods``, None: all) at ``seq_k`` thousand tokens, from the
    sweep's own cells, built on ``device``."""
    cfg = config.load(["sweep=orders_h200", f"grid.seq_k=[{seq_k}]", "grid.variant=[original]"])
    cache = inputs.InputCache()
    for cell in grid.expand(cfg).cells:
        the_original = (cell.attention.backend, cell.attention.variant, cell.inputs.workload) == (
            "fa4", "original", "wan14b-720p")
        if not the_original or (methods is not None and cell.inputs.method not in methods):
            continue
        block_size = cell.attention.geometry.block_size
        if device.type == "cpu" and wavealign_masks.get(cell.inputs.method).needs_qk:
            mask = head_by_head(cell.inputs, block_size)
        else:
            mask, _, _, _ = cache.take(inputs.InputRequest(cell.inputs, block_size, device, with_qkv=False))
        yield cell.inputs.method, mask.cpu(), inputs.latent(cell.inputs), cell


def head_by_head(spec: InputSpec, block_size: int) -> torch.Tensor:
    """The (H, MB, NB) mask of a family built from the model's Q/K (VSA, SVG2), one head at a time on the CPU: all
    40 heads' float32 Q/K/V at 363,600 tokens (22 GB) do not fit a 23 GiB host; one head's do. The generator draws
    each head's Q/K/V from its own seed, so VSA's mask is the all-heads one; SVG2's k-means start is drawn by a
    head's place in the batch, so each head here starts as head 0 would (another draw, as ``--device cpu`` is)."""
    heads = list(spec.heads) or list(range(spec.num_heads))
    return torch.cat([inputs.build(inputs.InputRequest(dataclasses.replace(spec, heads=[h]), block_size,
                                                       torch.device("cpu"), with_qkv=False))[0] for h in heads])


def rows(method: str, mask, latent, cell, hardware: str, backend: str, seq_k: int, partitions: int, device: str):
    start = time.perf_counter()
    choice = chooser.rank(mask, backend=backend, hardware=hardware, block_size=128, latent=latent,
                          token_ordered=cell.inputs.method in ("vsa", "svg2"), sample_heads=None,
                          l2_partitions=partitions)
    print(f"{hardware} {backend} {method} {seq_k}K L2x{partitions}: {choice.candidate} "
          f"({(time.perf_counter() - start):.0f} s)", flush=True)
    facts = sim.execution_facts(backend, hardware)
    adjacent = ""
    if facts.q_stage > 1:
        blocks = mask.reshape(-1, *mask.shape[-2:])
        order = torch.arange(blocks.shape[1]).expand(blocks.shape[0], -1)
        adjacent = round(pairing.or_inflation(blocks, order, facts.q_stage), 4)
    for exposed in EXPOSED:
        def at(p, exposed=exposed):
            return (max(p.compute_time_s, p.memory_time_s) + exposed * min(p.compute_time_s, p.memory_time_s)
                    + sim.LAUNCH_OVERHEAD_S) * 1e3
        original = at(next(s.prediction for s in choice.scored if s.candidate == "original"))
        limit = at(choice.limit)
        for s in choice.scored:
            kernel = at(s.prediction)
            yield dict(hardware=hardware, backend=backend, method=method, seq_k=seq_k, l2_partitions=partitions,
                       candidate=s.candidate, exposed=exposed, kernel_ms=round(kernel, 4),
                       compute_ms=round(s.prediction.compute_time_s * 1e3, 4),
                       memory_ms=round(s.prediction.memory_time_s * 1e3, 4), limit_ms=round(limit, 4),
                       speedup=round(original / kernel, 4), limit_speedup=round(original / limit, 4),
                       or_inflation=round(choice.or_inflation, 4) if facts.q_stage > 1 else "",
                       or_inflation_adjacent=adjacent,
                       chosen=s.candidate == choice.candidate, mask_device=device)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--methods", help="comma-separated families (default: all seven)")
    parser.add_argument("--lengths", default="364,148", help="thousands of tokens, of 364 and 148")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where the masks are built (default: the GPU if there is one)")
    args = parser.parse_args(argv)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    methods = set(args.methods.split(",")) if args.methods else None
    plan = {364: [("b200", "fa4", 1), ("b200", "fa4", 2), ("h100", "fa4", 1), ("h100", "fa4", 2)],
            148: [("h200", "triton-static", 2), ("h200", "fa4", 2)]}
    lengths = [int(x) for x in args.lengths.split(",")]
    if not set(lengths) <= set(plan):
        parser.error(f"--lengths {args.lengths!r}: expected thousands of tokens among {sorted(plan)}")
    for seq_k in lengths:
        runs = plan[seq_k]
        name = "bands.csv" if seq_k == 364 else "h200_predictions.csv"
        with (out / name).open("w", newline="") as f:
            writer = csv.DictWriter(f, FIELDS)
            writer.writeheader()
            for method, mask, latent, cell in masks(seq_k, methods, torch.device(args.device)):
                for hardware, backend, partitions in runs:
                    writer.writerows(rows(method, mask, latent, cell, hardware, backend, seq_k, partitions,
                                          args.device))
                    f.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
