# Run on the lent H200 from the repository root, after the FA4 + FlashInfer bundle's parts are staged in
# /tmp/stage (benchmarks/results/fa4-flashinfer/host_env.sh) and .devsite / .devold carried along.
#   step 1: GPU tests and the old-vs-new path comparison; step 2: bench-kernels through the sweep, with NCU.
set -e
source benchmarks/results/fa4-flashinfer/host_env.sh
mkdir -p /tmp/site && [ -e /tmp/site/.done ] || { tar xJf .devsite/site.tar.xz -C /tmp/site && touch /tmp/site/.done; }
export PYTHONPATH=$PYTHONPATH:/tmp/site WAVEALIGN_GIT_SHA=${WAVEALIGN_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
if [ "$1" = 1 ]; then
  mkdir -p /tmp/old && tar xf .devold/old.tar -C /tmp/old
  python -m pytest -q -p no:cacheprovider tests/test_kernels_gpu.py tests/test_kernels_fa4_flashinfer.py \
    tests/test_kernels_triton.py tests/test_skip.py 2>&1 | tail -15
  python benchmarks/results/one-pipeline-h200/compare_paths.py --old /tmp/old --out "$OUT/compare.json"
else
  python -m jobs.cli bench-kernels grid.backend=[triton,flex,fa4,flashinfer] grid.method=[random,planted] \
    grid.seq_k=[147.6] grid.variant=[original,wavealign] grid.ncu=true \
    extra_grids.dense.backend=[triton,flex,fa4,flashinfer,sdpa] extra_grids.dense.seq_k=[147.6] \
    mlflow.enabled=false progress=false run_root=/tmp/runs 2>&1 | tail -40
  tar czf "$OUT/runs.tgz" -C /tmp runs
  # issue 12, item 6: the simulator against the Table I NCU run, each measured cell run again on backend sim
  mkdir -p /tmp/t1 && cp -r benchmarks/results/table1-fa4-h200/results-ncu /tmp/t1/results
  python -m jobs.cli validate-sim /tmp/t1 --out "$OUT/table1-validation" 2>&1 | tail -12
fi
