"""Compile the `triton` backend's kernel for sm_90 without a GPU and report what the H200 would run.

The kernel is built exactly as ``TritonLaunch.run`` launches it (``triton_blocksparse.kernel_constants``, the tuned
config per head dim, the same argument specialisations a contiguous bf16 launch gets), through Triton's own
ahead-of-time path (``triton.compile`` with an explicit ``GPUTarget``), and its SASS is read with the
``cuobjdump`` that ships with Triton. Use the Triton the H200 runs (3.6) to see the H200's code:

    python -m venv /tmp/t36 && /tmp/t36/bin/pip install triton==3.6.0 torch==2.13.0 numpy pyyaml
    PYTHONPATH=$PWD /tmp/t36/bin/python benchmarks/results/kernels-h200/sass_sm90.py \
        --variant tuned --variant warp_specialize:warp_specialize=1 --out /tmp/sass

For each variant it prints registers per thread, local memory (spills), shared memory per CTA, and the main
K/V loop's instruction skeleton: tensor-core groups (HGMMA), the waits on them (``WARPGROUP.DEPBAR.LE gsb0, N``:
N = how many groups may stay in flight), CTA-wide barriers (BAR.SYNC), TMA loads (UTMALDG) and exp2 (MUFU.EX2).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
import json
import re
import subprocess
import tempfile
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget

from wavealign.kernels import LaunchShape
from wavealign.kernels import triton_blocksparse as tb

KEY_OPS = re.compile(r"\b(HGMMA\S*|WARPGROUP\.[A-Z.]+|BAR\.SYNC|UTMALDG\S*|MUFU\.EX2|SYNCS\.PHASECHK\S*|BRA)\b")


def parse_variant(text: str) -> tuple[str, dict[str, object]]:
    """``name[:field=value,...]`` -> (name, KernelConfig overrides); values parsed as int, then bool, else str."""
    name, _, rest = text.partition(":")
    fields = {f.name: f.type for f in dataclasses.fields(tb.KernelConfig)}
    overrides: dict[str, object] = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key not in fields:
            raise SystemExit(f"--variant {text!r}: {key!r} is not a KernelConfig field ({sorted(fields)})")
        overrides[key] = bool(int(value)) if fields[key] in (bool, "bool") else (
            int(value) if fields[key] in (int, "int") else value)
    return name, overrides


def load_kernel(spec: str | None):
    """The backend's kernel, or ``FILE:FUNCTION`` (an attempt taking the same arguments)."""
    if not spec:
        return tb._block_sparse_attn_fwd
    path, _, name = spec.rpartition(":")
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, name)


def compile_sm90(shape: LaunchShape, cfg: tb.KernelConfig, head_order: str = "sequential", has_perm: bool = True,
                 fn=None):
    """The compiled kernel (``triton.compiler.CompiledKernel``) a contiguous launch of ``shape`` gets on sm_90."""
    use_tma = cfg.use_tma
    consts = tb.kernel_constants(shape, cfg, head_order, has_perm=has_perm, use_tma=use_tma)
    options = {"num_warps": consts.pop("num_warps"), "num_stages": consts.pop("num_stages")}
    fn = fn or tb._block_sparse_attn_fwd
    d, flat = shape.head_dim, cfg.flat_loads
    desc_rows = {"q_desc": cfg.block_m, "k_desc": cfg.block_n, "v_desc": cfg.block_n, "o_desc": cfg.block_m}
    # representative runtime values, for Triton's divisible-by-16 specialisation of int arguments
    strides = {"q": (shape.heads * shape.q_len * d, shape.q_len * d, d),
               "k": (shape.heads * shape.kv_len * d, shape.kv_len * d, d)}
    ints = dict(zip(["stride_qb", "stride_qh", "stride_qn", "stride_kb", "stride_kh", "stride_kn", "stride_vb",
                     "stride_vh", "stride_vn", "stride_ob", "stride_oh", "stride_on"],
                    [*strides["q"], *strides["k"], *strides["k"], *strides["q"]], strict=True))
    ints |= {"stride_cb": 0, "stride_ch": shape.q_blocks, "stride_ib": 0, "stride_ih": shape.q_blocks * shape.kv_blocks,
             "stride_im": shape.kv_blocks, "stride_pb": 0, "stride_ph": shape.q_blocks, "H": shape.heads,
             "N_Q": shape.q_len, "N_KV": shape.kv_len, "NB": shape.kv_blocks}
    tiles_per_head = shape.q_blocks * (shape.block_size // cfg.block_m)
    ints |= {"TILES_PER_HEAD": tiles_per_head, "NUM_TILES": tiles_per_head * shape.batch * shape.heads}
    signature, attrs = {}, {}
    for index, name in enumerate(fn.arg_names):
        if name in consts:
            signature[name] = "constexpr"
        elif name in desc_rows:
            block = [desc_rows[name], d] if flat and name != "o_desc" else [1, desc_rows[name], d]
            signature[name] = f"tensordesc<bf16[{', '.join(map(str, block))}]>" if use_tma else "constexpr"
            if not use_tma:
                consts[name] = None
        elif name == "TIMELINE":  # unread without RECORD_TIMELINE: passed as None, a constant
            signature[name], consts[name] = "constexpr", None
        elif name in ("Q", "K", "V", "O"):
            signature[name], attrs[(index,)] = "*bf16", [["tt.divisibility", 16]]
        elif name in ("KV_NUM", "KV_IDX"):
            signature[name], attrs[(index,)] = "*i32", [["tt.divisibility", 16]]
        elif name == "PERM":
            signature[name], attrs[(index,)] = ("*i64" if has_perm else "*i32"), [["tt.divisibility", 16]]
        elif name == "qk_scale":
            signature[name] = "fp32"
        else:
            value = ints[name]
            signature[name] = "i32"
            if value == 1:  # Triton turns an int argument equal to 1 into a constant (0 stays an int, "divisible")
                signature[name], consts[name] = "constexpr", value
            elif value % 16 == 0:
                attrs[(index,)] = [["tt.divisibility", 16]]
    src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def resources(cubin: bytes) -> dict[str, int]:
    """Registers per thread and local (spill) bytes of the kernel, from cuobjdump."""
    from triton.tools.disasm import path_to_cuobjdump

    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(cubin)
        fh.flush()
        text = subprocess.check_output([path_to_cuobjdump(), "--dump-resource-usage", fh.name], text=True)
    found = dict(re.findall(r"\b(REG|LOCAL):(\d+)", text))
    return {k.lower(): int(v) for k, v in found.items()}


def loop_skeleton(sass: str) -> list[str]:
    """The key instructions of the kernel's main K/V loop (the first innermost backward branch around HGMMAs: the
    full-tile loop, which comes before the ragged-tail one), runs of one instruction collapsed to ``OP xN``."""
    lines = sass.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"\s*(\w+):\s*$", line))}
    loops = [(labels[m.group(1)], i) for i, line in enumerate(lines)
             if (m := re.search(r"\bBRA\s+(\w+)", line)) and labels.get(m.group(1), i) < i
             and any("HGMMA" in x for x in lines[labels[m.group(1)]:i])]
    inner = [a for a in loops if not any(b != a and a[0] <= b[0] and b[1] <= a[1] for b in loops)]
    if not inner:
        return []
    best = min(inner)
    ops = []
    for line in lines[best[0]:best[1] + 1]:
        if m := KEY_OPS.search(line):
            wait = re.search(r"DEPBAR\.LE gsb0, (0x\w+)", line)  # N: wgmma groups left in flight
            ops.append(re.sub(r"(HGMMA\.\w+)\S*", r"\1", m.group(1)) + (f" {wait.group(1)}" if wait else ""))
    out: list[str] = []
    for op in ops:
        if out and out[-1].split(" x")[0] == op:
            head, _, n = out[-1].partition(" x")
            out[-1] = f"{head} x{int(n or 1) + 1}"
        else:
            out.append(op)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=363_600, help="query and key tokens per head")
    parser.add_argument("--head-dim", type=int, default=128, choices=tb.HEAD_DIMS)
    parser.add_argument("--variant", action="append", default=[],
                        help="name[:field=value,...] over the tuned KernelConfig (repeatable; default: tuned)")
    parser.add_argument("--kernel", help="FILE:FUNCTION of an attempt with the backend kernel's arguments")
    parser.add_argument("--out", type=Path, help="folder for each variant's SASS/PTX and summary.json")
    args = parser.parse_args()
    shape = LaunchShape(batch=1, heads=2, q_len=args.tokens, kv_len=args.tokens, head_dim=args.head_dim,
                        block_size=128, dtype=torch.bfloat16)
    rows = []
    for name, overrides in map(parse_variant, args.variant or ["tuned"]):
        cfg = dataclasses.replace(tb.TUNED[args.head_dim], **overrides)
        kernel = compile_sm90(shape, cfg, fn=load_kernel(args.kernel))
        sass = kernel.asm["sass"]
        row = {"variant": name, "config": dataclasses.asdict(cfg), **resources(kernel.asm["cubin"]),
               "shared": kernel.metadata.shared,
               "hgmma": sass.count("HGMMA"), "bar_sync": sass.count("BAR.SYNC"), "mufu_ex2": sass.count("MUFU.EX2"),
               "setmaxnreg": sass.count("SETMAXNREG"), "loop": loop_skeleton(sass),
               "sass_sha256": hashlib.sha256(sass.encode()).hexdigest()[:16]}
        rows.append(row)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{name}.sass").write_text(sass)
            (args.out / f"{name}.ptx").write_text(kernel.asm["ptx"])
    if args.out:
        (args.out / "summary.json").write_text(json.dumps({"triton": triton.__version__, "rows": rows}, indent=1))
    print(f"triton {triton.__version__}, sm_90, {args.tokens} tokens, D={args.head_dim}, "
          f"kernel {args.kernel or 'the triton backend'}")
    for row in rows:
        print(f"\n{row['variant']}: {row['reg']} regs, {row['local']} B local, {row['shared']} B shared, "
              f"{row['hgmma']} HGMMA, {row['bar_sync']} BAR.SYNC, {row['mufu_ex2']} MUFU.EX2, "
              f"{row['setmaxnreg']} SETMAXNREG, SASS {row['sass_sha256']}")
        print("  main loop: " + " | ".join(row["loop"]))


if __name__ == "__main__":
    main()
