# Source on the H200 host from the repository root: stages whatever bundle files this call carried into /tmp/stage
# (FA4's parts, the ray/hydra/mlflow-skinny site as devsite.tar.xz, diffusers as dfx.tar.xz; they survive while the
# host stays up), unpacks each once, and sets PYTHONPATH for the steps of run.sh.
mkdir -p /tmp/stage
for part in .fa4/site.tar.xz.part*; do [ -f "$part" ] && cp "$part" /tmp/stage/; done
[ -f .devsite/site.tar.xz ] && cp .devsite/site.tar.xz /tmp/stage/devsite.tar.xz
[ -f .dfx/site.tar.xz ] && cp .dfx/site.tar.xz /tmp/stage/dfx.tar.xz
if [ "$(ls /tmp/stage/site.tar.xz.part* 2>/dev/null | wc -l)" = 3 ]; then
  source benchmarks/results/fa4-flashinfer/host_env.sh
fi
for name in devsite dfx; do
  if [ -f /tmp/stage/$name.tar.xz ] && [ ! -e /tmp/$name/.unpacked ]; then
    mkdir -p /tmp/$name && tar xJf /tmp/stage/$name.tar.xz -C /tmp/$name && touch /tmp/$name/.unpacked
  fi
done
export PYTHONPATH=/tmp/vendor:/tmp/vendor/nvidia_cutlass_dsl/dsl_packages:/tmp/devsite:/tmp/dfx:$PWD
ls /tmp/stage
