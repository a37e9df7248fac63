#!/usr/bin/env bash
# Issue 17 item 2 on one H200: the sweep's GPU-busy fraction with ray.prefetch_inputs off and on, and whether
# prefetching moves the kernel medians. A reduced sweep=h200: 364K tokens x 40 heads only, fa4 and triton,
# flexprefill and spargeattn, original / wavealign / adaptive, reps 20, warm-up 3, no NCU, MLflow off.
#
# From the repository root on the GPU machine, FA4's bundle staged in /tmp/stage (../fa4-flashinfer/host_env.sh)
# and the sweep tools (ray, hydra, mlflow) in /tmp/site or as .devsite/site.tar.xz:
#   OUT=<folder> [BACKENDS=fa4,triton] bash benchmarks/results/sweep-busy-h200/run_h200.sh [off|on|table|all]
# (default: all; BACKENDS=triton needs no FA4 bundle)
# Each sweep takes about 4 minutes of GPU time (12 cells x 23 calls of 0.4-1.2 s, plus start-up and mask builds):
# to stay under a 10-minute command limit, run `off` and `on` as two calls on the same (still warm) machine. Run
# roots stay in /tmp/busy-off and /tmp/busy-on; each call copies those there are to $OUT/off and $OUT/on and prints
# the table of what is there (on a machine that went cold in between, run busy_table.py here on the two copies).
set -u
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/sweep-busy-out}
mkdir -p "$OUT"
source benchmarks/results/fa4-flashinfer/host_env.sh
if [ ! -e /tmp/site/.done ] && [ -e .devsite/site.tar.xz ]; then
  mkdir -p /tmp/site && tar xJf .devsite/site.tar.xz -C /tmp/site && touch /tmp/site/.done
fi
export PYTHONPATH=$PYTHONPATH:/tmp/site
export WAVEALIGN_GIT_SHA=${WAVEALIGN_GIT_SHA:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
GRID=(sweep=h200 'grid.seq_k=[364]' "grid.backend=[${BACKENDS:-fa4,triton}]" '~grid.backend_params.flashinfer'
      'grid.method=[flexprefill,spargeattn]' 'grid.variant=[original,wavealign,adaptive]' grid.reps=20
      grid.warmup=3 grid.ncu=false '~extra_grids.dense_baseline' mlflow.enabled=false progress=false)

sweep() {  # off|on
  local prefetch=false
  [ "$1" = on ] && prefetch=true
  rm -rf "/tmp/busy-$1"  # a fresh run root: nothing resumed, every cell measured in this run
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader \
    > "$OUT/gpu-$1.txt"
  timeout "${SWEEP_TIMEOUT_S:-540}" python3 -m jobs.cli sweep "${GRID[@]}" "ray.prefetch_inputs=$prefetch" \
    "run_root=/tmp/busy-$1" > "$OUT/sweep-$1.log" 2>&1
  echo "sweep prefetch=$prefetch: rc=$?"
  tail -n 6 "$OUT/sweep-$1.log"
}

stream_test() {  # the GPU test of the prefetch stream (seconds), before the sweep that prefetches
  timeout 120 python3 -m pytest -q -p no:cacheprovider -o addopts="" -m gpu tests/test_pipeline.py -k stream \
    2>&1 | tail -n 3
}

case "${1:-all}" in
  off) sweep off ;;
  on) stream_test; sweep on ;;
  all) sweep off; stream_test; sweep on ;;
  table) ;;
  *) echo "usage: run_h200.sh [off|on|table|all]" >&2; exit 2 ;;
esac
for run in off on; do
  [ -d "/tmp/busy-$run/results" ] && mkdir -p "$OUT/$run" && cp -r "/tmp/busy-$run/results" "/tmp/busy-$run/sweeps" "$OUT/$run/"
done
python3 "$here/busy_table.py" /tmp/busy-off /tmp/busy-on --json "$OUT/table.json" | tee "$OUT/table.md"
