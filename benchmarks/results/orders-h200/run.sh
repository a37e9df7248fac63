#!/usr/bin/env bash
# Issue 47 on one H200: every exact launch order and the chooser's pick (sweep=orders_h200) under both kinds of tile
# scheduler, the simulator's static path against it, and the B200/H100 bands. From the repository root:
#
#   OUT=<folder> bash benchmarks/results/orders-h200/run.sh STEP [KEY=VALUE ...]
#
#   stage    copy whatever this call carried (.stage/p0|p1|p2 FA4 wheel parts, .stage/small wheels, .devsite,
#            .stage/dif's diffusers wheel) into /tmp/stage; once all are there, install FA4 into /tmp/fa4, unpack
#            ray/hydra/mlflow into /tmp/site and install diffusers there
#   t364     the timed cells at 363,600 tokens x 40 heads: FA4 and triton-static, every candidate and auto
#   t148     the same at 147,600 tokens, then Nsight Compute on four heads of every triton-static candidate
#   f148     FA4's cells alone at 147,600 tokens, timed to the sweep's own stopping rule (5 rounds at least, then until
#            each interval is within +-0.5 % or 3 s per cell are spent), on the five families whose picks t148's 3
#            rounds left unresolved (VSA and SVG2 were resolved)
#   h100     where an H100 is lent instead: FA4's cells on it at 363,600 tokens (SEQ_K=148: 147,600), every candidate
#            and auto, timed as t364: the measured check of the H100 bands
#   bands    the simulator at 40 heads: B200 (FA4 SM100) and H100 (FA4 SM90) at 363,600 tokens, every candidate, one
#            or two L2 partitions, exposed-HBM share 0.1-0.4; and the H200 triton-static predictions at 147,600
#   pairing  FA4 with 256-row sparse Q blocks on SM90: the kernel's adjacent pairing and the chooser's, against
#            128-row blocks in the same order (pairing_sm90.py; KEY=VALUE: its --methods, --seq-k)
#   e2e      the whole model: bench-e2e of Wan2.1-14B at 363,600 tokens, all 40 blocks, the original order and auto
#            (METHOD=radial by default; VARIANTS=never,auto)
#   tests    pytest -m gpu on the modules issue 47 touched
#
# Each step writes OUT/<step>.log and, for a sweep, OUT/<step>.tar (its results/ and sweeps/: the device's transfer
# refuses the Parquet folders' names); then, here: python benchmarks/results/orders-h200/table.py ...
set -u
step=${1:-}
shift
extra=("$@")
OUT=${OUT:-/tmp/orders-out}
mkdir -p "$OUT" /tmp/stage
export PYTHONUNBUFFERED=1 WAVEALIGN_GIT_SHA=${WAVEALIGN_GIT_SHA:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/tmp/stage/fa4-cache
export PYTHONPATH=/tmp/fa4:/tmp/fa4/nvidia_cutlass_dsl/python_packages:/tmp/fa4/nvidia_cutlass_dsl/dsl_packages:/tmp/site:$PWD
cli=(python3 -m jobs.cli)

sweep() {  # seconds allowed, then overrides of sweep=orders_h200
  local limit=$1 root=/tmp/orders-$step
  shift
  timeout "$limit" "${cli[@]}" sweep sweep=orders_h200 "$@" "run_root=$root" mlflow.enabled=false progress=false \
    >> "$OUT/$step.log" 2>&1
  echo "sweep rc=$?"
  tail -n 25 "$OUT/$step.log"
  tar -C "$root" -cf "$OUT/$step.tar" results sweeps
}
timed=(grid.reps=3 extra_grids.orders.reps=3 extra_grids.static.reps=3 extra_grids.static_orders.reps=3
       '+grid.measure_params.timed.budget_s=0.5' '+extra_grids.orders.measure_params.timed.budget_s=0.5'
       '+extra_grids.static.measure_params.timed.budget_s=0.5'
       '+extra_grids.static_orders.measure_params.timed.budget_s=0.5')
lengths() {  # the timed grids at one length
  echo "grid.seq_k=[$1]" "extra_grids.orders.seq_k=[$1]" "extra_grids.static.seq_k=[$1]" \
    "extra_grids.static_orders.seq_k=[$1]"
}

case "$step" in
  stage)
    for f in .stage/p0/* .stage/p1/* .stage/p2/* .stage/small/* .stage/small2/* .stage/dif/* .devsite/site.tar.xz; do
      [ -f "$f" ] && cp "$f" /tmp/stage/
    done
    ls /tmp/stage
    if [ -f /tmp/stage/site.tar.xz ] && [ ! -e /tmp/site/.unpacked ]; then
      mkdir -p /tmp/site && tar xJf /tmp/stage/site.tar.xz -C /tmp/site && touch /tmp/site/.unpacked
    fi
    if ls /tmp/stage/cu12.part0[0-2] >/dev/null 2>&1 && [ "$(ls /tmp/stage/cu12.part* | wc -l)" = 3 ] \
        && [ -f /tmp/stage/flash_attn_4-4.0.0b36-py3-none-any.whl ] && [ ! -e /tmp/fa4/.installed ]; then
      cat /tmp/stage/cu12.part0* > /tmp/stage/nvidia_cutlass_dsl_libs_cu12-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
      python3 -m pip install -q --no-deps --no-index --no-compile --target /tmp/fa4 /tmp/stage/*.whl \
        && touch /tmp/fa4/.installed
    fi
    if ls /tmp/stage/diffusers-*.whl >/dev/null 2>&1 && [ ! -d /tmp/site/diffusers ]; then  # for e2e (.stage/dif)
      python3 -m pip install -q --no-deps --no-index --no-compile --target /tmp/site /tmp/stage/diffusers-*.whl
    fi
    python3 -c "import flash_attn.cute, ray, hydra, mlflow; print('staged: fa4, ray, hydra, mlflow')" 2>&1 | tail -1 ;;
  t364)
    sweep "${SWEEP_LIMIT:-570}" $(lengths 364) '~extra_grids.ncu_static' '~extra_grids.ncu_static_orders' \
      "${timed[@]}" "${extra[@]}" ;;
  t148)
    sweep "${SWEEP_LIMIT:-570}" $(lengths 148) "${timed[@]}" "${extra[@]}" ;;
  f148)
    unresolved='[xattention,spargeattn,minference,flexprefill,radial]'
    sweep "${SWEEP_LIMIT:-570}" 'grid.seq_k=[148]' 'extra_grids.orders.seq_k=[148]' '~extra_grids.static' \
      "grid.method=$unresolved" "extra_grids.orders.method=$unresolved" \
      '~extra_grids.static_orders' '~extra_grids.ncu_static' '~extra_grids.ncu_static_orders' \
      '+grid.measure_params.timed.budget_s=3' '+extra_grids.orders.measure_params.timed.budget_s=3' "${extra[@]}" ;;
  h100)
    sweep "${SWEEP_LIMIT:-570}" 'grid.hardware=[h100]' 'extra_grids.orders.hardware=[h100]' \
      "grid.seq_k=[${SEQ_K:-364}]" "extra_grids.orders.seq_k=[${SEQ_K:-364}]" \
      '~extra_grids.static' '~extra_grids.static_orders' '~extra_grids.ncu_static' '~extra_grids.ncu_static_orders' \
      grid.reps=3 extra_grids.orders.reps=3 \
      '+grid.measure_params.timed.budget_s=0.5' '+extra_grids.orders.measure_params.timed.budget_s=0.5' "${extra[@]}" ;;
  bands)
    timeout "${BANDS_LIMIT:-570}" python3 benchmarks/results/orders-h200/bands.py "$OUT" "${extra[@]}" > "$OUT/bands.log" 2>&1
    echo "bands rc=$?"
    tail -n 20 "$OUT/bands.log" ;;
  pairing)
    timeout "${PAIRING_LIMIT:-400}" python3 benchmarks/results/orders-h200/pairing_sm90.py "$OUT/pairing_sm90.csv" \
      "${extra[@]}" > "$OUT/pairing.log" 2>&1
    echo "pairing rc=$?"
    tail -n 10 "$OUT/pairing.log" ;;
  e2e)
    # an H100's 80 GB holds the 14B model and a 364K layer only with the allocator's segments expandable
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout "${E2E_LIMIT:-570}" python3 lab/bench_e2e.py --frames 401 --method "${METHOD:-radial}" \
      --variants "${VARIANTS:-never,auto}" --forwards 1 --out "$OUT/e2e_${METHOD:-radial}_363600.json" \
      > "$OUT/e2e_${METHOD:-radial}.log" 2>&1
    echo "e2e rc=$?"
    tail -n 12 "$OUT/e2e_${METHOD:-radial}.log" ;;
  tests)
    timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_kernels_gpu.py tests/test_order_chooser.py \
      tests/test_kernels_triton.py tests/test_reorder.py tests/test_integrations_diffusers.py \
      tests/test_background_choice.py tests/test_sim.py > "$OUT/pytest_gpu.txt" 2>&1
    echo "pytest rc=$?"
    tail -n 15 "$OUT/pytest_gpu.txt" ;;
  *)
    echo "run.sh: step '$step'; expected one of stage, t364, t148, f148, h100, bands, pairing, e2e, tests" >&2
    exit 2 ;;
esac
