#!/usr/bin/env bash
# Container entrypoint of the WaveAlign image. The first argument picks the role:
#   head [RAY_START_ARGS...]             ray start --head on 6379 (dashboard/job API on 8265), in the foreground
#   worker HEAD:PORT [RAY_START_ARGS...] ray start --address=HEAD:PORT in the foreground; Ray labels A40/H100/H200
#                                        GPUs itself (ray.io/accelerator-type), for others add
#                                        --labels accelerator-type=H100
#   wavealign ARGS...                    the CLI, e.g. `wavealign sweep sweep=paper_h100 ray.address=auto`
#   anything else                        run as given (bash, python, ...), as `ray up` and KubeRay expect
# In a container of its own network (KubeRay pods, Docker's default bridge) Ray's default ports are free. On a host
# network another Ray shares (`docker run --network host`), give the README's shared-host port options after the
# role: a later option wins over the one above, e.g.
#   head --port=6380 --dashboard-port=8266 --ray-client-server-port=10011 --dashboard-agent-listen-port=52366
#   worker HEAD:6380 --dashboard-agent-listen-port=52367
# With no argument the image's CMD (`wavealign --help`) runs.
set -euo pipefail

role="${1:-}"
case "${role}" in
  head)
    shift
    exec ray start --head --port=6379 --dashboard-host=0.0.0.0 --block "$@"
    ;;
  worker)
    shift
    if [[ $# -lt 1 ]]; then
      echo "wavealign-entrypoint: 'worker' needs the head's address (HEAD:PORT) as its first argument" >&2
      exit 2
    fi
    address="$1"
    shift
    exec ray start --address="${address}" --block "$@"
    ;;
  *)
    exec "$@"
    ;;
esac
