#!/usr/bin/env bash
# Issue 38 on one H200: the seven mask families against every exact launch order (sweep=beyond_h200), and the
# whole model on a new family. One step per device call, each under 9 minutes; from the repository root, with
# FA4, ray/hydra/mlflow-skinny and diffusers staged (../fa4-flashinfer/host_env.sh, ../../../../shared/device/):
#
#   OUT=<folder> bash benchmarks/results/beyond-h200/run.sh STEP [KEY=VALUE ...]
#
#   gpu-tests  pytest -m gpu on the modules this issue touched                                        ~2 min
#   t364       sweep=beyond_h200's timed cells at 363,600 tokens x 40 heads (grid + orders)           ~8 min
#   t148       the same at 147,600 tokens, then Nsight Compute on four heads (ncu + ncu_orders)       ~7 min
#   e2e        bench-e2e at 401 frames (363,600 tokens), all 40 blocks, original vs WaveAlign, the
#              estimator live, for each of METHODS (default: xattention vsa radial)                   ~2-4 min/method
#
# Each step writes OUT/<step>/: gpu.txt (nvidia-smi), <step>.log, and a sweep's results/ and sweeps/ as runroot.tar
# (the device's transfer refuses the Parquet folders' names); then, on the CPU:
#   python benchmarks/results/beyond-h200/table.py OUT/t364 OUT/t148 > benchmarks/results/beyond-h200/table.md
set -u
step=${1:-}
shift
extra=("$@")  # further overrides of sweep=beyond_h200 (t364, t148), e.g. grid.reps=3 extra_grids.orders.reps=3
OUT=${OUT:-/tmp/beyond-out}
mkdir -p "$OUT/$step"
export PYTHONUNBUFFERED=1 WAVEALIGN_GIT_SHA=${WAVEALIGN_GIT_SHA:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
cli=(python3 -m jobs.cli)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader \
  > "$OUT/$step/gpu.txt" 2>&1

sweep() {  # seconds allowed, then overrides of sweep=beyond_h200
  local limit=$1 root=/tmp/beyond-$step
  shift
  timeout "$limit" "${cli[@]}" sweep sweep=beyond_h200 "$@" "run_root=$root" mlflow.enabled=false progress=false \
    >> "$OUT/$step/$step.log" 2>&1
  echo "sweep rc=$?"
  tail -n 30 "$OUT/$step/$step.log"
  tar -C "$root" -cf "$OUT/$step/runroot.tar" results sweeps
}

case "$step" in
  gpu-tests)
    timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_masks_video.py tests/test_masks_svg2.py \
      tests/test_reorderers_static.py tests/test_reorder.py tests/test_block_gather.py tests/test_kernels_gpu.py \
      > "$OUT/$step/pytest_gpu_h200.txt" 2>&1
    echo "pytest rc=$?"
    tail -n 15 "$OUT/$step/pytest_gpu_h200.txt" ;;
  t364)
    sweep "${SWEEP_LIMIT:-560}" 'grid.seq_k=[364]' 'extra_grids.orders.seq_k=[364]' '~extra_grids.ncu' '~extra_grids.ncu_orders' \
      "${extra[@]}" ;;
  t148)
    sweep "${SWEEP_LIMIT:-560}" 'grid.seq_k=[148]' 'extra_grids.orders.seq_k=[148]' "${extra[@]}" ;;
  e2e)
    for method in ${METHODS:-xattention vsa radial}; do
      timeout "${E2E_LIMIT:-280}" python3 lab/bench_e2e.py --frames 401 --method "$method" --variants never,always \
        --forwards 1 --out "$OUT/$step/e2e_${method}_363600.json" > "$OUT/$step/e2e_$method.log" 2>&1
      echo "bench-e2e $method rc=$?"
      tail -n 12 "$OUT/$step/e2e_$method.log"
    done ;;
  *)
    echo "run.sh: step '$step'; expected one of gpu-tests, t364, t148, e2e" >&2
    exit 2 ;;
esac
