"""Measure how the four sparse-attention methods' masks look on a synthetic video-DiT workload (Table I).

For each chosen head of one layer it builds every method's block mask with the method's own defaults
(``masks.get(name).params``, which a sweep's cells take too: XAttention tau=0.9, FlexPrefill gamma=0.60, SpargeAttn and
MInference tuned per head as they run), through ``masks.build_for_heads``, the call a sweep cell makes, so a
cell of the same workload, layer, step and heads builds the same masks. It records density and adjacent-row
Jaccard per (head, method), draws one head's mask per method (full and zoomed), writes rows.csv / rows.json /
summary.json under --out and prints a markdown table. ``--set METHOD.KEY=VALUE`` overrides a method's param.

GPU, the paper's case (Wan2.1-14B, 401 frames at 720p = 101 latent frames = 363600 tokens):
    python lab/mask_fidelity.py --out docs/mask_fidelity --heads 8          # on a GPU machine: masks built there
CPU, a small smoke run:
    python lab/mask_fidelity.py --out /tmp/mf --model wan2.1-1.3b --frames 9 --resolution 480p --heads 2

Before any mask it prints an estimate of the builds' time; one past ten minutes (the paper's case on a CPU: hours)
runs only with --yes.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common import argument_parser, run_study, write_csv

from analysis.paper import TABLE_I_DENSITY as PAPER_DENSITY
from analysis.paper import TABLE_I_METHODS as METHODS
from jobs.arguments import UsageError, add_workload_arguments, output_folder
from wavealign import hardware
from wavealign.records import InputSpec

if TYPE_CHECKING:  # the library's masks and workloads import torch: main imports them once its arguments parse
    import torch

    from wavealign import workloads

# an estimate past this asks for --yes: a run of tens of minutes is chosen, never met by accident
CONFIRM_ABOVE_S = 600.0


@dataclass(frozen=True)
class FidelityRow:
    """One (head, method) mask of the run."""

    model: str
    layer: int
    step: int
    head: int
    head_type: str
    method: str
    params: str
    seq_len_tokens: int
    num_blocks: int
    block_size: int
    density: float
    adjacent_jaccard: float
    nnz_cv: float
    l2_hit_pct: float  # simulated, original order: the row's kernel on its hardware (Table I's column)
    build_ms: float  # workload and mask, per-head tuning included (SpargeAttn, MInference)


def _parse_heads(spec: str, num_heads: int) -> list[int]:
    """``"8"`` -> 8 heads spread evenly over the layer; ``"0,5,17"`` -> exactly those heads."""
    try:
        if "," not in spec:
            count = int(spec)
            if not 1 <= count <= num_heads:
                raise ValueError
            return sorted({round(i * num_heads / count) for i in range(count)})
        heads = [int(h) for h in spec.split(",")]
    except ValueError:
        raise ValueError(f"--heads must be a count in [1, {num_heads}] or a comma list of heads, got {spec!r}") \
            from None
    if min(heads) < 0 or max(heads) >= num_heads:
        raise ValueError(f"--heads must lie in [0, {num_heads}), got {spec!r}")
    return heads


def parse_overrides(items: list[str], methods: list[str]) -> dict[str, dict[str, Any]]:
    """``["xattention.threshold=0.8", ...]`` -> {"xattention": {"threshold": 0.8}}; values are YAML scalars."""
    from wavealign import bounded, masks

    out: dict[str, dict[str, Any]] = {m: {} for m in methods}
    for item in items:
        name, _, value = item.partition("=")
        method, _, key = name.partition(".")
        if not value or method not in out or key not in masks.get(method).params:
            known = {m: sorted(masks.get(m).params) for m in methods}
            raise ValueError(f"--set {item!r}: expected METHOD.KEY=VALUE with METHOD in {methods} and KEY one of "
                             f"its params {known.get(method, known)}")
        out[method][key] = bounded.load_yaml_text(value, f"--set {item!r}")
    for method, params in out.items():  # the method's own checks, before the first head is built
        try:
            masks.get(method).resolve(params)
        except ValueError as exc:
            raise ValueError(f"--set {method}: {exc}") from None
    return out


def head_inputs(args: argparse.Namespace, wl: workloads.Workload, heads: list[int], methods: list[str],
                overrides: dict[str, dict[str, Any]]) -> list[InputSpec]:
    """The inputs of one head under one method, per (head, method): what a sweep cell of this workload, layer, step
    and head builds."""
    return [InputSpec(workload=f"{args.model}-{args.resolution}", method=method, seq_len_tokens=wl.seq_len,
                      num_heads=1, head_dim=wl.head_dim, seed=args.seed, model=args.model,
                      resolution=args.resolution, frames=args.frames, heads=[head], layer=args.layer, step=args.step,
                      generator=args.generator, method_params=overrides[method])
            for head in heads for method in methods]


def _summary(rows: list[FidelityRow]) -> list[dict]:
    out = []
    for method in dict.fromkeys(r.method for r in rows):
        mine = [r for r in rows if r.method == method]
        density = sum(r.density for r in mine) / len(mine)
        out.append({"method": method, "heads": len(mine), "mean_density": density,
                    "paper_density": PAPER_DENSITY.get(method),
                    "mean_adjacent_jaccard": sum(r.adjacent_jaccard for r in mine) / len(mine),
                    "mean_l2_hit_pct": sum(r.l2_hit_pct for r in mine) / len(mine),
                    "mean_build_ms": sum(r.build_ms for r in mine) / len(mine)})
    return out


def _markdown(summary: list[dict], title: str) -> str:
    lines = [f"**{title}**", "",
             "| method | heads | density | paper | delta (pts) | adjacent Jaccard | L2 hit % (sim) |",
             "|---|---|---|---|---|---|---|"]
    for s in summary:
        paper = s["paper_density"]
        delta = f"{100 * (s['mean_density'] - paper):+.1f}" if paper is not None else "-"
        lines.append(f"| {s['method']} | {s['heads']} | {s['mean_density']:.1%} | "
                     f"{f'{paper:.1%}' if paper is not None else '-'} | {delta} | {s['mean_adjacent_jaccard']:.3f} | "
                     f"{s['mean_l2_hit_pct']:.1f} |")
    return "\n".join(lines)


def _write_outputs(out: Path, rows: list[FidelityRow], command: str, seq_len: int, heads: list[int]) -> dict:
    """Write rows.csv/rows.json/summary.json for the rows so far; return the summary."""
    summary = _summary(rows)
    write_csv(out / "rows.csv", FidelityRow, rows)
    (out / "rows.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    (out / "summary.json").write_text(json.dumps({"command": command, "seq_len_tokens": seq_len,
                                                  "heads": heads, "heads_done": sorted({r.head for r in rows}),
                                                  "summary": summary}, indent=1))
    return summary


def estimate_s(specs: list[InputSpec], device: torch.device) -> float:
    """Seconds to build the masks of ``specs``, to its order of magnitude: each head's dense query-key products
    (2 N^2 d) at the rate this device multiplies one 1,024-query block against 4,096 keys (measured here, in
    tenths of a second). The methods score samples and pooled blocks rather than every pair, and add steps of their
    own. On a 2-core CPU it said 4 s for 8 masks of 14,040 tokens that took 2.6 s, and 3.6 h for the paper's 32 masks
    of 363,600 tokens, of which 2 had taken 10 minutes."""
    import torch

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # as wavealign.inputs draws Q/K/V
    head_dim = max(spec.head_dim for spec in specs)
    q = torch.randn(1024, head_dim, device=device, dtype=dtype)
    k = torch.randn(head_dim, 4096, device=device, dtype=dtype)
    times = []
    for _ in range(4):
        start = time.perf_counter()
        torch.matmul(q, k)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    flop_per_s = 2 * q.shape[0] * k.shape[1] * head_dim / statistics.median(times[1:])
    return sum(2 * s.seq_len_tokens ** 2 * s.head_dim * s.num_heads for s in specs) / flop_per_s


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min" if seconds >= 60 else \
        f"{seconds:.0f} s"


def main(argv: list[str]) -> int:
    parser = argument_parser("mask_fidelity", __doc__)
    parser.add_argument("--out", default="wavealign-runs/mask-fidelity", help="output folder")
    add_workload_arguments(parser, device=False)
    parser.add_argument("--heads", default="8", help="a count (spread evenly) or a comma list of heads")
    parser.add_argument("--layer", type=int, default=20)
    parser.add_argument("--step", type=int, default=25, help="denoising step of the generator (0..49)")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--set", action="append", default=[], metavar="METHOD.KEY=VALUE",
                        help="override one method param (default: the method's own, as a sweep cell has it)")
    parser.add_argument("--picture-head", type=int, default=None, help="head drawn per method (default: first)")
    parser.add_argument("--hardware", default="h100", choices=hardware.names(),
                        help="the GPU simulated for the L2 hit, and whose wave the features use (Table I: h100)")
    parser.add_argument("--kernel", default="fa4", help="the backend whose launch is simulated (Table I: fa4)")
    parser.add_argument("--yes", action="store_true",
                        help=f"run even when the estimate passes {CONFIRM_ABOVE_S / 60:.0f} minutes")
    args = parser.parse_args(argv)
    import torch

    from wavealign import inputs, kernels, masks, sim, skip, workloads
    from wavealign.masks._draw import save_mask_png

    args.generator = workloads.generator_name(args.generator)
    wl = workloads.preset(args.model, args.frames, args.resolution)
    heads = _parse_heads(args.heads, wl.heads)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(methods) - set(masks.available()))
    if unknown:
        raise ValueError(f"--methods must be among {masks.available()}, got unknown {unknown}")
    if not kernels.get(args.kernel).supports(args.hardware):
        raise ValueError(f"--kernel {args.kernel} does not run on --hardware {args.hardware}")
    overrides = parse_overrides(args.set, methods)
    picture_head = heads[0] if args.picture_head is None else args.picture_head
    if picture_head not in heads:
        raise ValueError(f"--picture-head {picture_head}: expected one of the heads measured, {heads}")
    out = output_folder("--out", args.out)  # a bad argument is said before the estimate's question
    specs = head_inputs(args, wl, heads, methods, overrides)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    geometry = kernels.get(args.kernel).geometry(args.hardware, args.block_size)
    estimate = estimate_s(specs, device)
    scale = (f"{args.model} {args.frames} frames {args.resolution}: {wl.seq_len:,} tokens "
             f"({wl.latent_frames} x {wl.grid_height} x {wl.grid_width}), {wl.num_blocks(args.block_size)} blocks of "
             f"{args.block_size}; layer {args.layer}, step {args.step}, heads {heads}")
    said = (f"{len(specs)} mask{'s' * (len(specs) != 1)} of {wl.seq_len:,} tokens on the {device.type.upper()}: "
            f"about {_duration(estimate)}")
    if estimate > CONFIRM_ABOVE_S and not args.yes:
        raise UsageError(f"{said} (estimate: their dense query-key products at this machine's measured rate); "
                         f"to run it, add --yes; for a smoke run, a smaller scale: --model wan2.1-1.3b --frames 9 "
                         f"--resolution 480p --heads 2")
    command = "python lab/mask_fidelity.py " + shlex.join(argv)
    print(f"{scale}; {args.kernel} on {args.hardware} simulated; {said}", flush=True)

    rows: list[FidelityRow] = []
    types = {spec.head: spec.head_type for spec in workloads.head_specs(
        wl, heads, layer=args.layer, step=args.step, seed=args.seed, config=workloads.generator(args.generator))}
    for spec in specs:
        start = time.perf_counter()
        mask, _ = inputs.build(inputs.InputRequest(spec, args.block_size, device, with_qkv=False))
        mask_ms = (time.perf_counter() - start) * 1e3
        f = skip.features(mask, args.hardware, block_size=args.block_size, head_dim=spec.head_dim,
                          wave_size=geometry.wave_size)
        l2_hit_pct = sim.simulate(mask, None, hardware=args.hardware, backend=args.kernel, head_dim=spec.head_dim,
                                  wave_size=geometry.wave_size, block_size=args.block_size).l2_hit_pct
        head = spec.heads[0]
        rows.append(FidelityRow(args.model, args.layer, args.step, head, types[head], spec.method,
                                json.dumps(overrides[spec.method]), wl.seq_len, f.num_q_blocks, args.block_size,
                                f.density, f.adjacent_jaccard, f.nnz_cv, l2_hit_pct, mask_ms))
        print(f"  head {head:2d} {types[head]:9s} {spec.method:12s} density {f.density:6.1%}  jaccard "
              f"{f.adjacent_jaccard:.3f}  L2 {l2_hit_pct:5.1f}%  build {mask_ms:8.1f} ms", flush=True)
        if head == picture_head:
            frame_blocks = max(1, round(3 * wl.tokens_per_frame / args.block_size))
            save_mask_png(mask[0].cpu(), out / f"mask_{spec.method}.png",
                          f"{spec.method}: {args.model} {wl.seq_len} tokens, layer {args.layer} head {head} "
                          f"({types[head]})", zoom_blocks=min(frame_blocks, mask.shape[-1]))
        if spec.method == methods[-1]:
            _write_outputs(out, rows, command, wl.seq_len, heads)  # a cut-short run keeps its heads

    summary = _write_outputs(out, rows, command, wl.seq_len, heads)
    print()
    print(_markdown(summary, f"{args.model}, {wl.seq_len} tokens, layer {args.layer}, {len(heads)} heads "
                             f"({command})"))
    return 0


if __name__ == "__main__":
    sys.exit(run_study("mask_fidelity", main))
