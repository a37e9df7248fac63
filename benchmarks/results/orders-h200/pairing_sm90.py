"""FA4 with 256-row sparse Q blocks on SM90 (issue 47, item 3): what a unit of two paired blocks costs, and what
pairing them by K/V overlap removes, measured on the H200.

FA4 4.0.0b36 accepts a sparse Q block that spans several of its M tiles on SM90 (``interface.py``,
``_fit_sm90_fwd_tile_to_block_sparsity``: "Sparse Q blocks may span multiple M tiles"; ``block_sparsity.py``,
``q_subtile_factor = sparse_block_size_q // tile_m``): with 256-row blocks each 128-row tile walks its unit's K/V
list, the union (OR) of the two blocks' lists, as SM100's ``q_stage = 2`` does. For each family's mask (the sweep's
own cells, 40 heads) four launches are timed together (paired rounds, L2 flushed, CUDA events):

- ``b128``: 128-row blocks in the original order (no OR: each block its own list);
- ``adjacent``: 256-row units of token-adjacent blocks (the kernel's own pairing), in the original order;
- ``b128_stage1``: 128-row blocks in the order the chooser's pairing lays them out (per head WaveAlign's Stage 1
  order where that pairing is cheaper, else the original);
- ``paired``: 256-row units of that pairing (``launch_order.pairing.pair_blocks``), in that order.

``adjacent / b128`` is the cost of the kernel's own pairing, ``paired / b128_stage1`` that of the overlap pairing
at the same launch order; the predicted OR-inflations (``pairing.or_inflation``) are written beside them. Every block
of a unit's OR runs as a full block (no mask_mod on the blocks only one of the two selects), so a 256-row launch
times the OR's work, not an exact attention: an exact kernel adds a mask_mod on those blocks.

    python benchmarks/results/orders-h200/pairing_sm90.py OUT.csv [--methods M,M] [--seq-k 148] [--reps 5]
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import torch
from bands import masks

from wavealign import launch_order, metrics
from wavealign.instruments import timing
from wavealign.kernels import fa4
from wavealign.kernels.sparse_formats import full_block_lists
from wavealign.launch_order import block_gather, pairing

HEAD_DIM, BLOCK = 128, 128
LAUNCHES = ("b128", "adjacent", "b128_stage1", "paired")


def unit_mask(rows: torch.Tensor) -> torch.Tensor:
    """(H, ceil(MB / 2), NB): each unit of two consecutive rows of ``rows`` (H, MB, NB) selects the OR of their
    lists."""
    if rows.shape[1] % 2:
        rows = torch.cat([rows, rows.new_zeros(rows.shape[0], 1, rows.shape[2])], dim=1)
    return rows.reshape(rows.shape[0], -1, 2, rows.shape[2]).any(2)


def launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, perm: torch.Tensor | None,
           q_block: int):
    """A callable running FA4 on ``mask``'s blocks in ``perm``'s order (None: the original), ``q_block`` rows a
    sparse Q block (128: the blocks themselves; 256: units of consecutive pairs)."""
    flash_attn_func, sparse_tensors = fa4._flash_attn()
    order = None if perm is None else launch_order.RowOrder.from_perm(perm, wave_size=132, stages="both")
    rows = mask if order is None else pairing.paired_rows(mask, order.perm)
    count, index = full_block_lists(rows if q_block == BLOCK else unit_mask(rows))
    sparse = sparse_tensors(mask_block_cnt=torch.zeros_like(count), mask_block_idx=index, full_block_cnt=count,
                            full_block_idx=index, block_size=(q_block, BLOCK))
    qq = q if order is None else block_gather.gather_blocks(q, order, BLOCK)
    pad = (-qq.shape[2]) % q_block
    if pad:
        qq = torch.nn.functional.pad(qq, (0, 0, 0, pad))
    qt, kt, vt = qq.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    return lambda: flash_attn_func(qt, kt, vt, block_sparse_tensors=sparse)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--methods", help="comma-separated families (default: all seven)")
    parser.add_argument("--seq-k", type=int, default=148, choices=(148, 364))
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    methods = set(args.methods.split(",")) if args.methods else None
    device = torch.device("cuda")
    fields = ["method", "seq_k", "heads", "or_inflation_adjacent", "or_inflation_paired", "stage1_heads",
              *(f"{n}_ms" for n in LAUNCHES), "adjacent_over_b128", "adjacent_low", "adjacent_high",
              "paired_over_b128_stage1", "paired_low", "paired_high", "rounds"]
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fields)
        writer.writeheader()
        for method, mask, _, cell in masks(args.seq_k, methods, torch.device("cuda")):
            mask = mask.to(device)
            heads, mb, _ = mask.shape
            tokens = cell.inputs.seq_len_tokens
            gen = torch.Generator(device=device).manual_seed(0)
            q, k, v = (torch.randn(1, heads, tokens, HEAD_DIM, generator=gen, device=device, dtype=torch.bfloat16)
                       for _ in range(3))
            adjacent = torch.arange(mb, device=device).expand(heads, mb).contiguous()
            paired = pairing.pair_blocks(mask, 2).to(device)
            fns = [launch(q, k, v, mask, None, BLOCK), launch(q, k, v, mask, None, 2 * BLOCK),
                   launch(q, k, v, mask, paired, BLOCK), launch(q, k, v, mask, paired, 2 * BLOCK)]
            rounds = timing.time_rounds(fns, device=device, reps=args.reps, warmup=1)
            ms = [sorted(s)[len(s) // 2] for s in rounds.samples_ms]
            # a 256-row launch's time over the 128-row one's in the same order, from the rounds' pairs
            adj = metrics.paired_ratio(rounds.samples_ms[1], rounds.samples_ms[0])
            par = metrics.paired_ratio(rounds.samples_ms[3], rounds.samples_ms[2])
            row = dict(method=method, seq_k=args.seq_k, heads=heads,
                       or_inflation_adjacent=round(pairing.or_inflation(mask, adjacent, 2), 4),
                       or_inflation_paired=round(pairing.or_inflation(mask, paired, 2), 4),
                       stage1_heads=int((paired != adjacent).any(-1).sum()),
                       **{f"{n}_ms": round(t, 3) for n, t in zip(LAUNCHES, ms, strict=True)},
                       adjacent_over_b128=round(adj.point, 4), adjacent_low=round(adj.low, 4),
                       adjacent_high=round(adj.high, 4), paired_over_b128_stage1=round(par.point, 4),
                       paired_low=round(par.low, 4), paired_high=round(par.high, 4),
                       rounds=len(rounds.samples_ms[0]))
            writer.writerow(row)
            f.flush()
            print(f"{method}: adjacent {row['adjacent_over_b128']:.3f}x of 128-row (predicted "
                  f"{row['or_inflation_adjacent']:.3f}), paired {row['paired_over_b128_stage1']:.3f}x (predicted "
                  f"{row['or_inflation_paired']:.3f})", flush=True)
            del q, k, v, fns
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
