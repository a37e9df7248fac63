"""Capture a diffusers Wan pipeline's self-attention Q/K/V at chosen layers and denoising steps, for sweeps.

    wavealign capture --pipeline Wan-AI/Wan2.1-T2V-14B-Diffusers --out qkv/ --layers 0,20,39 --steps 0,25,49 \\
        --prompt "a corgi surfing" --frames 81 --height 720 --width 1280

Each (layer, step) becomes one ``wavealign-qkv/1`` file (``wavealign.workloads.captured``); the command prints a
workload YAML for each, to put under a config root of yours (``conf_dirs=[...]``) and sweep with
``grid.workload=[<name>]``. The pipeline runs its denoising loop to the last captured step and stops there (no
VAE decode). Needs ``wavealign[diffusers]`` and what the pipeline itself needs (transformers, its weights).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from jobs.arguments import Parser, output_folder

EXTRAS = ("diffusers",)

DTYPES = ("bfloat16", "float16", "float32")


def _indices(name: str):
    def parse(text: str) -> list[int]:
        try:
            values = [int(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be comma-separated integers, got {text!r}") from None
        if not values or min(values) < 0:
            raise argparse.ArgumentTypeError(f"{name} must be non-negative integers, got {text!r}")
        return values
    return parse


def parser() -> argparse.ArgumentParser:
    p = Parser("capture", __doc__)
    p.add_argument("--pipeline", required=True, help="a diffusers Wan pipeline: a local folder or a hub id")
    p.add_argument("--out", type=Path, required=True, help="folder for the .safetensors files")
    p.add_argument("--layers", type=_indices("--layers"), required=True, help="transformer blocks, e.g. 0,20,39")
    p.add_argument("--steps", type=_indices("--steps"), required=True, help="denoising steps (0 = first)")
    p.add_argument("--prompt", default="a corgi surfing a wave at sunset, cinematic")
    p.add_argument("--negative-prompt", default="")
    p.add_argument("--frames", type=int, default=81)
    p.add_argument("--height", type=int, default=720)
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--num-steps", type=int, default=50, help="the pipeline's denoising steps")
    p.add_argument("--guidance", type=float, default=5.0)
    p.add_argument("--model", default="wan2.1-14b", help="the name the files and the sweep rows carry")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", choices=DTYPES)
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if max(args.steps) >= args.num_steps:
        parser().error(f"--steps {args.steps} must be below --num-steps {args.num_steps}")
    output_folder("--out", args.out)
    import torch
    from diffusers import WanPipeline

    from wavealign.integrations import diffusers as wa
    from wavealign.workloads import read_header

    pipe = WanPipeline.from_pretrained(args.pipeline, torch_dtype=getattr(torch, args.dtype)).to(args.device)
    last = max(args.steps)

    def stop_after_last(pipeline, step: int, timestep, kwargs):
        if step >= last:
            pipeline._interrupt = True  # diffusers' own way to end the loop early
        return kwargs

    with wa.capture(pipe.transformer, args.out, layers=args.layers, steps=args.steps, model=args.model) as recorder:
        pipe(prompt=args.prompt, negative_prompt=args.negative_prompt, num_frames=args.frames, height=args.height,
             width=args.width, num_inference_steps=args.num_steps, guidance_scale=args.guidance, output_type="latent",
             generator=torch.Generator(args.device).manual_seed(args.seed), callback_on_step_end=stop_after_last)
    for path in recorder.files:
        heads = list(range(read_header(path).shape[1]))
        print(f"# conf/workload/{path.stem}.yaml\nname: {path.stem}\ncaptured: {path.resolve()}\nheads: {heads}\n")
    print(f"{len(recorder.files)} files in {args.out}; sweep one with conf_dirs=[<your config root>] "
          f"grid.workload=[{recorder.files[0].stem if recorder.files else '<name>'}]")
    return 0
