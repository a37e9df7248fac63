"""Kernel benchmark on one GPU: {flex, triton} x masks x reorder variants x Wan2.1-14B sequence lengths.

    wavealign bench-kernels --out benchmarks/results/kernels-h200/run [--heads 4] [--no-ncu]

For every sequence length it times the dense kernel of each backend and cuDNN SDPA, then for each mask the
variants {none, spatial, temporal, both} (the paper's Original, O+S1, O+S2, O+S1+S2) on each backend: kernel
ms, reorder ms (``reorder.plan`` on the GPU; for flex also its gather/scatter), net speedup, effective
TFLOP/s and the gap to the 1/rho bound. A second pass under Nsight Compute adds L2 hit % and DRAM bytes
for the ``--ncu-seq-lens``. Writes cells.json / cells.csv / ncu_cells.csv / table.md to ``--out`` and
prints the table last. Masks are ``wavealign.synthetic`` masks (labelled random / planted, regenerable from
the seed); ``--method-masks`` adds masks from ``wavealign.masks`` on a synthetic Wan2.1 workload.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from jobs._records import write_csv
from wavealign import blockmask, hardware, kernels, reorder, synthetic
from wavealign.kernels import flex as flex_backend
from wavealign.measure import derived, ncu
from wavealign.measure.timing import time_cuda, time_first_call_ms

# Wan2.1-14B 720p: pixel frames -> (F - 1) / 4 + 1 latent frames x 45 x 80 tokens
WAN_FRAMES = (81, 161, 241, 321, 401)
TOKENS_PER_LATENT_FRAME = 3600
SYNTHETIC_MASKS = ("random", "planted")
STAGES = ("none", "spatial", "temporal", "both")
ATTENTION_KERNELS = r"_block_sparse_attn_fwd|flex_attention"


def wan_seq_len(frames: int) -> int:
    """Tokens of a Wan2.1-14B 720p video of ``frames`` pixel frames."""
    return ((frames - 1) // 4 + 1) * TOKENS_PER_LATENT_FRAME


@dataclass
class KernelCell:
    """One benchmark cell. Times are medians over repetitions with L2 flushed between them."""

    backend: str
    stages: str
    mask_kind: str
    seq_len: int
    heads: int
    head_dim: int
    block_size: int
    density: float
    seed: int
    wave_size: int
    kernel_ms: float
    kernel_iqr_ms: float
    reorder_ms: float
    total_ms: float
    # first call minus the median: the compile/JIT time where this process meets the shape first, else ~0
    compile_ms: float
    effective_tflops: float
    speedup_vs_original: float = float("nan")
    net_speedup_vs_original: float = float("nan")
    net_speedup_vs_flex_original: float = float("nan")
    dense_ms: float = float("nan")
    bound_speedup: float = float("nan")
    gap_to_bound: float = float("nan")
    l2_hit_pct: float | None = None
    dram_read_bytes: float | None = None
    dram_throughput_pct: float | None = None
    sm_throughput_pct: float | None = None
    ncu_kernel_ms: float | None = None
    operational_intensity_flops_per_byte: float | None = None
    ncu_note: str = ""


def _qkv(heads: int, seq_len: int, head_dim: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(torch.randn(1, heads, seq_len, head_dim, generator=gen, device="cuda", dtype=torch.bfloat16)
                 for _ in range(3))


def make_mask(kind: str, heads: int, blocks: int, density: float, seed: int) -> torch.Tensor:
    """The synthetic mask of ``kind`` ("random" or "planted"), as the NCU table's rows regenerate it."""
    if kind == "random":
        return synthetic.random_mask(heads, blocks, blocks, density, seed=seed)
    if kind == "planted":
        return synthetic.planted_mask(heads, blocks, blocks, density, seed=seed)
    raise ValueError(f"mask kind must be one of {SYNTHETIC_MASKS}, got {kind!r}")


def _method_inputs(name: str, seq_len: int, heads: int, seed: int):
    """q, k, v of a synthetic Wan2.1-14B workload and ``name``'s mask on them."""
    from wavealign import masks, workloads

    frames = (seq_len // TOKENS_PER_LATENT_FRAME - 1) * 4 + 1
    wl = workloads.preset("wan2.1-14b", frames, "720p")
    q, k, v = workloads.synthetic(wl, heads=list(range(heads)), seed=seed, device="cuda", dtype=torch.bfloat16)
    return (q, k, v), masks.build(name, q, k, v)[0]


class Launches:
    """The launches of one (seq_len, mask) group: per backend and stage, the call to time or profile."""

    def __init__(self, q, k, v, mask: torch.Tensor, block_size: int, wave_size: int, seed: int) -> None:
        self.q, self.k, self.v = q, k, v
        self.kv = blockmask.to_kv_indices(mask)
        self.block_size = block_size
        self.orders = {s: reorder.plan(mask, wave_size=wave_size, stages=s, seed=seed) for s in STAGES if s != "none"}
        self.plan_ms = {"none": 0.0}
        for s in self.orders:
            self.plan_ms[s] = time_cuda(lambda s=s: reorder.plan(mask, wave_size=wave_size, stages=s, seed=seed),
                                        reps=5, warmup=1).median_ms

    def call(self, backend: str, stages: str, *, kernel_only: bool):
        """The launch of ``backend`` in ``stages`` order; for flex with ``kernel_only``, on Q and mask rows
        gathered beforehand, so that only the attention kernel runs."""
        run, order = kernels.get(backend), self.orders.get(stages)
        if backend == "flex" and kernel_only and order is not None:
            n, mb = self.q.shape[2], order.num_q_blocks
            q_padded = torch.nn.functional.pad(self.q, (0, 0, 0, mb * self.block_size - n))
            qp = reorder.permute_rows(q_padded, order, self.block_size)
            kvp = flex_backend.permuted_kv_form(self.kv, order)
            return lambda: run(qp, self.k, self.v, kvp, block_size=self.block_size)
        return lambda: run(self.q, self.k, self.v, self.kv, order=order, block_size=self.block_size)


def dense_times(q, k, v, backends: list[str], block_size: int, reps: int) -> dict[str, tuple[float, float, float]]:
    """(median ms, IQR ms, first-call ms) of the dense kernel per backend, plus cuDNN SDPA as ``cudnn``."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    blocks = -(-q.shape[2] // block_size)
    full = blockmask.to_kv_indices(torch.ones(q.shape[1], blocks, blocks, dtype=torch.bool, device=q.device))
    calls = {b: (lambda b=b: kernels.get(b)(q, k, v, full, block_size=block_size)) for b in backends}

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    calls["cudnn"] = cudnn
    out = {}
    for name, fn in calls.items():
        first = time_first_call_ms(fn)
        t = time_cuda(fn, reps=reps, warmup=1)
        out[name] = (t.median_ms, t.iqr_ms, first)
        print(f"  dense {name:7} {t.median_ms:9.2f} ms", flush=True)
    return out


def _groups(args, seq_len: int):
    """(mask kind, q/k/v, mask) for each mask of one sequence length."""
    blocks = -(-seq_len // args.block_size)
    qkv = _qkv(args.heads, seq_len, args.head_dim, args.seed)
    for kind in args.masks:
        yield kind, qkv, make_mask(kind, args.heads, blocks, args.density, args.seed).cuda()
    for name in args.method_masks:
        inputs, mask = _method_inputs(name, seq_len, args.heads, args.seed)
        yield name, inputs, mask


def run_grid(args) -> list[KernelCell]:
    cells = []
    hw = hardware.detect() or hardware.get("h200")
    for seq_len in args.seq_lens:
        print(f"seq_len {seq_len}", flush=True)
        q, k, v = _qkv(args.heads, seq_len, args.head_dim, args.seed)
        dense = dense_times(q, k, v, args.backends, args.block_size, args.reps)
        flops_dense = derived.attention_flops(seq_len, seq_len, args.head_dim, args.heads)
        for name, (ms, iqr, first) in dense.items():
            cells.append(KernelCell(name, "dense", "dense", seq_len, args.heads, args.head_dim, args.block_size,
                                    1.0, args.seed, hw.wave_size(name), ms, iqr, 0.0, ms, max(0.0, first - ms),
                                    derived.effective_tflops(flops_dense, ms), dense_ms=ms))
        del q, k, v
        for kind, (q, k, v), mask in _groups(args, seq_len):
            rho = blockmask.density(mask)
            flops = derived.attention_flops(seq_len, seq_len, args.head_dim, args.heads, rho)
            group, by_wave = {}, {}
            for backend in args.backends:
                wave = hw.wave_size(backend)
                if wave not in by_wave:
                    by_wave[wave] = Launches(q, k, v, mask, args.block_size, wave, args.seed)
                launches = by_wave[wave]
                for stages in args.stages:
                    kernel_call = launches.call(backend, stages, kernel_only=True)
                    first = time_first_call_ms(kernel_call)
                    t = time_cuda(kernel_call, reps=args.reps, warmup=1)
                    extra_ms = 0.0
                    if backend == "flex" and stages != "none":  # gather Q / scatter O / permute the mask
                        full = time_cuda(launches.call(backend, stages, kernel_only=False), reps=args.reps, warmup=1)
                        extra_ms = max(0.0, full.median_ms - t.median_ms)
                    reorder_ms = launches.plan_ms[stages] + extra_ms
                    bound = derived.gap_to_bound(dense[backend][0], t.median_ms, rho)
                    cell = KernelCell(backend, stages, kind, seq_len, args.heads, args.head_dim, args.block_size,
                                      rho, args.seed, wave, t.median_ms, t.iqr_ms, reorder_ms,
                                      t.median_ms + reorder_ms, max(0.0, first - t.median_ms),
                                      derived.effective_tflops(flops, t.median_ms), dense_ms=dense[backend][0],
                                      bound_speedup=bound.bound_speedup, gap_to_bound=bound.gap)
                    group[(backend, stages)] = cell
                    cells.append(cell)
                    print(f"  {kind:8} {backend:6} {stages:8} kernel {t.median_ms:9.2f} ms reorder {reorder_ms:6.2f}"
                          f" ms", flush=True)
            del by_wave
            _speedups(group)
    return cells


def _speedups(group: dict) -> None:
    """Kernel and net speedups against the same backend's original order and against flex's."""
    flex_orig = group.get(("flex", "none"))
    for (backend, _), cell in group.items():
        orig = group.get((backend, "none"))
        if orig is not None:
            cell.speedup_vs_original = orig.kernel_ms / cell.kernel_ms
            cell.net_speedup_vs_original = orig.kernel_ms / cell.total_ms
        if flex_orig is not None:
            cell.net_speedup_vs_flex_original = flex_orig.kernel_ms / cell.total_ms


# ---- the Nsight Compute pass: a child process replays the chosen cells' kernels, one profiled launch each

@dataclass
class NcuCell:
    """One profiled launch: the row of the simulator's validation table (masks regenerate from the seed)."""

    backend: str
    stages: str
    mask_kind: str
    seq_len: int
    heads: int
    block_size: int
    head_dim: int
    density: float
    seed: int
    l2_hit_pct: float
    dram_read_bytes: float
    kernel_ms: float
    wave_size: int
    dram_throughput_pct: float
    sm_throughput_pct: float
    ctas_per_sm: int | None
    registers_per_thread: int | None
    mask_density: float  # the density asked of the generator (``density`` is the realised one)


def _ncu_spec(args, hw: hardware.Hardware, folder: Path) -> Path:
    """Every (backend, stages, synthetic mask) cell at the NCU sequence lengths, grouped by mask."""
    listed = [[backend, stages, kind, seq_len, hw.wave_size(backend)]
              for seq_len in args.ncu_seq_lens for kind in args.masks if kind in SYNTHETIC_MASKS
              for backend in args.backends for stages in args.stages]
    spec = folder / "ncu_spec.json"
    spec.write_text(json.dumps({"args": {k: getattr(args, k) for k in ("heads", "head_dim", "block_size", "density",
                                                                       "seed")}, "cells": listed}))
    return spec


def ncu_child(spec_path: Path) -> int:
    """Run each listed cell's kernel once between cudaProfilerStart/Stop, after an unprofiled warm-up;
    write each mask's density beside the spec."""
    spec = json.loads(spec_path.read_text())
    a = spec["args"]
    cache: dict = {}
    densities = {}
    for backend, stages, kind, seq_len, wave in spec["cells"]:
        key = (kind, seq_len, wave)
        if key not in cache:
            cache.clear()
            q, k, v = _qkv(a["heads"], seq_len, a["head_dim"], a["seed"])
            blocks = -(-seq_len // a["block_size"])
            mask = make_mask(kind, a["heads"], blocks, a["density"], a["seed"]).cuda()
            densities[f"{kind}/{seq_len}"] = blockmask.density(mask)
            cache[key] = Launches(q, k, v, mask, a["block_size"], wave, a["seed"])
        ncu.profile_one_launch(cache[key].call(backend, stages, kernel_only=True))
    spec_path.with_suffix(".densities.json").write_text(json.dumps(densities))
    return 0


def add_ncu(args, cells: list[KernelCell]) -> tuple[str, list[NcuCell]]:
    """Profile every cell at ``--ncu-seq-lens`` (timed or not) and fill the NCU columns of timed ones."""
    hw = hardware.detect() or hardware.get("h200")
    with tempfile.TemporaryDirectory() as tmp:
        spec = _ncu_spec(args, hw, Path(tmp))
        listed = json.loads(spec.read_text())["cells"]
        if not listed:
            return "no cell at the NCU sequence lengths", []
        result, _ = ncu.collect([sys.executable, "-m", "jobs.bench_kernels", "--ncu-child", str(spec)],
                                Path(tmp) / "cells", kernel_regex=ATTENTION_KERNELS, occupancy=True,
                                timeout_s=args.ncu_timeout_s, csv_path=Path(args.out) / "ncu_raw.csv")
        density_file = spec.with_suffix(".densities.json")
        densities = json.loads(density_file.read_text()) if density_file.exists() else {}
    if isinstance(result, ncu.NcuUnavailable):
        for c in cells:
            c.ncu_note = f"unavailable: {result.reason}"
        return result.reason, []
    if len(result) != len(listed):
        return f"ncu returned {len(result)} kernels for {len(listed)} cells; NCU columns left empty", []
    index = {(c.backend, c.stages, c.mask_kind, c.seq_len): c for c in cells}
    profiled = []
    for (backend, stages, kind, seq_len, wave), rec in zip(listed, result, strict=True):
        rho = densities[f"{kind}/{seq_len}"]
        profiled.append(NcuCell(backend, stages, kind, seq_len, args.heads, args.block_size, args.head_dim, rho,
                                args.seed, rec.l2_hit_pct, rec.dram_read_bytes, rec.duration_ms, wave,
                                rec.dram_throughput_pct, rec.sm_throughput_pct, rec.ctas_per_sm,
                                rec.registers_per_thread, args.density))
        c = index.get((backend, stages, kind, seq_len))
        if c is None:
            continue
        c.l2_hit_pct, c.dram_read_bytes = rec.l2_hit_pct, rec.dram_read_bytes
        c.dram_throughput_pct, c.sm_throughput_pct, c.ncu_kernel_ms = (rec.dram_throughput_pct,
                                                                       rec.sm_throughput_pct, rec.duration_ms)
        flops = derived.attention_flops(seq_len, seq_len, c.head_dim, c.heads, c.density)
        c.operational_intensity_flops_per_byte = derived.operational_intensity(flops, max(rec.dram_read_bytes, 1.0))
        c.ncu_note = f"ctas_per_sm={rec.ctas_per_sm} regs={rec.registers_per_thread}"
    return f"{len(result)} kernels profiled", profiled


# ---- outputs

def write_outputs(out: Path, cells: list[KernelCell], meta: dict, profiled: list[NcuCell]) -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / "cells.json").write_text(json.dumps({"meta": meta, "cells": [asdict(c) for c in cells]}, indent=1))
    write_csv(out / "cells.csv", KernelCell, cells)
    write_csv(out / "ncu_cells.csv", NcuCell, profiled)
    table = render_table(cells)
    (out / "table.md").write_text(f"{meta['command']}\n\n{table}\n")
    return table


def _fmt(x, spec: str) -> str:
    return "" if x is None or x != x else format(x, spec)


def render_table(cells: list[KernelCell]) -> str:
    head = ("| seq | mask | backend | stages | kernel ms | reorder ms | net x (same) | net x (flex orig) | TFLOP/s "
            "| gap 1/rho | L2 hit % | DRAM GB |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for c in cells:
        rows.append(f"| {c.seq_len} | {c.mask_kind} | {c.backend} | {c.stages} | {c.kernel_ms:.2f} | "
                    f"{c.reorder_ms:.2f} | {_fmt(c.net_speedup_vs_original, '.3f')} | "
                    f"{_fmt(c.net_speedup_vs_flex_original, '.3f')} | {c.effective_tflops:.0f} | "
                    f"{_fmt(c.gap_to_bound, '.3f')} | {_fmt(c.l2_hit_pct, '.1f')} | "
                    f"{_fmt(None if c.dram_read_bytes is None else c.dram_read_bytes / 1e9, '.2f')} |")
    return "\n".join(rows)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _names(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="wavealign bench-kernels", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, help="folder for cells.json, cells.csv, ncu_cells.csv, table.md")
    p.add_argument("--seq-lens", type=_ints, default=[wan_seq_len(f) for f in WAN_FRAMES])
    p.add_argument("--heads", type=int, default=4, help="heads per launch (Wan2.1-14B has 40; fewer fit a call)")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--density", type=float, default=0.25)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--masks", type=_names, default=list(SYNTHETIC_MASKS))
    p.add_argument("--method-masks", type=_names, default=[],
                   help="wavealign.masks methods on a synthetic Wan2.1 workload, e.g. xattention,spargeattn")
    p.add_argument("--stages", type=_names, default=list(STAGES))
    p.add_argument("--backends", type=_names, default=["flex", "triton"])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--ncu-seq-lens", type=_ints, default=[wan_seq_len(f) for f in (81, 161, 401)],
                   help="profiled under ncu, whether or not in --seq-lens")
    p.add_argument("--no-ncu", action="store_true")
    p.add_argument("--ncu-timeout-s", type=float, default=300)
    p.add_argument("--ncu-child", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.ncu_child is None and args.out is None:
        p.error("--out is required")
    for name in args.stages:
        if name not in STAGES:
            p.error(f"--stages must be among {STAGES}, got {name!r}")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.ncu_child is not None:
        return ncu_child(args.ncu_child)
    if not torch.cuda.is_available():
        print("bench-kernels needs a CUDA GPU", file=sys.stderr)
        return 2
    import triton

    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"command": "wavealign bench-kernels " + shlex.join(argv), "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__, "triton": triton.__version__,
            "driver": subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                     capture_output=True, text=True).stdout.strip()}
    cells = run_grid(args)
    meta["ncu"] = "skipped (--no-ncu)" if args.no_ncu else "pending"
    table = write_outputs(args.out, cells, meta, [])  # kept even if the NCU pass is cut short
    if not args.no_ncu:
        meta["ncu"], profiled = add_ncu(args, cells)
        table = write_outputs(args.out, cells, meta, profiled)
    print(f"\n{meta}\n{table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
