#!/usr/bin/env bash
# The H200 call behind this folder: GPU tests, the kernel benchmark grid, then tuning round 3.
# Run from the repository root on the GPU machine: OUT=<folder> bash benchmarks/results/kernels-h200/run_h200.sh
# It calls the older bench-kernels (`python -m jobs.bench_kernels --out ...`, up to e879fcf: check that out to
# repeat it, as README.md's note says); today's is `wavealign bench-kernels`, the sweep sweep=kernels.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-h200-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/tune_log.txt"
timeout 100 python3 -m pytest -q -m gpu tests/test_kernels_gpu.py -p no:cacheprovider -o addopts="" \
    > "$OUT/pytest_gpu.txt" 2>&1
tail -3 "$OUT/pytest_gpu.txt"
timeout 260 python3 -m jobs.bench_kernels --out "$OUT/bench" --heads 4 --reps 3 --ncu-timeout-s 90 \
    > "$OUT/bench_log.txt" 2>&1
echo "bench rc=$?"
timeout 80 python3 benchmarks/results/kernels-h200/tune_triton.py --out /tmp/tune --parts fastplan2,evict \
    >> "$OUT/tune_log.txt" 2>&1
grep -A40 "== summary" "$OUT/tune_log.txt" | cut -c1-200
tail -62 "$OUT/bench_log.txt" | cut -c1-200
