"""Show WaveAlign on one mask: per-wave K/V-block union before and after the reorder, and exactness."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobs.arguments import Parser

if TYPE_CHECKING:  # the library imports torch: main imports it once its arguments parse
    import torch

    from wavealign import launch_order

EXTRAS = ("sweep",)  # rich, for the table


def wave_union_blocks(mask: torch.Tensor, order: launch_order.RowOrder, wave_size: int) -> torch.Tensor:
    """Mean number of distinct K/V blocks a wave of ``wave_size`` launch slots touches, per head."""
    import torch

    from wavealign import launch_order

    rows = launch_order.permute_mask(mask, order)
    h, mb, nb = rows.shape
    pad = (-mb) % wave_size
    rows = torch.cat([rows, rows.new_zeros(h, pad, nb)], dim=1)
    return rows.reshape(h, -1, wave_size, nb).any(2).sum(-1).float().mean(-1)


def main(argv: list[str]) -> int:
    parser = Parser("demo", __doc__)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--q-blocks", type=int, default=512, help="query blocks (= kv blocks) per head")
    parser.add_argument("--density", type=float, default=0.25)
    parser.add_argument("--wave-size", type=int, default=132)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import torch
    from rich.console import Console
    from rich.table import Table

    from wavealign import kernels, launch_order
    from wavealign.masks import synthetic

    mask = synthetic.planted_mask(args.heads, args.q_blocks, args.q_blocks, args.density, seed=args.seed)
    table = Table(title=f"K/V blocks touched per wave of {args.wave_size} rows "
                        f"({args.heads} heads x {args.q_blocks}x{args.q_blocks} blocks, planted structure)")
    table.add_column("variant")
    table.add_column("mean union (blocks)", justify="right")
    table.add_column("vs original", justify="right")
    base = None
    for stages in launch_order.STAGES:
        order = launch_order.plan(mask, wave_size=args.wave_size, stages=stages, seed=args.seed)
        union = float(wave_union_blocks(mask, order, args.wave_size).mean())
        base = base or union
        table.add_row(stages, f"{union:.1f}", f"{union / base:.2f}x")
    console = Console()
    console.print(table)

    # exactness: the reference kernel gives bitwise the same output in launch order as in the original
    block, heads, blocks = 16, 2, 48
    q, k, v = (torch.randn(1, heads, blocks * block, 32, generator=torch.Generator().manual_seed(i))
               for i in range(3))
    small = synthetic.planted_mask(heads, blocks, blocks, args.density, seed=args.seed)
    order = launch_order.plan(small, wave_size=8, stages="both")
    ref = kernels.get("reference")
    plain = ref(q, k, v, small, block_size=block)
    permuted = launch_order.restore_rows(ref(launch_order.permute_rows(q, order, block), k, v,
                                        launch_order.permute_mask(small, order), block_size=block), order, block)
    exact = torch.equal(plain, permuted)
    console.print(f"reference output with the reorder equals it without, bitwise: [bold]{exact}[/bold]")
    return 0 if exact else 1
