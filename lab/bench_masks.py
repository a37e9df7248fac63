"""Time each sparse method's mask build at the Wan lengths beside the attention it prunes (first and cached builds).

What a live video pipeline pays per self-attention layer before the kernel runs: the method's mask from the layer's
Q/K. Per method and length, on all of a layer's heads of the synthetic Wan2.1-14B 720p workload (the sweep's, at
``--layer``/``--step``), built as ``wavealign.integrations`` builds it (``masks.build_for_heads`` with a
``TunedConfigs`` store): the first build (the Triton kernels' compile on a new shape, and SpargeAttn's and
MInference's per-head tuning), then cached builds (the prediction alone), each synchronised wall time; the backend's
original-order attention on that mask (CUDA events, L2 flushed, median); their ratio; and the mask checked against
the method's torch reference (blocks that differ) and against itself on every build (a live layer must see the same
mask for the same Q/K). Ratios within one run, on one GPU.

The video methods read the workload's latent (T, H, W). ``vsa``'s build includes its cube order and the gathers of
Q/K/V into it, and its attention is timed on its cube-order mask and Q/K/V (the output's scatter back is not in
either column). ``radial`` is static: an integration builds and plans it once per shape, so its cached row is what
that one build costs, not a per-layer price.
"""

from __future__ import annotations

import csv
import json
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from common import argument_parser, run_study

from jobs.arguments import (
    add_generator_argument,
    check_at_least,
    check_device,
    choices_list,
    output_folder,
)

if TYPE_CHECKING:  # the library imports torch: main imports it once its arguments parse
    import torch

METHODS = ("xattention", "spargeattn", "minference", "flexprefill", "radial", "vsa")
FRAMES = (81, 161, 241, 321, 401, 481)  # Wan2.1's video lengths: 75,600 .. 435,600 tokens at 720p


@dataclass(frozen=True)
class MaskBuildTiming:
    """One method at one length: its mask's build (first and cached) beside the attention it prunes."""

    method: str
    frames: int
    tokens: int
    heads: int
    density: float
    first_build_ms: float  # compile on a new shape, per-head tuning of a tuned method
    cached_build_ms: float  # median of the cached builds (the prediction alone)
    cached_build_ms_iqr: float
    cached_builds: int
    attention_ms: float  # the backend, original order, on this mask (median)
    attention_ms_iqr: float
    cached_over_attention: float
    first_over_attention: float
    blocks: int
    differing_blocks_vs_reference: int  # against the method's torch code on the same device (-1: not checked)
    same_mask_every_build: bool


def _synced_ms(fn, device: torch.device) -> tuple[object, float]:
    from wavealign.instruments import timing

    start = timing.synced_clock(device)
    value = fn()
    return value, (timing.synced_clock(device) - start) * 1e3


def measure(method: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, frames: int, layer: int,
            backend: str, builds: int, reps: int, check: bool, latent: tuple[int, int, int],
            block_size: int = 128) -> MaskBuildTiming:
    """One row: ``method``'s builds on q, k, v (1, H, N, D) of a ``latent`` (T, H, W) video and ``backend``'s
    attention on its mask."""
    import torch

    from wavealign import kernels, masks
    from wavealign.instruments import timing
    from wavealign.kernels import LaunchShape

    heads = q.shape[1]
    store = {"tuned_config": masks.TunedConfigs(method)} if masks.get(method).tuned else {}
    identity = masks.identity_params(method, model="wan2.1-14b", layer=layer, heads=list(range(heads)),
                                     latent=latent)

    def build() -> masks.OrderedBuild:
        return masks.build_for_heads(method, q, k, v, block_size, model="wan2.1-14b", layer=layer,
                                     heads=list(range(heads)), latent=latent, **store)

    built, first_ms = _synced_ms(build, q.device)
    first = built.mask
    cached_ms, same = [], True
    for _ in range(builds):
        again, ms = _synced_ms(build, q.device)
        cached_ms.append(ms)
        same = same and torch.equal(again.mask, first)
        del again
    differing = -1
    if check:
        reference = masks.build_ordered(method, q, k, v, block_size, reference=True, **identity, **store).mask
        differing = int((reference != first).sum())
        del reference
    flat = first.reshape(heads, *first.shape[-2:])
    launch = kernels.get(backend).plan(flat, None, LaunchShape.of(q, k, block_size, v=v))
    attention = timing.time_cuda(lambda: launch.run(built.q, built.k, built.v), reps=reps, warmup=1)
    cached = timing.summarize(cached_ms)
    return MaskBuildTiming(
        method=method, frames=frames, tokens=q.shape[2], heads=heads, density=float(flat.float().mean()),
        first_build_ms=first_ms, cached_build_ms=cached.median_ms, cached_build_ms_iqr=cached.iqr_ms,
        cached_builds=builds, attention_ms=attention.median_ms, attention_ms_iqr=attention.iqr_ms,
        cached_over_attention=cached.median_ms / attention.median_ms,
        first_over_attention=first_ms / attention.median_ms, blocks=flat.numel(),
        differing_blocks_vs_reference=differing, same_mask_every_build=same)


def table(rows: list[MaskBuildTiming]) -> str:
    """The rows as a markdown table."""
    lines = ["| method | frames | tokens | density | first build ms | cached build ms (IQR) | attention ms (IQR) | "
             "cached / attention | first / attention | blocks differing from the torch reference | same mask "
             "every build |", "|" + "---|" * 11]
    for r in rows:
        check = "not checked" if r.differing_blocks_vs_reference < 0 else \
            f"{r.differing_blocks_vs_reference:,} of {r.blocks:,}"
        lines.append(f"| {r.method} | {r.frames} | {r.tokens:,} | {r.density:.3f} | {r.first_build_ms:,.0f} | "
                     f"{r.cached_build_ms:,.1f} ({r.cached_build_ms_iqr:.1f}) | {r.attention_ms:,.1f} "
                     f"({r.attention_ms_iqr:.1f}) | {r.cached_over_attention:.3f} | {r.first_over_attention:.2f} | "
                     f"{check} | {'yes' if r.same_mask_every_build else 'NO'} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argument_parser("bench_masks", __doc__)
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of {METHODS}")
    parser.add_argument("--frames", default=",".join(map(str, FRAMES)),
                        help="comma-separated Wan2.1-14B 720p video lengths in frames (81 = 75,600 tokens)")
    parser.add_argument("--heads", type=int, default=40, help="heads of the layer (Wan2.1-14B has 40)")
    parser.add_argument("--layer", type=int, default=20)
    parser.add_argument("--step", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    add_generator_argument(parser)
    parser.add_argument("--backend", default="fa4", help="the kernel timed on each mask")
    parser.add_argument("--builds", type=int, default=3, help="cached builds timed after the first")
    parser.add_argument("--reps", type=int, default=3, help="timed attention repetitions")
    parser.add_argument("--no-check", action="store_true", help="skip the torch reference build of each mask")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, help="write the rows (JSON, CSV) and the table (markdown) here")
    args = parser.parse_args(argv)
    import torch

    from wavealign import kernels, workloads

    methods = choices_list(parser, "--methods", args.methods, METHODS)
    try:
        frames = [int(f) for f in args.frames.split(",")]
    except ValueError:
        parser.error(f"--frames must be comma-separated integers, got {args.frames!r}")
    wl_model = "wan2.1-14b"
    for flag, value, least in (("--heads", args.heads, 1), ("--builds", args.builds, 1), ("--reps", args.reps, 1),
                               ("--layer", args.layer, 0), ("--step", args.step, 0), ("--seed", args.seed, 0)):
        check_at_least(parser, flag, value, least)
    preset_heads = workloads.preset(wl_model, frames=frames[0], resolution="720p").heads
    if args.heads > preset_heads:
        parser.error(f"--heads must be at most {preset_heads} (Wan2.1-14B's), got {args.heads}")
    if args.backend not in kernels.names():
        parser.error(f"--backend {args.backend!r}: expected a backend that computes attention, one of "
                     f"{kernels.names()}")
    device = check_device(parser, "--device", args.device)
    if device.type != "cuda":
        parser.error(f"--device {args.device!r}: the benchmark times GPU kernels; expected a CUDA device")
    out = None if args.out is None else output_folder("--out", args.out)

    rows: list[MaskBuildTiming] = []
    for count in frames:
        wl = workloads.preset(wl_model, frames=count, resolution="720p")
        q, k, v = workloads.synthetic(wl, heads=list(range(args.heads)), layer=args.layer, step=args.step,
                                      seed=args.seed, device=device, config=workloads.generator(args.generator))
        for method in methods:
            rows.append(r := measure(method, q, k, v, frames=count, layer=args.layer, backend=args.backend,
                                     builds=args.builds, reps=args.reps, check=not args.no_check, latent=wl.latent))
            print(f"{method:12s} {count:4d} frames {r.tokens:8,d} tokens  density {r.density:.3f}  first "
                  f"{r.first_build_ms:9,.1f} ms  cached {r.cached_build_ms:8,.1f} ms  attention {r.attention_ms:9,.1f} "
                  f"ms  cached/attention {r.cached_over_attention:.3f}", flush=True)
            torch.cuda.empty_cache()
        del q, k, v
    print(table(rows))
    if out is not None:
        environment = {"gpu": torch.cuda.get_device_name(device), "torch": torch.__version__,
                       "host": platform.node(), "date": time.strftime("%Y-%m-%d"), "backend": args.backend,
                       "layer": args.layer, "step": args.step, "seed": args.seed}
        (out / "bench_masks.json").write_text(json.dumps({"environment": environment,
                                                               "rows": [asdict(r) for r in rows]}, indent=1))
        with (out / "bench_masks.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(asdict(rows[0])))
            writer.writeheader()
            writer.writerows(asdict(r) for r in rows)
        (out / "bench_masks.md").write_text(table(rows) + "\n")
    return 0 if all(r.same_mask_every_build for r in rows) else 1


if __name__ == "__main__":
    sys.exit(run_study("bench_masks", main))
