#!/usr/bin/env bash
# Issue 40 on one H200: the same cells through the sweep before the second redesign (c28f7ec) and after it
# (redesign-h200/same_figures.py, two rounds), then pytest -m gpu on the modules the redesign touched, in the
# after-checkout. From the repository root, with FA4 and ray/hydra/mlflow-skinny staged
# (source benchmarks/results/beyond-h200/stage.sh) and the two checkouts beside it:
#
#   mkdir -p .devold/before .devold/after
#   git archive c28f7ec wavealign orchestrator jobs analysis conf pyproject.toml | tar -x -C .devold/before
#   git archive <after> wavealign orchestrator jobs analysis conf pyproject.toml tests | tar -x -C .devold/after
#   OUT=<folder> bash benchmarks/results/redesign2-h200/run.sh
set -u
OUT=${OUT:-/tmp/redesign2-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader \
  > "$OUT/gpu.txt" 2>&1
timeout "${SAME_LIMIT:-420}" python3 benchmarks/results/redesign-h200/same_figures.py .devold/before .devold/after \
  --rounds 2 --out "$OUT/same_figures.json" > "$OUT/same_figures.txt" 2> "$OUT/same_figures.log"
echo "same_figures rc=$?"
cat "$OUT/same_figures.txt"
(cd .devold/after && PYTHONPATH=$PWD:$PYTHONPATH timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider \
  tests/test_pipeline.py tests/test_measure.py tests/test_reorderers_static.py tests/test_integrations_diffusers.py \
  > "$OUT/pytest_gpu_h200.txt" 2>&1)
echo "pytest rc=$?"
tail -n 6 "$OUT/pytest_gpu_h200.txt"
