"""svg2's mask build on a GPU at a live layer's size, beside the attention it prunes (one run, one GPU).

A whole layer of the synthetic Wan2.1-14B 720p workload (default generator, layer 20, step 25, seed 0; all 40 heads
in bf16): the token order (two k-means per head) and the mask built on it, each synchronised wall time, first
(Triton compiles) and cached builds; the repository's Triton block-sparse attention on that mask in svg2's order
(CUDA events, L2 flushed, median); and the build's parts on their own: one nearest-centroid pass and one
cluster-means pass per k-means iteration, at the default cluster counts; and the grid's approximation at this size
(``approximation``: upstream's density from its kept cluster pairs, ours, and the attention mass of sampled rows).

    PYTHONPATH=$PWD python3 benchmarks/results/svg2-approximation/gpu_build.py --out $OUT/gpu_build.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

from wavealign import kernels, masks, workloads
from wavealign.instruments import timing
from wavealign.kernels import LaunchShape
from wavealign.masks import svg2


def synced_ms(fn, reps: int = 1) -> tuple[object, list[float]]:
    times, value = [], None
    for _ in range(reps):
        start = timing.synced_clock("cuda")
        value = fn()
        times.append((timing.synced_clock("cuda") - start) * 1e3)
    return value, times


def approximation(q: torch.Tensor, k: torch.Tensor, order: masks.TokenOrder, mask: torch.Tensor, params: dict,
                  sampled_rows: int = 256) -> dict[str, float]:
    """At this size, upstream's rule against our grid on the same clusters (heads' means): upstream's density from
    its kept cluster pairs and their sizes (its ``density_calculation``), our block density, and the dense attention
    mass each keeps on ``sampled_rows`` query rows per head, evenly spaced in svg2's order."""
    h, n, d = q.shape
    q_labels, kv_labels = order.q_labels[0], order.kv_labels[0]
    qc, q_sizes = svg2.cluster_means(q, q_labels, params["q_clusters"], use_kernel=True)
    kc, kv_sizes = svg2.cluster_means(k, kv_labels, params["kv_clusters"], use_kernel=True)
    kept = svg2.keep_clusters(qc, kc, kv_sizes, params["top_p"], params["min_kv_ratio"])
    pairs = (kept * q_sizes[:, :, None].double() * kv_sizes[:, None, :].double()).sum((1, 2)) / n**2
    rows = torch.linspace(0, n - 1, sampled_rows, device=q.device).long()
    columns = torch.arange(n, device=q.device) // 128
    upstream_mass, ours_mass = [], []
    for head in range(h):
        probs = torch.softmax(q[head, rows].float() @ k[head].float().T / d**0.5, -1)
        upstream_mass.append(float((probs * kept[head][q_labels[head, rows]][:, kv_labels[head]]).sum(-1).mean()))
        ours_mass.append(float((probs * mask[head][rows // 128][:, columns]).sum(-1).mean()))
        del probs
    return {"upstream_density": float(pairs.mean()), "ours_block_density": float(mask.float().mean()),
            "upstream_mass_sampled": sum(upstream_mass) / h, "ours_mass_sampled": sum(ours_mass) / h,
            "sampled_rows_per_head": sampled_rows}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=401)
    parser.add_argument("--heads", type=int, default=40)
    parser.add_argument("--builds", type=int, default=2, help="cached builds after the first")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    wl = workloads.preset("wan2.1-14b", args.frames, "720p")
    record: dict[str, object] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                 "python": platform.python_version(), "tokens": wl.seq_len, "heads": args.heads,
                                 "date": time.strftime("%Y-%m-%d"), "params": dict(masks.get("svg2").params)}
    (q, k, v), gen_ms = synced_ms(lambda: workloads.synthetic(wl, heads=list(range(args.heads)), layer=20, step=25,
                                                               seed=0, device="cuda"))
    record["workload_ms"] = gen_ms[0]

    # the parts of one k-means iteration, on every head at once (as kmeans runs them, in chunks of heads)
    parts = {}
    for name, x, clusters in (("q", q[0], 300), ("kv", k[0], 1000)):
        step = min(args.heads, svg2._kernels.heads_per_chunk(x.shape[1] * x.shape[2] * 8, x.device))
        xs = x[:step]
        c = svg2.kmeans(xs, clusters, 1).centroids
        labels, t_assign = synced_ms(lambda xs=xs, c=c: svg2.nearest_centroid(xs, c, use_kernel=True), reps=4)
        _, t_means = synced_ms(lambda xs=xs, labels=labels, clusters=clusters, c=c: svg2.cluster_means(
            xs, labels, clusters, c, use_kernel=True), reps=4)
        _, t_means_torch = synced_ms(lambda xs=xs, labels=labels, clusters=clusters, c=c: svg2.cluster_means(
            xs, labels, clusters, c, use_kernel=False), reps=2)
        _, t_sort = synced_ms(lambda labels=labels: torch.sort(labels.to(torch.int32), dim=-1), reps=3)
        parts[name] = {"heads_per_chunk": step, "clusters": clusters, "assign_ms": t_assign[1:],
                       "means_kernel_ms": t_means[1:], "of_which_sort_ms": t_sort[1:],
                       "means_index_add_ms": t_means_torch[1:]}
        for config in ({"BN": 128, "BC": 64, "num_warps": 4, "num_stages": 3},
                       {"BN": 256, "BC": 64, "num_warps": 8, "num_stages": 2},
                       {"BN": 128, "BC": 32, "num_warps": 4, "num_stages": 2}):
            got, t = synced_ms(lambda xs=xs, c=c, config=config: svg2._nearest_centroid_triton(
                xs, c.to(xs.dtype), c.to(xs.dtype).float().square().sum(-1), config), reps=3)
            parts[name][f"assign_ms {config}"] = t[1:]
            parts[name][f"assign_same {config}"] = bool(torch.equal(got, labels))
    record["iteration_parts"] = parts
    print(json.dumps(parts, indent=1), flush=True)

    method = masks.get("svg2")
    order, t_order = synced_ms(lambda: method.token_order(q, k, block_size=128, **method.params), reps=1 + args.builds)
    gathered, t_gather = synced_ms(lambda: (order.gather(q, "q"), order.gather(k, "kv"), order.gather(v, "kv")))
    mask, t_mask = synced_ms(lambda: svg2.build(*gathered, 128, token_order=order, **method.params),
                             reps=1 + args.builds)
    again = method.build_ordered(q, k, v, 128).mask
    record.update(token_order_ms=t_order, gather_ms=t_gather, mask_ms=t_mask, density=float(mask.float().mean()),
                  same_mask_every_build=bool(torch.equal(again, mask)))
    del again
    record["approximation"] = approximation(gathered[0][0], gathered[1][0], order, mask[0], method.params)
    launch = kernels.get("triton").plan(mask[0], None, LaunchShape.of(*gathered[:2], 128, v=gathered[2]))
    attention = timing.time_cuda(lambda: launch.run(*gathered), reps=3, warmup=1)
    record["attention_triton_ms"] = attention.median_ms
    record["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    print(json.dumps({key: val for key, val in record.items() if key != "iteration_parts"}, indent=1), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
