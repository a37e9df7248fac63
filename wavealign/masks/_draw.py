"""Pictures of block masks: ``python -m wavealign.masks.<name>`` draws one head of a small synthetic workload."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch


def save_mask_png(mask: torch.Tensor, path: str | Path, title: str, zoom_blocks: int | None = None) -> Path:
    """Draw a (MB, NB) bool mask (black = computed block); with ``zoom_blocks``, add the top-left corner."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if mask.dim() != 2 or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a 2-D bool (MB, NB) tensor, got {mask.dtype} {tuple(mask.shape)}")
    image = mask.cpu().numpy()
    panels = [("full", image)]
    if zoom_blocks:
        panels.append((f"first {zoom_blocks} x {zoom_blocks} blocks", image[:zoom_blocks, :zoom_blocks]))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 5.5), squeeze=False)
    for ax, (name, img) in zip(axes[0], panels, strict=True):
        ax.imshow(img, cmap="Greys", interpolation="nearest", vmin=0, vmax=1)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("kv block")
        ax.set_ylabel("query block")
    fig.suptitle(f"{title}  (density {image.mean():.1%})", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(method: str, argv: list[str] | None = None) -> int:
    """Render one head's ``method`` mask on a small synthetic workload to a PNG."""
    from wavealign import masks, workloads

    parser = argparse.ArgumentParser(prog=f"python -m wavealign.masks.{method}",
                                     description=f"Draw a {method} mask of one synthetic head.")
    parser.add_argument("--out", default=f"{method}_mask.png", help="PNG path (default: ./%(default)s)")
    parser.add_argument("--model", default="wan2.1-1.3b", choices=workloads.models())
    parser.add_argument("--frames", type=int, default=33)
    parser.add_argument("--resolution", default="480p")
    parser.add_argument("--head", type=int, default=0)
    parser.add_argument("--layer", type=int, default=0)
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--generator", default=workloads.DEFAULT_GENERATOR, choices=workloads.generator_names())
    args = parser.parse_args(argv)
    wl = workloads.preset(args.model, args.frames, args.resolution)
    ((spec, q, k, v),) = workloads.iter_heads(wl, [args.head], layer=args.layer, seed=args.seed,
                                              config=workloads.generator(args.generator))
    mask = masks.build_for_heads(method, q, k, v, args.block_size, model=args.model, layer=args.layer,
                                 heads=[args.head], latent=wl.latent).mask[0, 0]
    title = f"{method}: {args.model} {args.frames}f {args.resolution}, layer {args.layer} head {args.head} " \
            f"({spec.head_type})"
    print(save_mask_png(mask, args.out, title, zoom_blocks=min(mask.shape[0], 128)))
    return 0
