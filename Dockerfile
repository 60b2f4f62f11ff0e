# Kernel Evaluation Server. One Dockerfile, two bases:
#
# GPU host (the default base; x86-64, NVIDIA driver >= 580, NVIDIA Container Toolkit):
#   docker compose up -d --build                  # see docker-compose.yml for the run options
#
# CPU build on plain Debian 12 (what scripts/docker_smoke.sh builds and runs):
#   docker build --network host -t kernel-eval-server:cpu \
#     --build-arg BASE_IMAGE=debian:bookworm --build-arg TORCH_INDEX_URL= \
#     --build-arg TORCH_SPEC=torch==2.13.0+cpu --build-arg GPU_PIP_PACKAGES= \
#     --build-arg PIP_FIND_LINKS=http://127.0.0.1:PORT/ .     # where that wheel is served
#
# The CUDA devel image, not the runtime one: jobs compile at run time (nvcc and
# torch.utils.cpp_extension.load_inline for CUDA C++, NVRTC for CuPy, gcc + Python.h for
# Triton's launcher stubs), and Nsight Compute (ncu) ships in it. Ubuntu 24.04 brings
# Python 3.12, Debian 12 Python 3.11. Written for both builders, BuildKit and the legacy one:
# no syntax directive (it would pull a frontend image), and the image's settings come first,
# because the legacy builder copies the whole file system for every instruction on a storage
# driver without copy-on-write (vfs), and the file system is small up here.
ARG BASE_IMAGE=nvidia/cuda:13.0.1-devel-ubuntu24.04
FROM ${BASE_IMAGE}

# The volume holds what outlives a container: the job store, the job files and the compiled
# kernel caches. Other settings (README, "Configuration") come from the environment.
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/cuda/bin:${PATH} \
    CUDA_HOME=/usr/local/cuda \
    HOST=0.0.0.0 \
    PORT=8000 \
    JOB_STORE_PATH=/data/jobs.sqlite3 \
    JOB_DIR=/data/jobs \
    CACHE_DIR=/data/cache \
    CUPY_KERNEL_CACHE_DIR=/data/cupy-cache
WORKDIR /app
EXPOSE 8000
# Start-up probes the device in a worker (imports torch), hence the long start period.
HEALTHCHECK --interval=30s --timeout=10s --start-period=180s --retries=3 \
  CMD curl -fsS "http://127.0.0.1:${PORT}/health" >/dev/null || exit 1
# tini reaps what killed workers leave behind: the server is no init.
ENTRYPOINT ["tini", "--", "python", "main.py"]

# The unprivileged account the server runs as; it owns /data. Ubuntu images already have a
# user with uid 1000 ("ubuntu"): it is removed, so that the uid means the same on every base.
ARG APP_USER=kes
ARG APP_UID=1000
# bubblewrap shows by hand whether a container's run options allow the worker sandbox (user,
# pid and network namespaces, a fresh /proc): docker exec ... bwrap --unshare-all ... true
# /app and /opt/venv stay root's: the server and its workers can read them, not change them.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv python3-dev build-essential ninja-build \
      bubblewrap tini curl ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && if old=$(getent passwd "$APP_UID"); then userdel --remove "${old%%:*}"; fi \
 && useradd --uid "$APP_UID" --user-group --create-home --shell /bin/bash "$APP_USER" \
 && install -d -o "$APP_USER" -g "$APP_USER" \
      /data /data/jobs /data/cache /data/cupy-cache \
 && python3 -m venv "$VIRTUAL_ENV" \
 && pip install --upgrade pip setuptools wheel
VOLUME ["/data"]

# torch and the GPU-only packages. The defaults are the GPU image: torch 2.11 + cu130 from the
# PyTorch index, which pulls its matching triton and nvidia-* libraries. An empty
# TORCH_INDEX_URL means the ordinary pip index, plus PIP_FIND_LINKS (a directory URL of
# wheels, e.g. a local CPU torch wheel), which pip reads from the environment of this build.
ARG TORCH_SPEC=torch==2.11.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130
ARG WORKER_PIP_PACKAGES="triton nvtx==0.2.17"
ARG GPU_PIP_PACKAGES="cupy-cuda13x==14.2.0 cupti-python==13.0.1"
# The kernel languages beside torch and Triton (the project's `dsl` extra; /health lists them):
# CuTe DSL, TileLang, Helion, cuTile. Installed beside the torch spec, so none moves torch.
# Empty on a CPU build (none runs without a CUDA GPU). Helion 1.5 imports what only torch 2.12
# has and does not say so in its metadata: with torch 2.11, 1.4.0 (which runs).
ARG DSL_PIP_PACKAGES="nvidia-cutlass-dsl[cu13] tilelang helion==1.4.0 cuda-tile"
ARG PIP_FIND_LINKS=
RUN pip install ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$TORCH_SPEC" \
 && pip install $WORKER_PIP_PACKAGES $GPU_PIP_PACKAGES \
 && if [ -n "$DSL_PIP_PACKAGES" ]; then \
      pip install ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} "$TORCH_SPEC" $DSL_PIP_PACKAGES; fi \
 && python -c "import importlib.util as u, torch, triton; \
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__); \
u.find_spec('cupy') and print('cupy', __import__('cupy').__version__)"

# The client and the server with their pure dependencies (fastapi, uvicorn, pydantic, mcp,
# ...). The server still runs from /app, which is also the workers' PYTHONPATH.
COPY . .
RUN pip install ./client . \
 && rm -rf build client/build ./*.egg-info client/*.egg-info \
 && python -c "import fastapi, uvicorn, pydantic, mcp, kernel_eval_client, app"
USER ${APP_USER}
