#!/usr/bin/env bash
# Build the offline wheelhouse for a Python 3.12 x86-64 GPU host that already has
# torch/triton/cupy/numpy (the lent GPU machine; see docs/GPU_HOST.md).
#
#   scripts/build_wheelhouse.sh [DEST]        (DEST defaults to .whl)
#
# What goes in:
#   * the runtime closure of the server's and the client's dependencies (pyproject.toml,
#     client/pyproject.toml), walked through the installed metadata of the dev venv, with
#     `extra ==` requirements skipped except extras asked for by name (pyjwt[crypto]);
#     markers are evaluated for CPython 3.12 on Linux x86-64;
#   * every version pinned to exactly what the venv has installed ($VENV, default .venv);
#   * minus packages the GPU host's image already has (KINDS.md "Python packages already
#     there"), except FORCE ones whose host version may be older than our pins need;
#   * plus EXTRA names, if any (e.g. EXTRA=nvtx for the [worker] extra's NVTX ranges: not on
#     the host, 3 MB, and nothing imports it yet);
#   * plus the two local packages as wheels: kernel_eval_client and kernel_eval_server.
#
# Idempotent: wheels already present at the pinned version are not fetched again; another
# version of the same project in DEST is deleted (two versions stop the host's install).
# The two local wheels are rebuilt on every run (a few seconds, no network).
#
# Environment: VENV (.venv), EXTRA (""), FORCE (see below), NO_LOCAL=1 to skip the local
# wheels, PRUNE=1 to delete wheels in DEST outside the pinned set (otherwise only noted),
# PIP_EXTRA_ARGS for `pip download` (e.g. an --index-url).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
DEST=${1:-.whl}
VENV=${VENV:-.venv}
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "no venv python at $PY (set VENV=...)" >&2; exit 2; }
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)

# Packages the GPU host image already has (KINDS.md, read 2026-11-17), normalised names.
HOST_PKGS="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio
attrs botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy
coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax
e3nn einops equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec
gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna imageio
iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13
nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir
onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout
pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers
setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton
typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray
xxhash yarl zipp"
# On the host, but carried anyway: our pins need versions newer than the image may hold
# (pydantic 2.14 needs typing-extensions>=4.16, httpx2 needs idna>=3.18 and anyio>=4.10,
# httpcore2 needs h11>=0.16); httpx/httpcore ride along so the client's HTTP stack matches
# the venv. Each is small.
FORCE=${FORCE:-"anyio idna typing-extensions h11 httpx httpcore"}
EXTRA=${EXTRA:-}

# pip also takes py3-none-any wheels under these flags, so pure packages need nothing more.
PIP_PLATFORM_ARGS=(--only-binary=:all: --python-version 3.12 --implementation cp
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
  --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64
  --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64
  --platform manylinux_2_35_x86_64)

# --- 1. resolve the closure against the venv's installed metadata -----------------------
PINS=$(HOST_PKGS="$HOST_PKGS" FORCE="$FORCE" EXTRA="$EXTRA" "$PY" - <<'PYEOF'
import os, re, sys, tomllib
from importlib import metadata
from packaging.requirements import Requirement

def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

host = {norm(n) for n in os.environ["HOST_PKGS"].split()}
force = {norm(n) for n in os.environ["FORCE"].split()}
local = {"kernel-eval-server", "kernel-eval-client"}
env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython"}

def applies(req, extras):
    if req.marker is None:
        return True
    return any(req.marker.evaluate({**env, "extra": e}) for e in (extras or {""}))

roots = []
for path in ("pyproject.toml", "client/pyproject.toml"):
    with open(path, "rb") as fh:
        roots += [Requirement(r) for r in tomllib.load(fh)["project"]["dependencies"]]
roots += [Requirement(n) for n in os.environ.get("EXTRA", "").split()]

pins, skipped, seen, todo = {}, {}, set(), [(r, set()) for r in roots]
while todo:
    req, parent_extras = todo.pop()
    if not applies(req, parent_extras):
        continue
    name = norm(req.name)
    key = (name, frozenset(req.extras))
    if key in seen:
        continue
    seen.add(key)
    if name in local:
        for r in metadata.distribution(name).requires or []:
            todo.append((Requirement(r), set()))
        continue
    if name in host and name not in force:
        skipped.setdefault(name, set()).add(str(req.specifier) or "any")
        continue
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        sys.exit(f"ERROR: {req} is needed but not installed in the venv; install it there first")
    if not req.specifier.contains(dist.version, prereleases=True):
        print(f"WARNING: venv has {name}=={dist.version}, which does not satisfy {req}",
              file=sys.stderr)
    pins[name] = dist.version
    for r in dist.requires or []:
        todo.append((Requirement(r), set(req.extras)))

for name, specs in sorted(skipped.items()):
    print(f"host has {name} ({', '.join(sorted(specs))}): not carried", file=sys.stderr)
for name, version in sorted(pins.items()):
    print(f"{name}=={version}")
PYEOF
)

# --- 2. fetch what is missing; drop other versions of the same projects -----------------
wheel_key() {  # wheel file name -> "normalised-name==version"
  local base name ver
  base=$(basename "$1"); name=${base%%-*}; ver=${base#*-}; ver=${ver%%-*}
  name=$(echo "$name" | tr 'A-Z' 'a-z' | sed -e 's/[_.]/-/g' -e 's/--*/-/g')
  echo "$name==$ver"
}
declare -A HAVE=()
for f in "$DEST"/*.whl; do
  [ -e "$f" ] || continue
  HAVE[$(wheel_key "$f")]=$f
done
NEED=()
for pin in $PINS; do
  name=${pin%%==*}
  if [ -n "${HAVE[$pin]:-}" ]; then continue; fi
  for k in "${!HAVE[@]}"; do
    if [ "${k%%==*}" = "$name" ]; then
      echo "removing other version: $(basename "${HAVE[$k]}")"; rm -f "${HAVE[$k]}"; unset "HAVE[$k]"
    fi
  done
  NEED+=("$pin")
done
if [ ${#NEED[@]} -gt 0 ]; then
  echo "downloading ${#NEED[@]}: ${NEED[*]}"
  # shellcheck disable=SC2086
  "$PY" -m pip download -q --disable-pip-version-check --no-deps "${PIP_PLATFORM_ARGS[@]}" \
    ${PIP_EXTRA_ARGS:-} -d "$DEST" "${NEED[@]}" 2> >(grep -v "^WARNING: Location '" >&2)
else
  echo "all $(echo "$PINS" | wc -w) pinned wheels already present"
fi

# --- 3. the two local packages, built from a scratch copy (leaves the tree untouched) ---
if [ "${NO_LOCAL:-0}" != 1 ]; then
  SCRATCH=$(mktemp -d)
  trap 'rm -rf "$SCRATCH"' EXIT
  tar -C "$ROOT" --exclude=./.venv --exclude=./.git --exclude=./.whl --exclude=./wheelhouse \
      --exclude=./var --exclude=./build --exclude=./dist --exclude='*.egg-info' \
      --exclude=__pycache__ --exclude=.pytest_cache -cf - . | tar -C "$SCRATCH" -xf -
  rm -f "$DEST"/kernel_eval_client-*.whl "$DEST"/kernel_eval_server-*.whl
  for pkg in "$SCRATCH/client" "$SCRATCH"; do
    "$PY" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation \
      -w "$DEST" "$pkg" >/dev/null
  done
fi

# --- 4. report -----------------------------------------------------------------------
# The worker's CUPTI activity measure (profiling/timer.py) needs cupti-python on the host; its
# release must match the host's CUDA driver (13.0 there), so it is pinned here, not from .venv.
GPU_WHEELS="cupti-python==13.0.1 pyelftools==0.33"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$DEST" $GPU_WHEELS \
  2> >(grep -v "^WARNING: Location '" >&2)
PINS="$PINS $GPU_WHEELS"
for f in "$DEST"/*.whl; do
  k=$(wheel_key "$f")
  case " $(echo $PINS) " in *" $k "*) continue ;; esac
  case "$k" in kernel-eval-client==*|kernel-eval-server==*) continue ;; esac
  if [ "${PRUNE:-0}" = 1 ]; then
    echo "pruned: $(basename "$f") (not in the pinned set)"; rm -f "$f"
  else
    echo "note: $(basename "$f") is not in the pinned set (PRUNE=1 deletes it)"
  fi
done
dups=$(for f in "$DEST"/*.whl; do k=$(wheel_key "$f"); echo "${k%%==*}"; done | sort | uniq -d)
[ -z "$dups" ] || { echo "ERROR: more than one version of: $dups" >&2; exit 1; }
echo "wheelhouse $DEST: $(ls "$DEST"/*.whl | wc -l) wheels, $(du -sh "$DEST" | cut -f1) in all" \
     "($(du -sb "$DEST" | cut -f1) bytes)"
exit 0
