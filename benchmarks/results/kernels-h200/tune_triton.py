"""Tuning sweep of the ``triton`` backend on one GPU, beside the flex and cuDNN baselines: the script
behind TUNING.md. Also times ``launch_order.plan`` on CUDA, captures one raw Nsight Compute CSV and, with
``--parts stalls``, Nsight Compute's stall and pipe sections of the kernel. (The packed Stage-1 launch shapes it once
swept are gone with their Triton kernels: ``../plan-h200/`` has Stage 1's scripts.)

    PYTHONPATH=$PWD python3 benchmarks/results/kernels-h200/tune_triton.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import traceback
from dataclasses import asdict
from pathlib import Path

import torch

from wavealign import blockmask, kernels, launch_order, metrics
from wavealign.instruments import ncu
from wavealign.instruments.timing import time_cuda, time_first_call_ms
from wavealign.kernels import flex as flex_backend
from wavealign.kernels.triton_blocksparse import KernelConfig, attention
from wavealign.masks import synthetic

# round 2 (round 1 is in TUNING.md): after the FMA softmax and P V accumulated inside the dot
CONFIGS_128 = [
    KernelConfig(128, 128, 8, 3, True), KernelConfig(128, 128, 8, 3, True, flat_loads=True),
    KernelConfig(128, 128, 8, 4, True, flat_loads=True), KernelConfig(128, 128, 8, 2, True, flat_loads=True),
    KernelConfig(128, 128, 8, 3, False), KernelConfig(128, 64, 8, 3, True, flat_loads=True),
    KernelConfig(128, 64, 8, 3, False), KernelConfig(64, 64, 4, 3, True, flat_loads=True),
]
CONFIGS_64 = [KernelConfig(128, 128, 4, 3, True), KernelConfig(128, 128, 4, 3, True, flat_loads=True),
              KernelConfig(128, 128, 8, 3, True, flat_loads=True), KernelConfig(128, 64, 4, 3, True, flat_loads=True)]


def _qkv(heads: int, seq_len: int, head_dim: int, seed: int = 0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(1, heads, seq_len, head_dim, generator=gen, device="cuda", dtype=torch.bfloat16)
            for _ in range(3)]


def _cfg_name(c: KernelConfig) -> str:
    return (f"m{c.block_m}n{c.block_n}w{c.num_warps}s{c.num_stages}{'-tma' if c.use_tma else '-ptr'}"
            f"{'-ws' if c.warp_specialize else ''}{'-flat' if c.flat_loads else ''}")


def sweep_dense(rows: list, head_dim: int, configs, seq_len: int = 65536, heads: int = 8) -> None:
    q, k, v = _qkv(heads, seq_len, head_dim)
    mb = -(-seq_len // 128)
    kv = blockmask.to_kv_indices(torch.ones(heads, mb, mb, dtype=torch.bool, device="cuda"))
    flops = metrics.attention_flops(seq_len, seq_len, head_dim, heads)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    for c in configs:
        try:
            compile_ms = time_first_call_ms(lambda c=c: attention(q, k, v, kv, config=c))
            err = float((attention(q, k, v, kv, config=c).float() - ref.float()).norm() / ref.float().norm())
            t = time_cuda(lambda c=c: attention(q, k, v, kv, config=c), reps=5, warmup=1)
            rows.append({"part": "dense", "head_dim": head_dim, "config": _cfg_name(c), "ms": t.median_ms,
                         "iqr_ms": t.iqr_ms, "tflops": metrics.tflops(flops, t.median_ms),
                         "rel_err": err, "compile_ms": compile_ms})
        except Exception as exc:  # a config Triton can't compile is a result too
            rows.append({"part": "dense", "head_dim": head_dim, "config": _cfg_name(c), "error": repr(exc)[:300]})
        print(rows[-1], flush=True)


def baselines_dense(rows: list, head_dim: int = 128, seq_len: int = 65536, heads: int = 8) -> None:
    q, k, v = _qkv(heads, seq_len, head_dim)
    flops = metrics.attention_flops(seq_len, seq_len, head_dim, heads)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa-flash", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                t = time_cuda(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v), reps=5)
            rows.append({"part": "dense", "head_dim": head_dim, "config": name, "ms": t.median_ms,
                         "tflops": metrics.tflops(flops, t.median_ms)})
        except Exception as exc:
            rows.append({"part": "dense", "config": name, "error": repr(exc)[:300]})
        print(rows[-1], flush=True)
    mb = -(-seq_len // 128)
    kv = blockmask.to_kv_indices(torch.ones(heads, mb, mb, dtype=torch.bool, device="cuda"))
    run = kernels.get("flex")
    compile_ms = time_first_call_ms(lambda: run(q, k, v, kv))
    t = time_cuda(lambda: run(q, k, v, kv), reps=5)
    rows.append({"part": "dense", "head_dim": head_dim, "config": "flex", "ms": t.median_ms,
                 "tflops": metrics.tflops(flops, t.median_ms), "compile_ms": compile_ms})
    print(rows[-1], flush=True)


def sweep_sparse(rows: list, configs, seq_len: int = 363600, heads: int = 2, flex: bool = True) -> None:
    q, k, v = _qkv(heads, seq_len, 128)
    mb = -(-seq_len // 128)
    for kind in ("random", "planted"):
        make = synthetic.random_mask if kind == "random" else synthetic.planted_mask
        mask = make(heads, mb, mb, 0.25, seed=0).cuda()
        kv = blockmask.to_kv_indices(mask)
        rho = blockmask.density(mask)
        flops = metrics.attention_flops(seq_len, seq_len, 128, heads, rho)
        order = launch_order.plan(mask, wave_size=132, stages="both")
        for c in configs:
            for name, o in (("none", None), ("both", order)):
                try:
                    t = time_cuda(lambda c=c, o=o: attention(q, k, v, kv, o, config=c), reps=3,  # noqa: B023
                                  warmup=1)
                    rows.append({"part": "sparse", "mask": kind, "stages": name, "config": _cfg_name(c),
                                 "ms": t.median_ms, "tflops": metrics.tflops(flops, t.median_ms)})
                except Exception as exc:
                    rows.append({"part": "sparse", "mask": kind, "stages": name, "config": _cfg_name(c),
                                 "error": repr(exc)[:300]})
                print(rows[-1], flush=True)
        if not flex:
            continue
        run = kernels.get("flex")
        qp = launch_order.permute_rows(torch.nn.functional.pad(q, (0, 0, 0, mb * 128 - seq_len)), order)
        kvp = flex_backend.permuted_kv_form(kv, order)
        variants = {"none": (q, kv, None), "both": (qp, kvp, None), "both+gather": (q, kv, order)}
        for name, (qx, mx, ox) in variants.items():
            fn = lambda qx=qx, mx=mx, ox=ox, run=run: run(qx, k, v, mx, ox)  # noqa: E731
            time_first_call_ms(fn)
            t = time_cuda(fn, reps=3, warmup=1)
            rows.append({"part": "sparse", "mask": kind, "stages": name, "config": "flex", "ms": t.median_ms,
                         "tflops": metrics.tflops(flops, t.median_ms)})
            print(rows[-1], flush=True)


def reorder_timing(rows: list, heads: int = 40, blocks: int = 2841) -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    mask = torch.rand(heads, blocks, blocks, generator=gen, device="cuda") < 0.25
    for stages in ("spatial", "temporal", "both"):
        first = time_first_call_ms(lambda s=stages: launch_order.plan(mask, wave_size=132, stages=s))
        t = time_cuda(lambda s=stages: launch_order.plan(mask, wave_size=132, stages=s), reps=5, warmup=1)
        rows.append({"part": "reorder", "stages": stages, "heads": heads, "blocks": blocks, "ms": t.median_ms,
                     "iqr_ms": t.iqr_ms, "first_ms": first})
        print(rows[-1], flush=True)


def eviction_sweep(rows: list, seq_len: int = 363600, heads: int = 2) -> None:
    """K/V L2 eviction hints (pointer loads) against TMA loads, original order and S1+S2."""
    q, k, v = _qkv(heads, seq_len, 128)
    mb = -(-seq_len // 128)
    configs = [KernelConfig(), KernelConfig(use_tma=False), KernelConfig(use_tma=False, kv_eviction="evict_last")]
    for kind in ("random", "planted"):
        make = synthetic.random_mask if kind == "random" else synthetic.planted_mask
        mask = make(heads, mb, mb, 0.25, seed=0).cuda()
        kv = blockmask.to_kv_indices(mask)
        order = launch_order.plan(mask, wave_size=132, stages="both")
        for c in configs:
            for name, o in (("none", None), ("both", order)):
                t = time_cuda(lambda c=c, o=o, kv=kv: attention(q, k, v, kv, o, config=c), reps=3, warmup=1)
                rows.append({"part": "evict", "mask": kind, "stages": name,
                             "config": _cfg_name(c) + (f"-{c.kv_eviction}" if c.kv_eviction else ""),
                             "ms": t.median_ms})
                print(rows[-1], flush=True)


def ncu_child() -> None:
    """Two profiled launches (triton, flex) at 76K tokens x 2 heads, for the CSV capture."""
    seq_len, heads = 75600, 2
    q, k, v = _qkv(heads, seq_len, 128)
    mb = -(-seq_len // 128)
    mask = synthetic.planted_mask(heads, mb, mb, 0.25, seed=0).cuda()
    kv = blockmask.to_kv_indices(mask)
    order = launch_order.plan(mask, wave_size=132)
    launches = [lambda: attention(q, k, v, kv), lambda: attention(q, k, v, kv, order),
                lambda: kernels.get("flex")(q, k, v, kv)]
    for fn in launches:
        fn()
    torch.cuda.synchronize()
    for fn in launches:
        torch.cuda.profiler.start()
        fn()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


def ncu_capture(out: Path, rows: list) -> None:
    result, _ = ncu.collect([sys.executable, __file__, "--ncu-child"], out / "capture", occupancy=True,
                            csv_path=out / "ncu_raw_capture.csv", timeout_s=240)
    if isinstance(result, ncu.NcuUnavailable):
        rows.append({"part": "ncu", "unavailable": result.reason})
    else:
        rows += [{"part": "ncu", **asdict(r)} for r in result]
    print(rows[-1], flush=True)


def ncu_stalls(out: Path) -> None:
    """Where the triton kernel's time goes (issue 17, item 3): Nsight Compute's throughput, pipe, scheduler and
    warp-stall sections for the launches of ``ncu_child``, as ncu prints them, in ``ncu_stalls.txt``."""
    sections = ["SpeedOfLight", "ComputeWorkloadAnalysis", "SchedulerStats", "WarpStateStats", "InstructionStats",
                "Occupancy"]
    cmd = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--kernel-name",
           "regex:_block_sparse_attn_fwd", *[arg for name in sections for arg in ("--section", name)],
           "--print-details", "all", sys.executable, __file__, "--ncu-child"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    (out / "ncu_stalls.txt").write_text(done.stdout + done.stderr)
    print(f"ncu stalls: exit {done.returncode}, {out / 'ncu_stalls.txt'}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("tune-out"))
    parser.add_argument("--ncu-child", action="store_true")
    parser.add_argument("--parts", default="dense,baselines,sparse",
                        help="comma-separated: dense, baselines, sparse, reorder, evict, ncu, stalls")
    args = parser.parse_args()
    if args.ncu_child:
        ncu_child()
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": __import__("triton").__version__,
           "driver": subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True).stdout.strip()}
    print(env, flush=True)
    rows: list = []
    parts = {
        "dense": lambda: (sweep_dense(rows, 128, CONFIGS_128), sweep_dense(rows, 64, CONFIGS_64)),
        "baselines": lambda: baselines_dense(rows),
        "sparse": lambda: sweep_sparse(rows, CONFIGS_128[:5], flex=False),
        "reorder": lambda: reorder_timing(rows),
        "evict": lambda: eviction_sweep(rows),
        "ncu": lambda: ncu_capture(args.out, rows),
        "stalls": lambda: ncu_stalls(args.out),
    }
    for name in args.parts.split(","):
        try:
            parts[name]()
        except Exception:
            traceback.print_exc()
            rows.append({"part": name, "error": traceback.format_exc()[-500:]})
        (args.out / "tune.json").write_text(json.dumps({"env": env, "rows": rows}, indent=1))
    print("\n== summary ==")
    for r in rows:
        if "ms" in r:
            print(f"{r['part']:8} {r.get('mask', ''):8} {r.get('stages', ''):12} {r.get('head_dim', ''):>4} "
                  f"{r['config']:24} {r['ms']:9.3f} ms {r.get('tflops', 0):7.1f} TF/s "
                  f"err={r.get('rel_err', '')}" if "config" in r else str(r))
        elif "error" in r:
            print(f"{r['part']:8} {r.get('config', '')} ERROR {r['error'][:150]}")
        else:
            print(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
