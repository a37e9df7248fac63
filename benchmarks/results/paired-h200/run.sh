#!/usr/bin/env bash
# Issue 41 on one H200: sweep=paired_h200 twice (two fresh run roots), each timing the same cells blocked and paired;
# then pytest -m gpu on the modules the paired timing touched. From the repository root, with FA4 and
# ray/hydra/mlflow-skinny staged (source benchmarks/results/beyond-h200/stage.sh):
#
#   OUT=<folder> bash benchmarks/results/paired-h200/run.sh
#
# Writes OUT/run{1,2}/ (sweep log, runroot.tar of results/ and sweeps/), OUT/gpu.txt, OUT/pytest_gpu_h200.txt; then,
# on the CPU: python benchmarks/results/paired-h200/table.py OUT > benchmarks/results/paired-h200/table.md
set -u
OUT=${OUT:-/tmp/paired-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 WAVEALIGN_GIT_SHA=${WAVEALIGN_GIT_SHA:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader \
  > "$OUT/gpu.txt" 2>&1
for run in run1 run2; do
  mkdir -p "$OUT/$run"
  timeout "${SWEEP_LIMIT:-240}" python3 -m jobs.cli sweep sweep=paired_h200 "run_root=/tmp/paired-$run" \
    mlflow.enabled=false progress=false "$@" > "$OUT/$run/sweep.log" 2>&1
  echo "$run rc=$?"
  tail -n 25 "$OUT/$run/sweep.log"
  tar -C "/tmp/paired-$run" -cf "$OUT/$run/runroot.tar" results sweeps
done
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_state.py tests/test_pipeline.py \
  tests/test_measure.py > "$OUT/pytest_gpu_h200.txt" 2>&1
echo "pytest rc=$?"
tail -n 6 "$OUT/pytest_gpu_h200.txt"
