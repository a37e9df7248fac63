#!/usr/bin/env bash
# Issue 30 on one H200: the scene generator fitted at 363,600 tokens and Table I measured for both generators side by
# side, with dense and the iid random control under Nsight Compute. One step per device call, each under 9 minutes;
# from the repository root, wavealign importable (PYTHONPATH) with FA4 and ray/hydra/mlflow-skinny staged
# (../fa4-flashinfer/host_env.sh, ../../../../shared/device/README.md):
#
#   OUT=<folder> bash benchmarks/results/scene-workload-h200/run.sh STEP
#
# in this order (times: estimates from the 2026-11-30 Table I run, 35-57 s per timed group and 75-116 s per NCU
# group of two cells, and the cluster generator's 177 s fit):
#   controls   dense (original order) and the iid random control (original, WaveAlign), timed + NCU      ~5 min
#              then here, on the CPU (~4 min): python benchmarks/results/scene-workload-h200/table.py settings
#              OUT/controls  -> the CAL_FLAGS line (L2 target, simulated GPU and row jitter) for the next step
#   calibrate  CAL_FLAGS='...' : calibrate-workload --generator scene, fitted and verified at seed 0: 240
#              sampled heads (2 settings x 5 types x 12 candidates x 2) + 3 x 40 verified, their L2
#              simulated                                                                        ~7 min (417 s)
#              then commit OUT/calibrate/scene.yaml as wavealign/workloads/scene.yaml (the steps below need it)
#   robust     the fitted scene.yaml's densities over seeds 1-4 x the same 3 (layer, step) pairs (480 heads;
#              --density-only: the simulated L2 of 96 launches took over 4 minutes, and the spread asked is density's)
#              ~1.5 min
#   scene-a    Table I sweep on the scene workload: MInference, FlexPrefill, timed + NCU                 ~4 min
#   scene-b    the same for XAttention, SpargeAttn                                                         ~4 min
#   clusters   the cluster generator's four methods and the iid random control in the same session, timed
#              (MEASURE=ncu: +NCU, ~8 min; split with METHODS=... as scene-a/b)                          ~3 min
#   profile    the skip profile's method-mask half (sweep=h200_profile_methods, 50 cells) on today's default
#              workload; its other half (sweep=h200_profile: planted and random masks, no generator) is in
#              ../skip-profile-h200-refresh/results. Then, on the CPU, one run root with both and
#              `wavealign refresh-profiles hardware=h200 run_root=<it>`: its evaluation gives the refit's accuracy
#              and regret, and the installed profile's regret on the same cells                           ~1.5 min
# and the committed table, on the CPU: python benchmarks/results/scene-workload-h200/table.py table OUT/controls
#   OUT/scene-a OUT/scene-b OUT/clusters --l2-target <the settings step's> > .../table.md
#
# Each step writes OUT/<step>/: gpu.txt (nvidia-smi), <step>.log, and the sweep's results/ and sweeps/ (Parquet, one
# row per cell) as runroot.tar (the device's transfer refuses the Parquet folders' names, hardware=h200; extract
# it into OUT/<step>/ for table.py) or calibrate-workload's files (samples.csv, verify.csv, fit.json, scene.yaml, summary.md, verify.json).
# Sizing knobs (calibrate): SEARCH (--search items), SHARPNESS, NOISE, REPLICATES; robust: SEEDS.
set -u
step=${1:-}
OUT=${OUT:-/tmp/scene-workload-out}
mkdir -p "$OUT/$step"
export PYTHONUNBUFFERED=1 WAVEALIGN_GIT_SHA=${WAVEALIGN_GIT_SHA:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
cli=(python3 -m jobs.cli)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader \
  > "$OUT/$step/gpu.txt" 2>&1
VERIFY_AT=20:25,5:10,35:40  # mid, early and late (layer, step): the robustness pairs

sweep() {  # run root name, then overrides of sweep=table1_fa4
  local root=/tmp/scene-$1
  shift
  rm -rf "$root"  # a fresh run root: every cell measured in this call
  timeout 530 "${cli[@]}" sweep sweep=table1_fa4 "$@" "run_root=$root" mlflow.enabled=false progress=false \
    > "$OUT/$step/$step.log" 2>&1
  echo "sweep rc=$?"
  tail -n 16 "$OUT/$step/$step.log"
  tar -C "$root" -cf "$OUT/$step/runroot.tar" results sweeps
}

need_scene_yaml() {  # the scene steps measure the fitted generator, never its hand-set values
  if [ ! -e wavealign/workloads/scene.yaml ]; then
    echo "run.sh $step: wavealign/workloads/scene.yaml is missing; expected the calibrate step's scene.yaml there" >&2
    exit 2
  fi
}

case "$step" in
  controls)
    sweep controls 'grid.method=[random]' 'grid.measure=[ncu]' 'extra_grids.dense.measure=[ncu]' ;;
  calibrate)
    if [ -z "${CAL_FLAGS:-}" ]; then
      echo "run.sh calibrate: CAL_FLAGS is empty; expected table.py settings' line from the controls run" >&2
      exit 2
    fi
    # shellcheck disable=SC2086  # CAL_FLAGS and SEARCH are lists of flags
    timeout 530 python3 lab/calibrate_workload.py --generator scene --device cuda --out "$OUT/calibrate" $CAL_FLAGS \
      ${SEARCH:---search ground_sharpness=0.2,0.4} \
      --sharpness "${SHARPNESS:-0.5,0.7,1,1.4,2,2.8}" --noise "${NOISE:-0.1,0.35}" --replicates "${REPLICATES:-2}" \
      --verify-at "$VERIFY_AT" \
      > "$OUT/$step/$step.log" 2>&1
    echo "calibrate_workload rc=$?"
    tail -n 24 "$OUT/$step/$step.log" ;;
  robust)
    need_scene_yaml
    # shellcheck disable=SC2086
    timeout 530 python3 lab/calibrate_workload.py --generator scene --device cuda --out "$OUT/robust" \
      --verify-config wavealign/workloads/scene.yaml --verify-seeds "${SEEDS:-1,2,3,4}" --verify-at "$VERIFY_AT" \
      --density-only > "$OUT/$step/$step.log" 2>&1
    echo "calibrate_workload rc=$?"
    tail -n 24 "$OUT/$step/$step.log" ;;
  scene-a|scene-b)
    need_scene_yaml
    methods=minference,flexprefill
    [ "$step" = scene-b ] && methods=xattention,spargeattn
    sweep "$step" '~extra_grids.dense' "grid.method=[$methods]" 'grid.workload=[wan14b-720p]' \
      'grid.measure=[ncu]' ;;
  profile)
    root=/tmp/scene-profile
    rm -rf "$root"
    timeout 530 "${cli[@]}" sweep sweep=h200_profile_methods "run_root=$root" mlflow.enabled=false progress=false \
      > "$OUT/$step/$step.log" 2>&1
    echo "sweep rc=$?"
    tail -n 8 "$OUT/$step/$step.log"
    tar -C "$root" -cf "$OUT/$step/runroot.tar" results sweeps ;;
  clusters)
    sweep clusters '~extra_grids.dense' "grid.method=[${METHODS:-random,minference,flexprefill,xattention,spargeattn}]" \
      'grid.workload=[wan14b-720p-clusters]' "grid.measure=[${MEASURE:-timed}]" ;;
  *)
    echo "run.sh: step '$step'; expected one of controls, calibrate, robust, scene-a, scene-b, clusters, profile" >&2
    exit 2 ;;
esac
