#!/usr/bin/env bash
# reorder.plan on the H200, today's path (BASE, a tree of commit fb2f6e0) beside the packed int8 path (NEW), in one
# run: first the GPU tests of the new path, then `wavealign bench-reorder` alternately on both trees, then where the
# new plan's time goes. Usage: BASE=dir NEW=dir bash run_h200.sh   (results in $OUT)
set -u
here=$(cd "$(dirname "$0")" && pwd)
(cd "$NEW" && PYTHONPATH=$NEW python -m pytest -q -p no:cacheprovider tests/test_kernels_gpu.py \
    -k "plan or stage1 or nnz or temporal" 2>&1 | tail -4) > "$OUT/pytest_gpu.txt"; tail -1 "$OUT/pytest_gpu.txt"
# the command's module is jobs.bench_reorder since the package rename, jobs.bench_reorder before it
BENCH='import sys
try:
    from jobs.bench_reorder import main
except ImportError:
    from jobs.bench_reorder import main
sys.exit(main(sys.argv[1:]))'
bench() {  # tree label heads mask stages (run inside the tree, so its own packages are imported)
    (cd "$1" && PYTHONPATH=$1 python -c "$BENCH" \
        --device cuda --heads "$3" --blocks 2841 --mask "$4" --stages "$5" --repeats 50 \
        --out "$OUT/plan/$2_$3h_$4_$5.json")
}
mkdir -p "$OUT/plan"
for round in 1 2; do
    for heads in 40 8; do
        for tree in base new; do
            root=BASE; [ $tree = new ] && root=NEW
            bench "${!root}" "$tree-r$round" "$heads" random both
        done
    done
done
for tree in base new; do
    root=BASE; [ $tree = new ] && root=NEW
    bench "${!root}" "$tree" 40 planted both
    bench "${!root}" "$tree" 40 random spatial
    bench "${!root}" "$tree" 40 random temporal
done
(cd "$NEW" && PYTHONPATH=$NEW python "$here/profile_plan.py" 40) > "$OUT/profile_new.txt" 2>&1
grep -E "_kernel |Self CUDA time" "$OUT/profile_new.txt" | cut -c1-56,140-200
# launch shapes of the one-pass pack (32-bit words per program, warps)
(cd "$NEW" && PYTHONPATH=$NEW python - <<'PY'
import torch, triton
from triton.testing import do_bench
from wavealign import stage1_cuda, synthetic
mask = synthetic.random_mask(40, 2841, 2841, 0.25, seed=0, device="cuda")
g, mb, nb = mask.shape
w, wt = -(-nb // 32), -(-mb // 32)
p = torch.empty(g, mb, w, dtype=torch.int32, device="cuda")
pt = torch.empty(g, nb, wt, dtype=torch.int32, device="cuda")
c = torch.zeros(g, nb, device="cuda")
for bw, warps in [(1, 1), (2, 2), (4, 4), (4, 8), (8, 4), (8, 8)]:
    fn = lambda: stage1_cuda._pack_kernel[(wt, triton.cdiv(w, bw), g)](mask.view(torch.uint8), p, pt, c, mb, nb, w,
                                                                       wt, BLOCK_W=bw, num_warps=warps)
    print(f"pack words={bw} warps={warps}: {do_bench(fn, warmup=10, rep=200) * 1e3:.0f} us")
for rows, cols, warps in [(16, 512, 4), (8, 1024, 4), (32, 256, 4), (16, 1024, 8), (4, 2048, 4)]:
    flat = mask.view(torch.uint8).reshape(-1, nb)
    nnz = torch.empty(flat.shape[0], dtype=torch.int32, device="cuda")
    fn = lambda: stage1_cuda._row_nnz_kernel[(triton.cdiv(flat.shape[0], rows),)](flat, nnz, flat.shape[0], nb,
                                                                                   BLOCK_R=rows, BLOCK_C=cols,
                                                                                   num_warps=warps)
    print(f"row_nnz rows={rows} cols={cols} warps={warps}: {do_bench(fn, warmup=10, rep=200) * 1e3:.0f} us")
PY
) | tee "$OUT/shapes.txt"
(cd "$OUT" && tar -czf results.tgz plan profile_new.txt shapes.txt pytest_gpu.txt && rm -rf plan plan_trace.json)
