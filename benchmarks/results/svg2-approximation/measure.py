"""How far svg2's fixed 128 x 128 block grid moves from Sparse VideoGen 2's variable-size rule, on the same Q/K.

Upstream computes exactly the token pairs of the kept (query cluster, key cluster) pairs (one variable-size block per
cluster pair); ``wavealign.masks.svg2`` keeps a 128 x 128 block of the permuted sequence iff any kept cluster pair
meets it. Both rules here start from one k-means and one cluster-pair map (``svg2``'s own, through
``masks.get("svg2").build_ordered``), so they differ only by the grid. Per head and cluster setting:

- density: the fraction of token pairs computed, upstream's rule and ours (ours counted in real token pairs, a ragged
  last block by its real size), and our block density (what the kernel's time follows);
- recall: the fraction of upstream's token pairs our mask covers, and of their dense attention probability mass
  (1 by construction: the check that the grid only adds);
- attention mass: the dense softmax(q k^T / sqrt(D)) probability each rule keeps, averaged over query rows.

Cluster settings: upstream's Wan 720p counts (300 query, 1,000 key clusters), and counts scaled to keep upstream's
tokens per cluster at its own Wan 720p run (81 frames, 75,600 tokens: 252 per query and 75.6 per key cluster) and at
our 363,600-token cell (1,212 and 363.6), since the grid's cost depends on cluster size against 128.

    .venv/bin/python benchmarks/results/svg2-approximation/measure.py --out benchmarks/results/svg2-approximation
"""

from __future__ import annotations

import argparse
import csv
import datetime
import math
import platform
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from wavealign import masks, workloads
from wavealign.masks import svg2

BLOCK = 128
UPSTREAM_TOKENS = 75_600  # upstream's Wan2.1 720p run: 81 frames, 21 x 45 x 80 latent tokens
OUR_TOKENS = 363_600  # our Wan2.1-14B cell: 401 frames at 720p


@dataclass(frozen=True)
class Row:
    """One head under one cluster setting: both rules' densities and dense-attention mass, and our recall."""

    setting: str
    head: int
    head_type: str
    tokens: int
    q_clusters: int
    kv_clusters: int
    upstream_density: float
    ours_token_density: float
    ours_block_density: float
    density_ratio: float  # ours (token pairs) / upstream
    recall_pairs: float  # of upstream's token pairs, the fraction ours keeps
    recall_mass: float  # of upstream's kept attention mass, the fraction ours keeps
    upstream_mass: float  # dense attention mass kept by upstream's rule (mean over query rows)
    ours_mass: float


def settings(tokens: int) -> dict[str, tuple[int, int]]:
    """Cluster counts (query, key) per setting name, for a sequence of ``tokens``."""
    def scaled(reference: int) -> tuple[int, int]:
        return (max(1, round(300 * tokens / reference)), max(1, round(1000 * tokens / reference)))

    return {"upstream counts (300/1000)": (300, 1000),
            "upstream's tokens per cluster (75,600-token run)": scaled(UPSTREAM_TOKENS),
            "tokens per cluster of 300/1000 at 363,600 tokens": scaled(OUR_TOKENS)}


def measure_head(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_clusters: int, kv_clusters: int
                 ) -> dict[str, float]:
    """Both rules on one head's q, k, v (1, 1, N, D) at svg2's defaults but the cluster counts."""
    params = {"q_clusters": q_clusters, "kv_clusters": kv_clusters}
    built = masks.get("svg2").build_ordered(q, k, v, BLOCK, **params)
    resolved = masks.get("svg2").resolve(params)
    n, d = q.shape[2], q.shape[3]
    qo, ko = built.q[0, 0], built.k[0, 0]
    q_labels, kv_labels = built.order.q_labels[0], built.order.kv_labels[0]
    q_centroids, _ = svg2.cluster_means(qo[None], q_labels, q_clusters)
    kv_centroids, kv_sizes = svg2.cluster_means(ko[None], kv_labels, kv_clusters)
    kept = svg2.keep_clusters(q_centroids, kv_centroids, kv_sizes, resolved["top_p"], resolved["min_kv_ratio"])[0]
    blocks = built.mask[0, 0]
    totals = torch.zeros(6, dtype=torch.float64)  # upstream pairs, ours, both; upstream mass, ours, both
    rows = 2048
    for s in range(0, n, rows):
        upstream = kept[q_labels[0, s:s + rows]][:, kv_labels[0]]  # token pairs of kept cluster pairs
        ours = blocks[torch.arange(s, min(s + rows, n)) // BLOCK][:, torch.arange(n) // BLOCK]
        probs = torch.softmax(qo[s:s + rows].double() @ ko.double().T / math.sqrt(d), -1)
        for i, m in enumerate((upstream, ours, upstream & ours)):
            totals[i] += m.sum()
            totals[3 + i] += (probs * m).sum()
    return {"upstream_density": float(totals[0] / n**2), "ours_token_density": float(totals[1] / n**2),
            "ours_block_density": float(blocks.float().mean()), "density_ratio": float(totals[1] / totals[0]),
            "recall_pairs": float(totals[2] / totals[0]), "recall_mass": float(totals[5] / totals[3]),
            "upstream_mass": float(totals[3] / n), "ours_mass": float(totals[4] / n)}


def markdown(rows: list[Row], command: str, wl: workloads.Workload, layer: int, step: int) -> str:
    lines = [
        "# svg2: our 128 x 128 grid against Sparse VideoGen 2's variable-size blocks, on the same Q/K",
        "",
        f"- Command: `{command}`",
        f"- Date: {datetime.date.today().isoformat()}; {platform.machine()} CPU, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads.",
        f"- Workload: synthetic `{wl.model}` {wl.frames} frames {wl.resolution} ({wl.seq_len:,} tokens, latent "
        f"{wl.latent_frames} x {wl.grid_height} x {wl.grid_width}), default generator "
        f"(`{workloads.DEFAULT_GENERATOR}`), layer {layer}, step {step}, seed 0; svg2's defaults (top-p 0.9, "
        "min key-cluster ratio 0.1, 50 k-means iterations, seed 0) but the cluster counts.",
        "- Both rules use one k-means and one kept cluster-pair map; they differ only by the grid. Recall is of "
        "upstream's token pairs and of their dense attention mass; mass is the dense softmax probability a rule "
        "keeps, averaged over query rows.",
        "",
        "| setting | q / kv clusters | upstream density | ours (token pairs) | ours (blocks) | ours / upstream | "
        "recall pairs | recall mass | upstream mass | ours mass |",
        "|" + "---|" * 10,
    ]
    for name in dict.fromkeys(r.setting for r in rows):
        group = [r for r in rows if r.setting == name]
        mean = {f.name: sum(getattr(r, f.name) for r in group) / len(group) for f in fields(Row)
                if isinstance(getattr(group[0], f.name), float)}
        lines.append(f"| {name} (mean of {len(group)} heads) | {group[0].q_clusters} / {group[0].kv_clusters} | "
                     f"{mean['upstream_density']:.3f} | {mean['ours_token_density']:.3f} | "
                     f"{mean['ours_block_density']:.3f} | {mean['density_ratio']:.2f}x | {mean['recall_pairs']:.4f} | "
                     f"{mean['recall_mass']:.4f} | {mean['upstream_mass']:.3f} | {mean['ours_mass']:.3f} |")
    lines += ["", "Per head:", "", "| setting | head (type) | upstream density | ours (token pairs) | ours (blocks) | "
              "upstream mass | ours mass |", "|" + "---|" * 7]
    lines += [f"| {r.setting} | {r.head} ({r.head_type}) | {r.upstream_density:.3f} | {r.ours_token_density:.3f} | "
              f"{r.ours_block_density:.3f} | {r.upstream_mass:.3f} | {r.ours_mass:.3f} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="wan2.1-14b", choices=workloads.models())
    parser.add_argument("--frames", type=int, default=21)
    parser.add_argument("--resolution", default="480p")
    parser.add_argument("--heads", default="0,5,6,20,22,31",
                        help="comma-separated head indices (of types temporal, semantic, sink)")
    parser.add_argument("--layer", type=int, default=20)
    parser.add_argument("--step", type=int, default=25)
    parser.add_argument("--out", type=Path, required=True, help="folder for results.csv and results.md")
    args = parser.parse_args(argv)
    wl = workloads.preset(args.model, args.frames, args.resolution)
    heads = [int(h) for h in args.heads.split(",")]
    rows = []
    for spec, q, k, v in workloads.iter_heads(wl, heads, layer=args.layer, step=args.step, seed=0):
        for name, (qc, kc) in settings(wl.seq_len).items():
            result = measure_head(q, k, v, qc, kc)
            rows.append(Row(setting=name, head=spec.head, head_type=spec.head_type, tokens=wl.seq_len, q_clusters=qc,
                            kv_clusters=kc, **result))
            print(rows[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[f.name for f in fields(Row)])
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)
    command = ".venv/bin/python benchmarks/results/svg2-approximation/measure.py " + " ".join(argv)
    (args.out / "results.md").write_text(markdown(rows, command, wl, args.layer, args.step))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
