# Source on the H200 host, from the repository root, after the bundle's parts are staged in /tmp/stage:
# joins them once into /tmp/vendor and sets the environment the FA4/FlashInfer runs share (PLAN.md, step 3).
if [ ! -e /tmp/vendor/.joined ]; then
  mkdir -p /tmp/vendor && cat /tmp/stage/site.tar.xz.part* | tar xJf - -C /tmp/vendor && touch /tmp/vendor/.joined
fi
# cutlass is put on sys.path by a .pth file, which PYTHONPATH does not read: name its folder too
export PYTHONPATH=/tmp/vendor:/tmp/vendor/nvidia_cutlass_dsl/dsl_packages:$PWD
# FlashInfer's JIT builds and FA4's compiled kernels persist in /tmp/stage while the host stays up
export FLASHINFER_WORKSPACE_BASE=/tmp/stage
export FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/tmp/stage/fa4-cache
export PYTHONUNBUFFERED=1
