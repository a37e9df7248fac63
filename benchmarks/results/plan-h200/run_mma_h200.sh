#!/usr/bin/env bash
# Round 2 of reorder.plan on the H200: stage1.cu (CUDA packing, one persistent mma.sync product kernel, the plan as one
# CUDA graph; NEW, this tree) beside the Triton int8 path it replaces (BASE, a tree of commit ec40399), in one run: the
# GPU tests of the plan first, then `wavealign bench-reorder` alternately on both trees (two rounds), then where the
# new plan's time goes (breakdown_mma.py, profile_plan.py).
# Usage: BASE=dir NEW=dir bash run_mma_h200.sh   (results in $OUT)
set -u
here=$(cd "$(dirname "$0")" && pwd)
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'nvrtc compile:', hasattr(torch.cuda, '_compile_kernel'))"
(cd "$NEW" && PYTHONPATH=$NEW timeout 300 python -m pytest -q -p no:cacheprovider tests/test_kernels_gpu.py \
    -k "plan or stage1 or nnz or temporal or pack" 2>&1 | tail -15) > "$OUT/pytest_gpu_mma.txt"
tail -3 "$OUT/pytest_gpu_mma.txt"
bench() {  # tree-dir label heads mask stages
    (cd "$1" && PYTHONPATH=$1 timeout 120 python -m jobs.cli bench-reorder \
        --device cuda --heads "$3" --blocks 2841 --mask "$4" --stages "$5" --repeats 50 \
        --out "$OUT/plan_mma/$2_$3h_$4_$5.json" | tail -1)
}
mkdir -p "$OUT/plan_mma"
for round in 1 2; do
    for heads in 40 8; do
        for tree in base new; do
            root=BASE; [ $tree = new ] && root=NEW
            echo "$tree r$round $heads heads: $(bench "${!root}" "$tree-r$round" "$heads" random both)"
        done
    done
done
for tree in base new; do
    root=BASE; [ $tree = new ] && root=NEW
    echo "$tree planted 40: $(bench "${!root}" "$tree" 40 planted both)"
    echo "$tree spatial 40: $(bench "${!root}" "$tree" 40 random spatial)"
done
(cd "$NEW" && PYTHONPATH=$NEW timeout 60 python "$here/breakdown_mma.py" 40) > "$OUT/breakdown_mma.txt" 2>&1
head -7 "$OUT/breakdown_mma.txt"
(cd "$NEW" && PYTHONPATH=$NEW timeout 120 python "$here/profile_plan.py" 40) > "$OUT/profile_mma.txt" 2>&1
grep -E "stage1_products|pack_mask|row_nnz|_kernel |Self CUDA time" "$OUT/profile_mma.txt" | cut -c1-56,140-200
tail -1 "$OUT/profile_mma.txt" | cut -c1-120
rm -f "$OUT/plan_trace.json"
(cd "$OUT" && tar -czf plan_mma.tgz plan_mma && rm -rf plan_mma)
