# syntax=docker/dockerfile:1
# WaveAlign image: the library, the sweep orchestrator and the `wavealign` CLI on CUDA 13, for Ray head and
# GPU worker nodes alike (deploy/kuberay/, deploy/ray-up/). Build from the repository root:
#   docker build -t wavealign:0.1.0 .
# The test suite lints this file (hadolint) and checks its pins against pyproject.toml; it is not built in CI.

ARG CUDA_VERSION=13.0.1
# devel, not runtime: FlashInfer JIT-compiles its kernels with nvcc on first use, so nvcc stays in the image.
ARG BASE_IMAGE=nvidia/cuda:${CUDA_VERSION}-cudnn-devel-ubuntu24.04

# ---- base: CUDA toolkit + Python, shared by both stages so the venv's interpreter path is identical ----
FROM ${BASE_IMAGE} AS base
ARG PYTHON_VERSION=3.12
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Ubuntu 24.04 ships Python 3.12 itself; -dev for Triton/FlashInfer JIT builds that include Python.h
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        "python${PYTHON_VERSION}" "python${PYTHON_VERSION}-dev" "python${PYTHON_VERSION}-venv" \
        ca-certificates git curl \
    && rm -rf /var/lib/apt/lists/*

# ---- build: the virtual environment with torch, Ray and the project ----
FROM base AS build
ARG PYTHON_VERSION=3.12
# torch as on the H200 host; the cu130 wheels match CUDA_VERSION's major version.
ARG TORCH_VERSION=2.11.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130
# torch and Ray first, in their own layers: they are the large, rarely changing part.
RUN "python${PYTHON_VERSION}" -m venv "${VIRTUAL_ENV}" \
    && pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"
# Must equal the ray pin in pyproject.toml (tests/test_deploy.py checks): head, workers and driver run one Ray.
ARG RAY_VERSION=2.60.0
RUN pip install --no-cache-dir "ray[default]==${RAY_VERSION}"
WORKDIR /opt/wavealign
# The checkout, installed editable as `make` does: orchestrator/, jobs/ and analysis/ import by their folder names,
# conf/ is read in place, and cluster.connect puts this directory on every Ray worker's PYTHONPATH.
COPY pyproject.toml README.md ./
COPY wavealign ./wavealign
COPY orchestrator ./orchestrator
COPY analysis ./analysis
COPY jobs ./jobs
COPY conf ./conf
# The [sweep] extra brings the orchestrator's dependencies (Hydra, Ray, MLflow, pyarrow, numba for the simulator);
# [fa4] and [flashinfer] the kernels. The cu130 index stays reachable so nothing swaps torch for a different build.
RUN pip install --no-cache-dir --extra-index-url "${TORCH_INDEX_URL}" \
        -e ".[sweep,fa4,flashinfer]" "torch==${TORCH_VERSION}" "ray[default]==${RAY_VERSION}"

# ---- runtime: the same CUDA devel base (nvcc), the venv and checkout, a non-root user ----
FROM base AS runtime
ARG USER_UID=1000
# ubuntu:24.04 already has user "ubuntu" with uid 1000; drop it so the image's user owns that uid.
RUN (userdel --remove ubuntu 2>/dev/null || true) \
    && useradd --create-home --uid "${USER_UID}" --shell /bin/bash wavealign \
    && mkdir -p /workspace \
    && chown wavealign:wavealign /workspace
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/wavealign /opt/wavealign
COPY --chmod=0755 deploy/entrypoint.sh /usr/local/bin/wavealign-entrypoint
USER ${USER_UID}
# run_root (wavealign-runs/) and FlashInfer's JIT cache land under the user's own directories
WORKDIR /workspace
# 6379: GCS, 8265: dashboard and job API, 10001: Ray client
EXPOSE 6379 8265 10001
ENTRYPOINT ["/usr/local/bin/wavealign-entrypoint"]
CMD ["wavealign", "--help"]
