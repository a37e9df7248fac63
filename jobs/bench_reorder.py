"""Time launch_order.plan on a CPU or a GPU for one mask shape, with WaveAlign's Stage 1 or any reorderer; prints the
median. A reorderer that needs no warm-up (a compiled host library) is timed from its first call."""

from __future__ import annotations

import json
import platform
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.arguments import Parser, RegistryChoices, check_at_least, check_device, output_file

if TYPE_CHECKING:  # the library imports torch: main imports it once its arguments parse
    import torch

MASKS = ("random", "planted")  # wavealign.masks.synthetic's <name>_mask: iid random, or planted prototypes


def _stages() -> tuple[str, ...]:
    from wavealign import launch_order

    return launch_order.STAGES


def time_plan(mask: torch.Tensor, stages: str, wave_size: int, repeats: int, reorderer: str = "wavealign",
              **params) -> tuple[list[float], list[float]]:
    """Milliseconds of each of ``repeats`` plans, after one warm-up plan where the reorderer needs one: the wall
    clock from a synchronised start to a synchronised end (host work included), and on CUDA the GPU's span between
    two events (an empty list on a CPU)."""
    import torch

    from wavealign import launch_order, reorderers
    from wavealign.instruments.timing import synced_clock

    def plan() -> None:
        launch_order.plan(mask, wave_size=wave_size, stages=stages, reorderer=reorderer, **params)

    if reorderers.get(reorderer).needs_warmup:
        plan()
    wall, gpu = [], []
    for _ in range(repeats):
        start = synced_clock(mask.device)
        if mask.is_cuda:
            events = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            events[0].record()
        plan()
        if mask.is_cuda:
            events[1].record()
        wall.append((synced_clock(mask.device) - start) * 1e3)
        if mask.is_cuda:
            gpu.append(events[0].elapsed_time(events[1]))
    return wall, gpu


def main(argv: list[str]) -> int:
    parser = Parser("bench-reorder", __doc__)
    parser.add_argument("--heads", type=int, default=40)
    parser.add_argument("--blocks", type=int, default=2840, help="query = kv blocks per head (2840: 364K tokens)")
    parser.add_argument("--density", type=float, default=0.25)
    parser.add_argument("--stages", default="both", choices=RegistryChoices(_stages), metavar="STAGES",
                        help="wavealign.launch_order's stages (default: %(default)s; a wrong one lists them)")
    parser.add_argument("--reorderer", default="wavealign",
                        help="a reorderer of wavealign.reorderers (default: %(default)s; a wrong one lists them)")
    parser.add_argument("--iters", type=int, default=10, help="Stage 1's subspace iterations (reorderer wavealign)")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="a reorderer parameter (repeatable), e.g. --param preset=default")
    parser.add_argument("--mask", default="random", choices=MASKS, help="iid random, or planted prototypes")
    parser.add_argument("--wave-size", type=int, default=132)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, help="write the timings as JSON here")
    args = parser.parse_args(argv)
    import torch

    from wavealign import bounded, reorderers
    from wavealign.masks import synthetic

    if args.reorderer not in reorderers.names():
        parser.error(f"--reorderer {args.reorderer!r}: expected one of {reorderers.names()}")
    check_device(parser, "--device", args.device)
    for flag, value, least in (("--repeats", args.repeats, 1), ("--heads", args.heads, 1), ("--blocks", args.blocks, 1),
                               ("--wave-size", args.wave_size, 1), ("--iters", args.iters, 1)):
        check_at_least(parser, flag, value, least)
    out = None if args.out is None else output_file("--out", args.out)
    params = {"iters": args.iters} if args.reorderer == "wavealign" else {}
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--param {item!r}: expected NAME=VALUE")
        params[key] = bounded.load_yaml_text(value, f"--param {item!r}")
    reorderers.get(args.reorderer).resolve(params)  # its own checks (iters at most MAX_ITERS), before the mask
    build = getattr(synthetic, f"{args.mask}_mask")
    mask = build(args.heads, args.blocks, args.blocks, args.density, seed=0, device=args.device)
    times, gpu_times = time_plan(mask, args.stages, args.wave_size, args.repeats, args.reorderer, **params)
    record = {
        "heads": args.heads, "blocks": args.blocks, "density": args.density, "mask": args.mask,
        "reorderer": args.reorderer, "stages": args.stages, "iters": args.iters, "device": args.device,
        "params": params, "repeats": args.repeats, "plan_ms": times,
        "median_ms": statistics.median(times), "gpu_ms": gpu_times,
        "gpu_median_ms": statistics.median(gpu_times) if gpu_times else None,
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "host": platform.node(), "processor": platform.processor() or platform.machine(),
    }
    if out is not None:
        out.write_text(json.dumps(record, indent=2))
    print(f"launch_order.plan {args.reorderer} {args.mask} {args.heads} heads x {args.blocks}x{args.blocks} @ "
          f"{args.density:.0%}, stages={args.stages} on {args.device}: median {record['median_ms']:.2f} ms "
          + (f"(GPU span {record['gpu_median_ms']:.2f} ms) " if gpu_times else "")
          + f"over {args.repeats} runs ({torch.get_num_threads()} threads)")
    return 0
