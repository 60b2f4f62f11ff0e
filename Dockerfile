# syntax=docker/dockerfile:1
# Kernel Evaluation Server for an NVIDIA GPU host (x86-64, driver >= 580 for CUDA 13).
#
#   docker compose up -d --build          # see docker-compose.yml
#   docker build -t kernel-eval-server . && \
#   docker run --gpus all --cap-add SYS_ADMIN -p 8000:8000 -v kernel-eval-data:/data kernel-eval-server
#
# The devel image, not the runtime one: jobs compile at run time (nvcc for CUDA C++ jobs and
# torch.utils.cpp_extension.load_inline, NVRTC for CuPy RawKernels, gcc + Python.h for Triton's
# launcher stubs), and Nsight Compute (ncu) ships in the devel image.
# Ubuntu 24.04 brings Python 3.12.
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-devel-ubuntu24.04
FROM ${CUDA_IMAGE}

# The GPU stack: the same versions as the lent GPU machines (torch 2.11 + cu130 pulls its
# matching triton 3.6 and nvidia-* libraries from the PyTorch index).
ARG TORCH_VERSION=2.11.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130
ARG CUPY_VERSION=14.2.0
ARG NVTX_VERSION=0.2.17

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/cuda/bin:${PATH} \
    CUDA_HOME=/usr/local/cuda \
    CUDA_PATH=/usr/local/cuda

RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      python3 python3-venv python3-dev \
      build-essential ninja-build \
      curl ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv "$VIRTUAL_ENV" \
 && pip install --upgrade pip setuptools wheel

RUN pip install --index-url "$TORCH_INDEX_URL" "torch==${TORCH_VERSION}" \
 && pip install "cupy-cuda13x==${CUPY_VERSION}" "nvtx==${NVTX_VERSION}" \
 && python -c "import torch, triton, cupy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'cupy', cupy.__version__)"

WORKDIR /app
# The client first (its own layer: it changes less often than the server).
COPY client/ client/
RUN pip install ./client
COPY . .
# Installs the server and its dependencies (fastapi, uvicorn, pydantic, mcp 2.x, ...); the
# entrypoint still runs main.py from /app, which is also the PYTHONPATH of the job workers.
RUN pip install . \
 && python -c "import fastapi, uvicorn, pydantic, mcp, kernel_eval_client, app"

# Server settings (shared/settings.py reads them; flags in ENTRYPOINT win over HOST/PORT).
#   GPU_DEVICE: "all" or GPU ids like "0,1" (of those the container sees)
#   MAX_WORKERS: jobs at once, capped at one per GPU on a GPU host
#   ENABLE_DEVICE_METRICS: NVML metrics in /health and results
ENV GPU_DEVICE=all \
    MAX_WORKERS=4 \
    ENABLE_DEVICE_METRICS=false \
    LOG_LEVEL=info \
    JOB_STORE_PATH=/data/jobs.sqlite3 \
    BUILD_CACHE_DIR=/data/build-cache \
    CUPY_KERNEL_CACHE_DIR=/data/cupy-cache \
    NCU_PATH=ncu
# Job store (SQLite) and compiled-kernel caches survive container restarts.
RUN mkdir -p /data/build-cache /data/cupy-cache
VOLUME ["/data"]

EXPOSE 8000
# Start-up probes the GPU in a worker (imports torch), hence the long start period.
HEALTHCHECK --interval=30s --timeout=10s --start-period=180s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8000/health || exit 1

# Runs as root: ncu needs it (together with CAP_SYS_ADMIN, see docker-compose.yml) to read
# the GPU's performance counters.
ENTRYPOINT ["python", "main.py", "--host", "0.0.0.0", "--port", "8000"]
