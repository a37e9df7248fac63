"""Measure how the four sparse-attention methods' masks look on a synthetic video-DiT workload (Table I).

For each chosen head of one layer it builds every method's block mask with the method's own defaults
(``conf/method/*.yaml`` = the registry's params: XAttention tau=0.9, FlexPrefill gamma=0.60, SpargeAttn and
MInference tuned per head as they run), through ``masks.build_for_heads``, the call a sweep cell makes, so a
cell of the same workload, layer, step and heads builds the same masks. It records density and adjacent-row
Jaccard per (head, method), draws one head's mask per method (full and zoomed), writes rows.csv / rows.json /
summary.json under --out and prints a markdown table. ``--set METHOD.KEY=VALUE`` overrides a method's param.

GPU, the paper's case (Wan2.1-14B, 401 frames at 720p = 101 latent frames = 363600 tokens):
    wavealign mask-fidelity --out docs/mask_fidelity --heads 8 --device cuda
CPU, a small smoke run:
    wavealign mask-fidelity --out /tmp/mf --model wan2.1-1.3b --frames 9 --resolution 480p --heads 2
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from jobs._head_masks import add_workload_arguments, device_for, head_masks
from jobs._paper import TABLE_I_DENSITY as PAPER_DENSITY
from jobs._paper import TABLE_I_METHODS as METHODS
from jobs._records import write_csv
from wavealign import masks, skip, workloads
from wavealign.masks._draw import save_mask_png


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
    build_ms: float  # per-head tuning included (SpargeAttn, MInference)


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
    out: dict[str, dict[str, Any]] = {m: {} for m in methods}
    for item in items:
        name, _, value = item.partition("=")
        method, _, key = name.partition(".")
        if not value or method not in out or key not in masks.get(method).params:
            known = {m: sorted(masks.get(m).params) for m in methods}
            raise ValueError(f"--set {item!r}: expected METHOD.KEY=VALUE with METHOD in {methods} and KEY one of "
                             f"its params {known.get(method, known)}")
        out[method][key] = yaml.safe_load(value)
    return out


def _summary(rows: list[FidelityRow]) -> list[dict]:
    out = []
    for method in dict.fromkeys(r.method for r in rows):
        mine = [r for r in rows if r.method == method]
        density = sum(r.density for r in mine) / len(mine)
        out.append({"method": method, "heads": len(mine), "mean_density": density,
                    "paper_density": PAPER_DENSITY.get(method),
                    "mean_adjacent_jaccard": sum(r.adjacent_jaccard for r in mine) / len(mine),
                    "mean_build_ms": sum(r.build_ms for r in mine) / len(mine)})
    return out


def _markdown(summary: list[dict], title: str) -> str:
    lines = [f"**{title}**", "", "| method | heads | density | paper | delta (pts) | adjacent Jaccard |",
             "|---|---|---|---|---|---|"]
    for s in summary:
        paper = s["paper_density"]
        delta = f"{100 * (s['mean_density'] - paper):+.1f}" if paper is not None else "-"
        lines.append(f"| {s['method']} | {s['heads']} | {s['mean_density']:.1%} | "
                     f"{f'{paper:.1%}' if paper is not None else '-'} | {delta} | {s['mean_adjacent_jaccard']:.3f} |")
    return "\n".join(lines)


def _write_outputs(out: Path, rows: list[FidelityRow], command: str, device, seq_len: int,
                   heads: list[int]) -> dict:
    """Write rows.csv/rows.json/summary.json for the rows so far; return the summary."""
    summary = _summary(rows)
    write_csv(out / "rows.csv", FidelityRow, rows)
    (out / "rows.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    (out / "summary.json").write_text(json.dumps({"command": command, "device": str(device), "seq_len_tokens": seq_len,
                                                  "heads": heads, "heads_done": sorted({r.head for r in rows}),
                                                  "summary": summary}, indent=1))
    return summary


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="wavealign mask-fidelity", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="wavealign-runs/mask-fidelity", help="output folder")
    add_workload_arguments(parser)
    parser.add_argument("--heads", default="8", help="a count (spread evenly) or a comma list of heads")
    parser.add_argument("--layer", type=int, default=20)
    parser.add_argument("--step", type=int, default=25, help="denoising step of the generator (0..49)")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--set", action="append", default=[], metavar="METHOD.KEY=VALUE",
                        help="override one method param (default: the method's own, as conf/method/ has it)")
    parser.add_argument("--picture-head", type=int, default=None, help="head drawn per method (default: first)")
    parser.add_argument("--hardware", default="h100", help="hardware id for the skip features")
    args = parser.parse_args(argv)

    device = device_for(args.device)
    wl = workloads.preset(args.model, args.frames, args.resolution)
    heads = _parse_heads(args.heads, wl.heads)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(methods) - set(masks.available()))
    if unknown:
        raise ValueError(f"--methods must be among {masks.available()}, got unknown {unknown}")
    overrides = parse_overrides(args.set, methods)
    picture_head = heads[0] if args.picture_head is None else args.picture_head
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "wavealign mask-fidelity " + shlex.join(argv)
    print(f"{args.model} {args.frames} frames {args.resolution}: {wl.seq_len} tokens "
          f"({wl.latent_frames} x {wl.grid_height} x {wl.grid_width}), {wl.num_blocks(args.block_size)} blocks of "
          f"{args.block_size}; layer {args.layer}, step {args.step}, heads {heads}, device {device}", flush=True)

    rows: list[FidelityRow] = []
    for spec, method, mask, build_ms in head_masks(wl, heads, methods, layer=args.layer, step=args.step,
                                                    seed=args.seed, block_size=args.block_size, device=device,
                                                    overrides=overrides):
        feats = skip.features(mask.unsqueeze(0), args.hardware, block_size=args.block_size)
        rows.append(FidelityRow(args.model, args.layer, args.step, spec.head, spec.head_type, method,
                                json.dumps(overrides[method]), wl.seq_len, mask.shape[-1], args.block_size,
                                feats.density, feats.adjacent_jaccard, feats.nnz_cv, build_ms))
        print(f"  head {spec.head:2d} {spec.head_type:9s} {method:12s} density {feats.density:6.1%}  "
              f"jaccard {feats.adjacent_jaccard:.3f}  build {build_ms:8.1f} ms", flush=True)
        if spec.head == picture_head:
            frame_blocks = max(1, round(3 * wl.tokens_per_frame / args.block_size))
            save_mask_png(mask.cpu(), out / f"mask_{method}.png",
                          f"{method}: {args.model} {wl.seq_len} tokens, layer {args.layer} head {spec.head} "
                          f"({spec.head_type})", zoom_blocks=min(frame_blocks, mask.shape[-1]))
        if method == methods[-1]:
            _write_outputs(out, rows, command, device, wl.seq_len, heads)  # a cut-short run keeps its heads

    summary = _write_outputs(out, rows, command, device, wl.seq_len, heads)
    print()
    print(_markdown(summary, f"{args.model}, {wl.seq_len} tokens, layer {args.layer}, {len(heads)} heads "
                             f"({command})"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
