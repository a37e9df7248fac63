"""Time a diffusers Wan transformer's denoising forward, dense against WaveAlign's block-sparse attention in the
original order, reordered and adaptive, with a workload's calibrated method mask replayed in every layer.

Random weights give near-uniform attention, so masks built from the live Q/K would be near-dense; the sparse
variants replay instead the mask the calibrated synthetic workload gives (``method=file``), the same in every
self-attention layer, and the results say so. The transformer is the Wan2.1-14B configuration (diffusers'
``WanTransformer3DModel()`` defaults) unless ``--config 1.3b``, with random bf16 weights: no download.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from wavealign import inputs, kernels, mask_file, workloads
from wavealign.integrations import diffusers as wa
from wavealign.jobs._args import check_at_least, check_device
from wavealign.records import Cell

VARIANTS = ("dense", "never", "always", "adaptive")
# diffusers' WanTransformer3DModel arguments of the 1.3B model (its defaults are the 14B's)
CONFIGS = {"14b": {}, "1.3b": {"num_attention_heads": 12, "ffn_dim": 8960, "num_layers": 30},
           # for tests on a CPU: two layers of two heads
           "tiny": {"num_attention_heads": 2, "attention_head_dim": 32, "ffn_dim": 64, "num_layers": 2,
                    "text_dim": 32, "freq_dim": 32}}
MODELS = {"14b": "wan2.1-14b", "1.3b": "wan2.1-1.3b"}  # their workload presets (wavealign.workloads)
LATENT_CHANNELS, TEXT_TOKENS = 16, 512


@dataclass(frozen=True)
class StepTiming:
    """One variant's forwards: medians over the timed forwards (CUDA events), and what its attention did."""

    variant: str
    forward_ms: float
    self_attention_ms: float  # the attn1 modules (projections, norms, RoPE and attention), summed over layers
    mask_ms: float  # replaying the mask file, summed over layers (0 for dense)
    reorder_ms: float  # planning the orders, summed over layers
    reordered_layers: int
    forwards: int


def random_transformer(config: str, device: str, layers: int | None = None) -> torch.nn.Module:
    """A Wan transformer of ``config`` (its first ``layers`` blocks when given), built on ``device`` with diffusers'
    own random initialisation, in bf16."""
    from diffusers import WanTransformer3DModel

    with torch.device(device):
        model = WanTransformer3DModel(**{**CONFIGS[config], **({"num_layers": layers} if layers else {})})
    return model.to(torch.bfloat16).eval()


def calibrated_mask(config: str, frames: int, resolution: str, method: str, path: Path, device: str) -> float:
    """Build ``method``'s mask on the calibrated synthetic workload of the model and video shape (all heads, the
    model's mid-depth layer, mid-denoising) the way a sweep cell on that workload builds it
    (``inputs.build``), save it at ``path``, and return its density."""
    wl = workloads.preset(MODELS[config], frames=frames, resolution=resolution)
    # the inputs' fields of a cell on this workload; the rest (hardware, a simulated measurer: no Q/K/V kept)
    # only place the cell
    cell = Cell(cell_id="e2e", group_id="e2e", hardware="cpu", profile_hardware="h200", backend="fa4",
                measure="simulated", method=method,
                variant="original", stages="none", skip_mode="force", workload=f"{MODELS[config]}-{resolution}",
                seq_len_tokens=wl.seq_len, num_heads=wl.heads, head_dim=wl.head_dim, block_size=128, wave_size=132,
                model=MODELS[config], resolution=resolution, frames=frames, heads=list(range(wl.heads)),
                layer=wl.layers // 2, step=25)
    mask, _ = inputs.build(cell, torch.device(device))
    mask_file.save(path, mask.cpu())
    return float(mask.float().mean())


def time_forwards(model: torch.nn.Module, inputs: dict[str, torch.Tensor], variant: str, mask_path: Path,
                  backend: str, block_size: int, forwards: int) -> StepTiming:
    """Median forward time of ``variant`` after one warm-up forward (compiles kernels), with CUDA events around the
    whole forward and around every self-attention module."""
    cuda = inputs["hidden_states"].is_cuda
    installed = None if variant == "dense" else wa.apply(
        model, method="file", backend=backend, reorder=variant, block_size=block_size, path=str(mask_path),
        **({} if cuda else {"hardware": "h200"}))
    spans: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
    hooks = []
    if cuda:
        for name, module in model.named_modules():
            if name.endswith(".attn1"):
                hooks.append(module.register_forward_pre_hook(lambda *_: spans.append(_event_pair())))
                hooks.append(module.register_forward_hook(lambda *_: spans[-1][1].record()))
    forward_ms, attention_ms = [], []
    try:
        with torch.inference_mode(), _dense_backend(cuda, variant):
            for i in range(forwards + 1):
                spans.clear()
                if installed is not None:
                    installed.attention.calls.clear()
                start, end = _event_pair() if cuda else (None, None)
                model(**inputs, return_dict=False)
                if cuda:
                    end.record()
                    torch.cuda.synchronize()
                if i and cuda:  # the first forward is the warm-up
                    forward_ms.append(start.elapsed_time(end))
                    attention_ms.append(sum(a.elapsed_time(b) for a, b in spans))
    finally:
        for hook in hooks:
            hook.remove()
        if installed is not None:
            installed.remove()
    calls = installed.attention.calls if installed is not None else []
    return StepTiming(variant=variant, forward_ms=statistics.median(forward_ms) if forward_ms else float("nan"),
                      self_attention_ms=statistics.median(attention_ms) if attention_ms else float("nan"),
                      mask_ms=sum(c.mask_ms for c in calls), reorder_ms=sum(c.reorder_ms for c in calls),
                      reordered_layers=sum(c.reordered for c in calls), forwards=forwards)


def _event_pair() -> tuple[torch.cuda.Event, torch.cuda.Event]:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    return start, end


def _dense_backend(cuda: bool, variant: str):
    """cuDNN's fused attention for the dense forward on a GPU (what SDPA dispatches to on Hopper at these lengths
    when allowed); no change otherwise."""
    import contextlib

    if not (cuda and variant == "dense"):
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.CUDNN_ATTENTION)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="wavealign bench-e2e", description=__doc__)
    parser.add_argument("--config", default="14b", choices=sorted(CONFIGS))
    parser.add_argument("--frames", type=int, default=81)
    parser.add_argument("--resolution", default="720p", help="a resolution of the model's workload preset")
    parser.add_argument("--method", default="xattention", help="the mask method built on the calibrated workload")
    parser.add_argument("--mask", type=Path, help="replay this saved mask (wavealign.mask_file .npz) instead")
    parser.add_argument("--latent", help="T,H,W of the latent video (default: the workload preset's); tokens are "
                                         "T * H/2 * W/2")
    parser.add_argument("--backend", default="fa4")
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {VARIANTS}")
    parser.add_argument("--forwards", type=int, default=2, help="timed forwards per variant, after one warm-up")
    parser.add_argument("--layers", type=int, help="build only this many transformer blocks (all alike: the "
                                                   "blocks' share of a forward scales with them) to fit long videos "
                                                   "in less time")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, help="write the timings as JSON here")
    args = parser.parse_args(argv)

    variants = args.variants.split(",")
    if bad := [v for v in variants if v not in VARIANTS]:
        parser.error(f"--variants: {bad} not in {VARIANTS}")
    if args.forwards < 1:
        parser.error(f"--forwards must be >= 1, got {args.forwards}")
    if args.layers is not None and args.layers < 1:
        parser.error(f"--layers must be >= 1, got {args.layers}")
    if args.config not in MODELS and (args.mask is None or args.latent is None):
        parser.error(f"--config {args.config} has no workload preset: pass --mask FILE and --latent T,H,W")
    if args.latent:
        try:
            latent = tuple(int(x) for x in args.latent.split(","))
        except ValueError:
            latent = ()
        if len(latent) != 3 or min(latent) < 1 or latent[1] % 2 or latent[2] % 2:
            parser.error(f"--latent must be T,H,W with positive T and even H, W, got {args.latent!r}")
    else:
        wl = workloads.preset(MODELS[args.config], frames=args.frames, resolution=args.resolution)
        latent = (wl.latent_frames, 2 * wl.grid_height, 2 * wl.grid_width)
    check_at_least(parser, "--block-size", args.block_size, 1)
    check_device(parser, "--device", args.device)
    if args.backend not in kernels.names():
        parser.error(f"--backend {args.backend!r}: expected a backend that computes attention, one of "
                     f"{kernels.names()}")
    with tempfile.TemporaryDirectory() as tmp:
        mask_path, density = args.mask, None
        if mask_path is None:
            mask_path = Path(tmp) / "mask.npz"
            density = calibrated_mask(args.config, args.frames, args.resolution, args.method, mask_path, args.device)
        mask = mask_file.load(mask_path)
        density = float(mask.float().mean()) if density is None else density
        tokens = latent[0] * (latent[1] // 2) * (latent[2] // 2)
        blocks = -(-tokens // args.block_size)
        if mask.shape[-2:] != (blocks, blocks):
            parser.error(f"--mask {mask_path} is {tuple(mask.shape)}; the latent {latent} has {tokens} tokens = "
                         f"{blocks} blocks of --block-size {args.block_size}, so (H, {blocks}, {blocks}) is expected")
        model = random_transformer(args.config, args.device, args.layers)
        gen = torch.Generator(device=args.device).manual_seed(0)
        inputs = {
            "hidden_states": torch.randn(1, LATENT_CHANNELS, *latent, generator=gen, device=args.device,
                                         dtype=torch.bfloat16),
            "timestep": torch.tensor([500], device=args.device),
            "encoder_hidden_states": torch.randn(1, TEXT_TOKENS, model.config.text_dim, generator=gen,
                                                 device=args.device, dtype=torch.bfloat16),
        }
        described = str(args.mask) if args.mask else f"calibrated {args.method}, replayed in every layer"
        print(f"{args.config} transformer ({model.config.num_layers} blocks), {tokens} tokens, "
              f"mask density {density:.3f} ({described}), backend {args.backend}", flush=True)
        rows: list[StepTiming] = []
        for variant in variants:  # each line as it is measured
            rows.append(r := time_forwards(model, inputs, variant, mask_path, args.backend, args.block_size,
                                           args.forwards))
            original = next((o.forward_ms for o in rows if o.variant == "never"), None)
            speedup = "" if original is None else f"speedup over original-order sparse {original / r.forward_ms:.3f}x"
            print(f"  {r.variant:9s} forward {r.forward_ms:9.1f} ms  self-attention {r.self_attention_ms:9.1f} ms  "
                  f"mask {r.mask_ms:7.1f} ms  reorder {r.reorder_ms:6.1f} ms ({r.reordered_layers} layers)  {speedup}",
                  flush=True)
    record = {"config": args.config, "layers": model.config.num_layers, "tokens": tokens, "latent": latent,
              "method": None if args.mask else args.method, "mask": described, "density": density,
              "backend": args.backend,
              "rows": [asdict(r) for r in rows], "torch": torch.__version__, "host": platform.node(),
              "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2))
    return 0

