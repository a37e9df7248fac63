#!/usr/bin/env bash
# The simulated table of issue 38 item 5 on one H200 host: masks built on its GPU, simulated on its CPUs. From the
# repository root, with the ray/hydra/mlflow bundle staged (../../../../shared/device/README.md):
#
#   OUT=<folder> bash benchmarks/results/beyond-sim/run.sh STEP [KEY=VALUE ...]   # sim: Hydra overrides of each run
#
#   validate  the simulator against Nsight Compute on the H200's FA4 Table I rows (363,600 tokens x 40 heads, five
#             masks, original and WaveAlign): validate-sim rebuilds each measured cell and simulates it      ~3 min
#   sim       sweep=beyond_sim's cells (run_in_process.py), one process per GPU type side by side, each building
#             its masks on the GPU once and simulating its cells on a CPU core                                ~6 min
#
# Each step writes OUT/<step>/: gpu.txt (nvidia-smi), <step>.log, and for sim the run roots' results/ as
# runroot-<gpu>.tar (the device's transfer refuses the Parquet folders' names); then, on the CPU:
#   python benchmarks/results/beyond-sim/table.py --validation DIR/validation.csv RUN_ROOT... \
#     --out benchmarks/results/beyond-sim
set -u
step=${1:-}
shift
OUT=${OUT:-/tmp/beyond-sim-out}
mkdir -p "$OUT/$step"
export PYTHONUNBUFFERED=1 WAVEALIGN_GIT_SHA=${WAVEALIGN_GIT_SHA:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$OUT/$step/gpu.txt" 2>&1
here=benchmarks/results/beyond-sim

case "$step" in
  validate)
    rm -rf /tmp/t1 && mkdir -p /tmp/t1 && cp -r benchmarks/results/table1-fa4-h200/results-ncu /tmp/t1/results
    timeout 540 python3 lab/validate_sim.py /tmp/t1 --out "$OUT/$step" > "$OUT/$step/$step.log" 2>&1
    echo "validate-sim rc=$?"
    tail -n 12 "$OUT/$step/$step.log" ;;
  sim)
    # one process per GPU type: the A40's cells run FlashInfer at 128-token blocks, the others FA4
    for gpu in h200 h100 b200 a40; do
      if [ "$gpu" = a40 ]; then
        args=('grid.hardware=[a40]' 'grid.backend=[flashinfer]' 'grid.block_size=128'
              'extra_grids.orders.hardware=[a40]' 'extra_grids.orders.backend=[flashinfer]'
              'extra_grids.orders.block_size=128' '~extra_grids.a40' '~extra_grids.a40_orders')
      else
        args=("grid.hardware=[$gpu]" "extra_grids.orders.hardware=[$gpu]" '~extra_grids.a40' '~extra_grids.a40_orders')
      fi
      rm -rf "/tmp/bs-$gpu"
      timeout 540 python3 "$here/run_in_process.py" "/tmp/bs-$gpu" "${args[@]}" "$@" > "$OUT/$step/$step-$gpu.log" 2>&1 &
    done
    wait
    for gpu in h200 h100 b200 a40; do
      tail -n 6 "$OUT/$step/$step-$gpu.log"
      tar -C "/tmp/bs-$gpu" -cf "$OUT/$step/runroot-$gpu.tar" results
    done ;;
  *)
    echo "run.sh: step '$step'; expected one of validate, sim" >&2
    exit 2 ;;
esac
