"""Kernel benchmark on one GPU: backends x masks x reorder variants x Wan2.1-14B sequence lengths.

    wavealign bench-kernels --out benchmarks/results/kernels-h200/run [--heads 4] [--no-ncu]
        [--backends flex,triton,fa4,flashinfer,flashinfer:head_order=sequential]

For every sequence length it times the dense kernel of each backend and cuDNN SDPA, then for each mask the
variants {none, spatial, temporal, both} (the paper's Original, O+S1, O+S2, O+S1+S2) on each backend: kernel
ms, reorder ms (``reorder.plan`` on the GPU; for a backend that does not read the order inside its kernel,
also the Q gather, mask-row permutation and O scatter, each timed on its own), net speedup, effective
TFLOP/s and the gap to the 1/rho bound. A backend takes call options after a colon (``name:key=value``). A second pass
under Nsight Compute adds L2 hit % and DRAM bytes (every launch of a cell's attention kernel, added up) for
the ``--ncu-seq-lens``. Writes cells.json / cells.csv / ncu_cells.csv / table.md to ``--out`` and
prints the table last. Masks are ``wavealign.synthetic`` masks (labelled random / planted, regenerable from
the seed); ``--method-masks`` adds masks from ``wavealign.masks`` on a synthetic Wan2.1 workload.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.metadata
import json
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import yaml

from jobs._records import write_csv
from wavealign import block_gather, blockmask, hardware, kernels, reorder, synthetic
from wavealign.kernels import flex as flex_backend
from wavealign.measure import derived, ncu
from wavealign.measure.timing import time_cuda, time_first_call_ms

# Wan2.1-14B 720p: pixel frames -> (F - 1) / 4 + 1 latent frames x 45 x 80 tokens
WAN_FRAMES = (81, 161, 241, 321, 401)
TOKENS_PER_LATENT_FRAME = 3600
SYNTHETIC_MASKS = ("random", "random-fixed-nnz", "planted")
STAGES = reorder.STAGES
# the attention kernels' names under Nsight Compute: triton, flex, FA4 (CuTe DSL) and FlashInfer (FA2 paged prefill)
ATTENTION_KERNELS = "|".join([r"_block_sparse_attn_fwd", r"flex_attention", r"FlashAttentionForward", r"flash_fwd",
                              r"BatchPrefillWithPagedKVCache"])
# packages whose versions the results record, where installed
PACKAGES = ("flash-attn-4", "flashinfer-python", "nvidia-cutlass-dsl")


def wan_seq_len(frames: int) -> int:
    """Tokens of a Wan2.1-14B 720p video of ``frames`` pixel frames."""
    return ((frames - 1) // 4 + 1) * TOKENS_PER_LATENT_FRAME


@dataclass(frozen=True)
class BackendSpec:
    """A registered backend with fixed call options, as ``--backends`` names it: ``name[:key=value...]``."""

    name: str
    options: tuple[tuple[str, object], ...] = ()
    text: str = ""  # as written in --backends

    @classmethod
    def parse(cls, text: str) -> BackendSpec:
        name, *pairs = text.split(":")
        if name not in kernels.names():
            raise ValueError(f"unknown backend {name!r} in {text!r}; known: {kernels.names()}")
        options = []
        for pair in pairs:
            key, eq, value = pair.partition("=")
            if not eq or not key:
                raise ValueError(f"backend option {pair!r} in {text!r} must be key=value")
            options.append((key, yaml.safe_load(value)))
        return cls(name, tuple(options), text)

    @property
    def label(self) -> str:
        """How cells and tables name this backend: the ``--backends`` text."""
        return self.text or self.name

    @property
    def backend(self) -> kernels.Backend:
        return kernels.get(self.name)

    def __call__(self, q, k, v, mask, order=None, block_size: int = 128) -> torch.Tensor:
        return self.backend(q, k, v, mask, order=order, block_size=block_size, **dict(self.options))


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
    reorder_ms: float  # plan_ms + gather_ms
    total_ms: float
    # first call minus the median: the compile/JIT time where this process meets the shape first, else ~0
    compile_ms: float
    effective_tflops: float
    plan_ms: float = 0.0  # reorder.plan on the GPU
    gather_ms: float = 0.0  # Q gather, mask-row permutation and O scatter, for backends that need them
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
    """The synthetic mask of ``kind`` (one of ``SYNTHETIC_MASKS``), as the NCU table's rows regenerate it."""
    if kind == "random":
        return synthetic.random_mask(heads, blocks, blocks, density, seed=seed)
    if kind == "random-fixed-nnz":
        return synthetic.fixed_nnz_mask(heads, blocks, blocks, density, seed=seed)
    if kind == "planted":
        return synthetic.planted_mask(heads, blocks, blocks, density, seed=seed)
    raise ValueError(f"mask kind must be one of {SYNTHETIC_MASKS}, got {kind!r}")


def method_inputs(name: str, seq_len: int, heads: int, seed: int, device: str = "cuda"):
    """q, k, v of a synthetic Wan2.1-14B workload and ``name``'s mask on them."""
    from wavealign import masks, workloads

    frames = (seq_len // TOKENS_PER_LATENT_FRAME - 1) * 4 + 1
    wl = workloads.preset("wan2.1-14b", frames, "720p")
    q, k, v = workloads.synthetic(wl, heads=list(range(heads)), seed=seed, device=device, dtype=torch.bfloat16)
    return (q, k, v), masks.build(name, q, k, v)[0]


class Launches:
    """The launches of one (seq_len, mask) group: per backend and stage, the call to time or profile."""

    def __init__(self, q, k, v, mask: torch.Tensor, block_size: int, wave_size: int, seed: int,
                 stages: tuple[str, ...] = STAGES) -> None:
        self.q, self.k, self.v = q, k, v
        self.kv = blockmask.to_kv_indices(mask)
        self.block_size = block_size
        self.plans = {s: functools.partial(reorder.plan, mask, wave_size=wave_size, stages=s, seed=seed)
                      for s in stages if s != "none"}
        self.orders = {s: plan() for s, plan in self.plans.items()}
        self._gathered: dict[str, tuple] = {}

    def plan_ms(self) -> dict[str, float]:
        """Median GPU time of ``reorder.plan`` per stage set (0 for the original order)."""
        return {"none": 0.0, **{s: time_cuda(plan, reps=5, warmup=1).median_ms for s, plan in self.plans.items()}}

    def order_steps(self, stages: str) -> dict[str, Callable[[], object]]:
        """What a backend that does not read the order in its kernel adds to it: gather Q's blocks and the
        mask's rows into launch order, and scatter the output's blocks back."""
        order, bs = self.orders[stages], self.block_size
        # an output in launch order has the gathered Q's layout: scatter that (gathered once, then cached)
        return {"gather_q": lambda: block_gather.gather_blocks(self.q, order, bs),
                "permute_mask": lambda: flex_backend.permuted_kv_form(self.kv, order),
                "scatter_o": lambda: block_gather.scatter_blocks(self.gathered(stages)[0], order, bs,
                                                                 self.q.shape[2])}

    def order_steps_ms(self) -> dict[str, float]:
        """Median GPU time of ``order_steps`` per stage set, each step timed on its own (0 for the original)."""
        return {"none": 0.0, **{s: sum(time_cuda(step, reps=5, warmup=1).median_ms
                                       for step in self.order_steps(s).values()) for s in self.orders}}

    def gathered(self, stages: str) -> tuple:
        """Q (padded to whole blocks) and the mask's kv-index form, rows gathered into ``stages``' launch order."""
        if stages not in self._gathered:
            steps = self.order_steps(stages)
            self._gathered[stages] = (steps["gather_q"](), steps["permute_mask"]())
        return self._gathered[stages]

    def call(self, spec: BackendSpec, stages: str):
        """The attention kernel of ``spec`` in ``stages`` order, alone: a backend that does not read the order
        in its kernel runs on Q and mask rows gathered beforehand (its output stays in launch order)."""
        order = self.orders.get(stages)
        if order is not None and not spec.backend.in_kernel_permutation:
            qp, kvp = self.gathered(stages)
            return lambda: spec(qp, self.k, self.v, kvp, block_size=self.block_size)
        return lambda: spec(self.q, self.k, self.v, self.kv, order=order, block_size=self.block_size)


def dense_times(q, k, v, backends: list[BackendSpec], block_size: int,
                reps: int) -> dict[str, tuple[float, float, float]]:
    """(median ms, IQR ms, first-call ms) of the dense kernel per backend label, plus cuDNN SDPA as ``cudnn``."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    blocks = -(-q.shape[2] // block_size)
    full = blockmask.to_kv_indices(torch.ones(q.shape[1], blocks, blocks, dtype=torch.bool, device=q.device))
    calls = {b.label: (lambda b=b: b(q, k, v, full, block_size=block_size)) for b in backends}

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    calls["cudnn"] = cudnn
    out = {}
    for name, fn in calls.items():
        first = time_first_call_ms(fn)
        t = time_cuda(fn, reps=reps, warmup=1)
        out[name] = (t.median_ms, t.iqr_ms, first)
        print(f"  dense {name:12} {t.median_ms:9.2f} ms", flush=True)
    return out


def _groups(args, seq_len: int):
    """(mask kind, q/k/v, mask) for each mask of one sequence length."""
    blocks = -(-seq_len // args.block_size)
    qkv = _qkv(args.heads, seq_len, args.head_dim, args.seed)
    for kind in args.masks:
        yield kind, qkv, make_mask(kind, args.heads, blocks, args.density, args.seed).cuda()
    for name in args.method_masks:
        inputs, mask = method_inputs(name, seq_len, args.heads, args.seed)
        yield name, inputs, mask


def run_grid(args, checkpoint=lambda cells: None) -> list[KernelCell]:
    """Every cell of the grid; ``checkpoint(cells)`` is called after each sequence length, so a run cut
    short keeps what it measured."""
    cells = []
    hw = hardware.detect() or hardware.get("h200")
    for seq_len in args.seq_lens:
        print(f"seq_len {seq_len}", flush=True)
        q, k, v = _qkv(args.heads, seq_len, args.head_dim, args.seed)
        dense = dense_times(q, k, v, args.backends, args.block_size, args.reps)
        flops_dense = derived.attention_flops(seq_len, seq_len, args.head_dim, args.heads)
        for name, (ms, iqr, first) in dense.items():
            wave = hw.wave_size(name.split(":")[0])
            cells.append(KernelCell(name, "dense", "dense", seq_len, args.heads, args.head_dim, args.block_size,
                                    1.0, args.seed, wave, ms, iqr, 0.0, ms, max(0.0, first - ms),
                                    derived.effective_tflops(flops_dense, ms), dense_ms=ms))
        del q, k, v
        for kind, (q, k, v), mask in _groups(args, seq_len):
            rho = blockmask.density(mask)
            flops = derived.attention_flops(seq_len, seq_len, args.head_dim, args.heads, rho)
            group, by_wave, plan_ms, steps_ms = {}, {}, {}, {}
            for spec in args.backends:
                wave = hw.wave_size(spec.name)
                if wave not in by_wave:
                    by_wave[wave] = Launches(q, k, v, mask, args.block_size, wave, args.seed, tuple(args.stages))
                    plan_ms[wave], steps_ms[wave] = by_wave[wave].plan_ms(), by_wave[wave].order_steps_ms()
                launches, label = by_wave[wave], spec.label
                for stages in args.stages:
                    kernel_call = launches.call(spec, stages)
                    first = time_first_call_ms(kernel_call)
                    t = time_cuda(kernel_call, reps=args.reps, warmup=1)
                    gather_ms = 0.0 if spec.backend.in_kernel_permutation else steps_ms[wave][stages]
                    reorder_ms = plan_ms[wave][stages] + gather_ms
                    bound = derived.gap_to_bound(dense[label][0], t.median_ms, rho)
                    cell = KernelCell(label, stages, kind, seq_len, args.heads, args.head_dim, args.block_size,
                                      rho, args.seed, wave, t.median_ms, t.iqr_ms, reorder_ms,
                                      t.median_ms + reorder_ms, max(0.0, first - t.median_ms),
                                      derived.effective_tflops(flops, t.median_ms), dense_ms=dense[label][0],
                                      bound_speedup=bound.bound_speedup, gap_to_bound=bound.gap,
                                      plan_ms=plan_ms[wave][stages], gather_ms=gather_ms)
                    group[(label, stages)] = cell
                    cells.append(cell)
                    print(f"  {kind:8} {label:12} {stages:8} kernel {t.median_ms:9.2f} ms reorder {reorder_ms:6.2f}"
                          f" ms", flush=True)
            del by_wave
            _speedups(group)
        checkpoint(cells)
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
    launches: int = 1  # attention-kernel launches summed into the row (FlashInfer's sequential heads: one per head)


def _ncu_spec(args, hw: hardware.Hardware, folder: Path) -> Path:
    """Every (backend, stages, synthetic mask) cell at the NCU sequence lengths, grouped by mask."""
    listed = [[spec.label, stages, kind, seq_len, hw.wave_size(spec.name)]
              for seq_len in args.ncu_seq_lens for kind in args.masks if kind in SYNTHETIC_MASKS
              for spec in args.backends for stages in args.stages]
    spec = folder / "ncu_spec.json"
    keys = ("heads", "head_dim", "block_size", "density", "seed", "stages")
    spec.write_text(json.dumps({"args": {k: getattr(args, k) for k in keys}, "cells": listed}))
    return spec


def ncu_child(spec_path: Path) -> int:
    """Run each listed cell's kernel once between cudaProfilerStart/Stop, after an unprofiled warm-up, the
    range opened by the marker kernel; write each mask's density beside the spec."""
    spec = json.loads(spec_path.read_text())
    a = spec["args"]
    cache: dict = {}
    densities = {}
    for label, stages, kind, seq_len, wave in spec["cells"]:
        key = (kind, seq_len, wave)
        if key not in cache:
            cache.clear()
            q, k, v = _qkv(a["heads"], seq_len, a["head_dim"], a["seed"])
            blocks = -(-seq_len // a["block_size"])
            mask = make_mask(kind, a["heads"], blocks, a["density"], a["seed"]).cuda()
            densities[f"{kind}/{seq_len}"] = blockmask.density(mask)
            cache[key] = Launches(q, k, v, mask, a["block_size"], wave, a["seed"], tuple(a["stages"]))
        ncu.profile_one_launch(cache[key].call(BackendSpec.parse(label), stages), marker=True)
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
                                Path(tmp) / "cells", kernel_regex=f"{ATTENTION_KERNELS}|{ncu.MARKER_KERNEL}",
                                occupancy=True,
                                timeout_s=args.ncu_timeout_s, csv_path=Path(args.out) / "ncu_raw.csv")
        density_file = spec.with_suffix(".densities.json")
        densities = json.loads(density_file.read_text()) if density_file.exists() else {}
    if isinstance(result, ncu.NcuUnavailable):
        for c in cells:
            c.ncu_note = f"unavailable: {result.reason}"
        return result.reason, []
    per_cell = ncu.split_at_markers(result)
    if len(per_cell) != len(listed) or not all(per_cell):
        return (f"ncu returned {len(per_cell)} marked ranges for {len(listed)} cells, "
                f"{sum(not g for g in per_cell)} without an attention kernel; NCU columns left empty"), []
    index = {(c.backend, c.stages, c.mask_kind, c.seq_len): c for c in cells}
    profiled = []
    for (backend, stages, kind, seq_len, wave), records in zip(listed, per_cell, strict=True):
        rho, rec = densities[f"{kind}/{seq_len}"], ncu.summarize(records)
        profiled.append(NcuCell(backend, stages, kind, seq_len, args.heads, args.block_size, args.head_dim, rho,
                                args.seed, rec.l2_hit_pct, rec.dram_read_bytes, rec.kernel_ms, wave,
                                rec.dram_throughput_pct, rec.sm_throughput_pct, rec.ctas_per_sm,
                                rec.registers_per_thread, args.density, rec.kernels))
        c = index.get((backend, stages, kind, seq_len))
        if c is None:
            continue
        c.l2_hit_pct, c.dram_read_bytes = rec.l2_hit_pct, rec.dram_read_bytes
        c.dram_throughput_pct, c.sm_throughput_pct, c.ncu_kernel_ms = (rec.dram_throughput_pct,
                                                                       rec.sm_throughput_pct, rec.kernel_ms)
        flops = derived.attention_flops(seq_len, seq_len, c.head_dim, c.heads, c.density)
        c.operational_intensity_flops_per_byte = derived.operational_intensity(flops, max(rec.dram_read_bytes, 1.0))
        c.ncu_note = f"ctas_per_sm={rec.ctas_per_sm} regs={rec.registers_per_thread} launches={rec.kernels}"
    return f"{len(per_cell)} cells profiled ({len(result) - len(per_cell)} kernels)", profiled


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


def _backends(text: str) -> list[BackendSpec]:
    try:
        return [BackendSpec.parse(x) for x in _names(text)]
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def package_versions() -> dict[str, str]:
    """The installed versions of ``PACKAGES`` (absent ones left out)."""
    found = {}
    for name in PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    return found


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
    p.add_argument("--backends", type=_backends, default=_backends("flex,triton"),
                   help="comma-separated backends, each with optional :key=value call options, e.g. "
                        "flex,triton,fa4,flashinfer,flashinfer:head_order=sequential")
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
    meta.update(package_versions())
    meta["ncu"] = "skipped (--no-ncu)" if args.no_ncu else "pending"
    # written after every sequence length, and before the NCU pass, so a run cut short keeps what it measured
    cells = run_grid(args, checkpoint=lambda done: write_outputs(args.out, done, meta, []))
    profiled = []
    if not args.no_ncu:
        meta["ncu"], profiled = add_ncu(args, cells)
    table = write_outputs(args.out, cells, meta, profiled)
    print(f"\n{meta}\n{table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
