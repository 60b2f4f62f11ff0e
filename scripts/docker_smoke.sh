#!/usr/bin/env bash
# Build the Docker image on a plain Debian base (the CPU build), run it as a user would, and
# check it from outside. Not part of the test suite: it needs root, a Docker engine and
# 5-10 minutes on two cores.
#
#   sudo scripts/docker_smoke.sh [--clean]     # --clean: remove the image it built at the end
#
# Steps: install what is missing (docker.io, debootstrap; the buildx and compose CLI plugins
# from Debian's archive), start dockerd unless one answers, validate docker-compose.yml
# against the README's configuration table, make the base image unless it exists
# (scripts/make_base_image.sh), build the image with a local CPU torch wheel, start it with
# the compose file's security options (--network host, a volume for /data), wait for
# /health, check the container's users and sandbox, run an /evaluate, a /compare and an MCP
# tool call, replace the container by a new one on the same volume and read the first job
# back. On exit it removes the containers and the volume it made and stops what it started
# (the wheel server, dockerd). Only loopback traffic: every container uses the host network.
#
# Environment: BASE_IMAGE (default kernel-eval-base:bookworm, made here if missing),
# IMAGE (kernel-eval-server:smoke), TORCH_SPEC (torch==2.13.0+cpu, a wheel pip can find for
# CPython 3.11: here a file in pip's find-links), DOCKER_STORAGE_DRIVER (vfs) for a dockerd
# started here, CACHE_DIR (~/.cache/kernel-eval-docker: wheels and CLI plugins), PYTHON
# (.venv/bin/python: the project's environment, for the compose check).
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_IMAGE=${BASE_IMAGE:-kernel-eval-base:bookworm}
IMAGE=${IMAGE:-kernel-eval-server:smoke}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0+cpu}
STORAGE_DRIVER=${DOCKER_STORAGE_DRIVER:-vfs}
PYTHON=${PYTHON:-.venv/bin/python}
CACHE_DIR=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kernel-eval-docker}
CLEAN=0
[ "${1:-}" = --clean ] && CLEAN=1

WORK=$(mktemp -d /tmp/kernel-eval-smoke.XXXXXX)
NAME=kernel-eval-smoke-$$
VOLUME=kernel-eval-smoke-$$
DOCKERD_PID=
WHEEL_SERVER_PID=
SUMMARY=()
T0=$SECONDS

say() { printf '\n== %s\n' "$*"; }
ok() { printf '   ok: %s\n' "$*"; SUMMARY+=("ok    $*"); }
fail() {
    printf '   FAILED: %s\n' "$*" >&2
    SUMMARY+=("FAIL  $*")
    if docker inspect "$NAME" >/dev/null 2>&1; then
        echo "--- last lines of the container's log:" >&2
        docker logs --tail 40 "$NAME" 2>&1 | sed 's/^/   | /' >&2
    fi
    exit 1
}

cleanup() {
    local code=$?
    set +e
    if [ -n "$DOCKERD_PID" ] || docker info >/dev/null 2>&1; then
        docker rm -f "$NAME" >/dev/null 2>&1
        docker volume rm "$VOLUME" >/dev/null 2>&1
        [ "$CLEAN" = 1 ] && docker rmi "$IMAGE" >/dev/null 2>&1 && docker builder prune -f >/dev/null 2>&1
    fi
    [ -n "$WHEEL_SERVER_PID" ] && kill "$WHEEL_SERVER_PID" 2>/dev/null
    if [ -n "$DOCKERD_PID" ]; then
        kill "$DOCKERD_PID" 2>/dev/null
        for _ in $(seq 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
        kill -0 "$DOCKERD_PID" 2>/dev/null && kill -9 "$DOCKERD_PID"
        echo "stopped the dockerd this script started"
    fi
    echo
    echo "== summary ($((SECONDS - T0)) s)"
    printf '%s\n' "${SUMMARY[@]}"
    [ "$code" = 0 ] && echo "docker smoke: passed" || echo "docker smoke: FAILED (logs in $WORK)"
    [ "$code" = 0 ] && rm -rf "$WORK"
    exit "$code"
}
trap cleanup EXIT
trap 'fail "line $LINENO: \"$BASH_COMMAND\" failed"' ERR
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

say "tools"
[ "$(id -u)" = 0 ] || fail "run as root (dockerd, debootstrap)"
command -v python3 >/dev/null || fail "python3 is needed (the checks and pip download)"
command -v curl >/dev/null || fail "curl is needed"
[ -x "$PYTHON" ] || fail "no $PYTHON: ./run.sh install makes the project's environment (or set PYTHON)"
missing=()
command -v docker >/dev/null || missing+=(docker.io)
command -v dockerd >/dev/null || missing+=(docker.io)
docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 || command -v debootstrap >/dev/null \
    || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
    echo "apt-get install ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${missing[@]}" >"$WORK/apt.log" 2>&1 \
        || { tail "$WORK/apt.log"; fail "apt-get install ${missing[*]}"; }
fi

# Debian 12 packages neither the buildx nor the compose v2 plugin; Debian 13 packages both
# (Go binaries that need only libc). Without buildx, `docker build` falls back to the legacy
# builder, which copies the whole file system for every instruction on vfs: 7 minutes, not 2.
plugins_ok() { docker buildx version >/dev/null 2>&1 && docker compose version >/dev/null 2>&1; }
if ! plugins_ok; then
    plugins=$CACHE_DIR/cli-plugins
    if [ ! -x "$plugins/docker-buildx" ] || [ ! -x "$plugins/docker-compose" ]; then
        echo "fetching docker-buildx and docker-compose from Debian's archive (trixie)"
        apt=$WORK/apt
        mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs" "$plugins"
        echo "deb http://deb.debian.org/debian trixie main" >"$apt/sources.list"
        o=(-o Dir::Etc::sourcelist="$apt/sources.list" -o Dir::Etc::sourceparts=-
           -o Dir::State::Lists="$apt/lists" -o Dir::Cache="$apt/cache"
           -o APT::Sandbox::User=root)
        apt-get "${o[@]}" update -qq >"$WORK/apt-plugins.log" 2>&1 \
            && (cd "$apt/debs" && apt-get "${o[@]}" download docker-buildx docker-compose) \
                >>"$WORK/apt-plugins.log" 2>&1 \
            || { tail "$WORK/apt-plugins.log"; fail "download of the docker CLI plugins"; }
        for deb in "$apt"/debs/*.deb; do dpkg-deb -x "$deb" "$apt/root"; done
        cp "$apt"/root/usr/libexec/docker/cli-plugins/docker-{buildx,compose} "$plugins/"
    fi
    # A private CLI configuration whose only content is the plugins.
    export DOCKER_CONFIG=$WORK/docker-config
    mkdir -p "$DOCKER_CONFIG/cli-plugins"
    ln -s "$plugins"/docker-buildx "$plugins"/docker-compose "$DOCKER_CONFIG/cli-plugins/"
    plugins_ok || fail "the docker buildx/compose plugins do not run"
fi
ok "docker $(docker version -f '{{.Client.Version}}' 2>/dev/null), $(docker buildx version | cut -d' ' -f1-2), compose $(docker compose version --short)"

say "docker engine"
if docker info >/dev/null 2>&1; then
    echo "using the running engine"
else
    dockerd --storage-driver="$STORAGE_DRIVER" --bridge=none --iptables=false \
        >"$WORK/dockerd.log" 2>&1 &
    DOCKERD_PID=$!
    for _ in $(seq 120); do
        docker info >/dev/null 2>&1 && break
        kill -0 "$DOCKERD_PID" 2>/dev/null || { tail "$WORK/dockerd.log"; DOCKERD_PID=; fail "dockerd exited"; }
        sleep 0.5
    done
    docker info >/dev/null 2>&1 || { tail "$WORK/dockerd.log"; fail "dockerd did not answer in 60 s"; }
fi
ok "engine $(docker version -f '{{.Server.Version}}'), storage driver $(docker info -f '{{.Driver}}')"

say "docker-compose.yml"
docker compose -f docker-compose.yml config --format json >"$WORK/compose.json" \
    || fail "docker compose config rejects docker-compose.yml"
# The settings the compose service passes must be the README's configuration table, and every
# variable of the table must reach the container (through compose or the image's ENV): the
# unit suite's check of it, run here too, with the project's environment.
"$PYTHON" -m pytest -q -p no:cacheprovider tests/unit/test_compose_matches_settings.py \
    >"$WORK/compose-check.txt" 2>&1 \
    || { tail -40 "$WORK/compose-check.txt"; fail "docker-compose.yml and the README disagree"; }
ok "docker compose config: valid; its environment matches the README's configuration table"
# The smoke runs the container with the compose service's own security options.
mapfile -t SECURITY_OPTS < <(python3 -c '
import json, sys
for opt in json.load(open(sys.argv[1]))["services"]["kernel-eval"].get("security_opt") or []:
    print("--security-opt"); print(opt)' "$WORK/compose.json")
RUN_OPTS=(--network host "${SECURITY_OPTS[@]}")

say "base image $BASE_IMAGE"
if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    echo "present"
elif [ "$BASE_IMAGE" = kernel-eval-base:bookworm ]; then
    scripts/make_base_image.sh "$BASE_IMAGE" || fail "scripts/make_base_image.sh"
else
    echo "not here: the build will pull it"
fi

say "torch wheel ($TORCH_SPEC)"
# The PyPI torch is the CUDA build (GBs); the CPU build comes from pip's own configuration
# (here a find-links directory on this disk), served to the build over loopback.
mkdir -p "$CACHE_DIR/wheels"
python3 -m pip download -q --no-deps --only-binary=:all: --implementation cp \
    --python-version 3.11 --platform manylinux_2_28_x86_64 -d "$CACHE_DIR/wheels" "$TORCH_SPEC" \
    >"$WORK/pip.log" 2>&1 || { tail "$WORK/pip.log"; fail "pip download $TORCH_SPEC"; }
WHEEL_PORT=18765
python3 -c "import socket; socket.create_server(('127.0.0.1', $WHEEL_PORT)).close()" 2>/dev/null \
    || WHEEL_PORT=$(free_port)  # a fixed port keeps the build cache valid between runs
python3 -m http.server --bind 127.0.0.1 --directory "$CACHE_DIR/wheels" "$WHEEL_PORT" \
    >"$WORK/wheels.log" 2>&1 &
WHEEL_SERVER_PID=$!
for _ in $(seq 50); do curl -fs "http://127.0.0.1:$WHEEL_PORT/" >/dev/null && break; sleep 0.2; done
curl -fs "http://127.0.0.1:$WHEEL_PORT/" | grep -o '>torch-[^<]*\.whl<' | tr -d '<>' | sed 's/^/   /' \
    || fail "the wheel server on port $WHEEL_PORT does not list a torch wheel"

say "build $IMAGE"
build_start=$SECONDS
docker buildx build --progress=plain --network host -t "$IMAGE" \
    --build-arg BASE_IMAGE="$BASE_IMAGE" \
    --build-arg TORCH_INDEX_URL= \
    --build-arg TORCH_SPEC="$TORCH_SPEC" \
    --build-arg GPU_PIP_PACKAGES= \
    --build-arg DSL_PIP_PACKAGES= \
    --build-arg PIP_FIND_LINKS="http://127.0.0.1:$WHEEL_PORT/" \
    . >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; fail "docker build"; }
BUILD_S=$((SECONDS - build_start))
kill "$WHEEL_SERVER_PID"; WHEEL_SERVER_PID=
grep -E '^#[0-9]+ [0-9.]+ torch [0-9]' "$WORK/build.log" | sed 's/^#[0-9]* [0-9.]* /   /' || true
IMAGE_MB=$(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%d", $1/1e6}')
ok "built in ${BUILD_S} s; image $IMAGE is $IMAGE_MB MB"

PORT=$(free_port)
URL=http://127.0.0.1:$PORT
RUN=(docker run -d --name "$NAME" "${RUN_OPTS[@]}" -v "$VOLUME:/data"
     -e HOST=127.0.0.1 -e PORT="$PORT" -e MAX_WORKERS=2 "$IMAGE")
start_container() {
    "${RUN[@]}" >/dev/null || fail "docker run"
    local deadline=$((SECONDS + 300))
    until curl -fsS "$URL/health" >"$WORK/health.json" 2>/dev/null; do
        [ "$(docker inspect -f '{{.State.Running}}' "$NAME")" = true ] || fail "the container exited"
        [ $SECONDS -lt $deadline ] || fail "no /health answer in 300 s"
        sleep 1
    done
}

# The checks from outside: plain HTTP with Python's standard library.
cat >"$WORK/check.py" <<'EOF'
import json, sys, urllib.request

url, what = sys.argv[1], sys.argv[2]

def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.load(resp)

def check(cond, message, detail):
    if not cond:
        sys.exit(f"{message}: {json.dumps(detail)[:1500]}")

RELU = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)"
ADD_REF = "class Model(torch.nn.Module):\n    def forward(self, x, y):\n        return x + y"
ADD_TRITON = """import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(output_ptr + offsets, tl.load(x_ptr + offsets, mask=mask)
             + tl.load(y_ptr + offsets, mask=mask), mask=mask)
"""
def tensor(name, shape, init=None, role="input"):
    spec = {"shape": shape, "dtype": "float32"}
    if init:
        spec["init"] = init
    return {"name": name, "type": "tensor", "role": role, "tensor_spec": spec}

if what == "health":
    h = call("GET", "/health")
    check(h["status"] == "healthy" and h["device"] == "cpu", "unhealthy", h)
    print(f"device {h['device']}, kernel types {','.join(h['kernel_types'])}, "
          f"isolation {h.get('isolation', '(not reported)')}")
    if "isolation" in h:
        check(h["isolation"] != "none", "the worker sandbox is off in the container", h)
elif what == "evaluate":
    r = call("POST", "/evaluate", {"kernel": {"source_code": RELU, "kernel_type": "torch", "io": {
        "args": [tensor("x", [1024], {"kind": "randn", "seed": 42})]}}, "num_trials": 20})
    res = r.get("kernel_exec_result") or {}
    check(r["status"] == "success" and res.get("outcome") == "success", "/evaluate", r)
    print(r["job_id"])
    print(f"/evaluate torch relu: {res['outcome']}, {res['runtime']:.4f} ms mean of "
          f"{res['runtime_stats']['num_samples']} ({res['runtime_stats']['method']})",
          file=sys.stderr)
elif what == "compare":
    n, block = 4096, 256
    io = {"args": [tensor("x", [n], {"kind": "randn", "seed": 42}),
                   tensor("y", [n], {"kind": "ones"}),
                   tensor("output", [n], role="output"),
                   {"name": "n_elements", "type": "int", "value": n, "role": "input"},
                   {"name": "BLOCK_SIZE", "type": "int", "value": block, "is_meta": True}],
          "launch": {"grid": {"x": n // block}, "num_warps": 4}}
    r = call("POST", "/compare", {
        "ref_kernel": {"source_code": ADD_REF, "kernel_type": "torch", "io": io},
        "custom_kernel": {"source_code": ADD_TRITON, "kernel_type": "triton", "io": io,
                          "metadata": {"kernel_name": "add_kernel"}},
        "num_trials": 5, "num_correct_trials": 2})
    res = r.get("kernel_exec_result") or {}
    check(r["status"] == "success" and res.get("correctness") is True, "/compare", r)
    print(f"/compare torch x+y vs Triton (interpreter): correct, {res['runtime']:.3f} ms")
elif what == "job":
    j = call("GET", f"/job/{sys.argv[3]}")
    res = ((j.get("result") or {}).get("kernel_exec_result")) or {}
    check(j["state"] == "completed" and res.get("outcome") == "success", "/job", j)
    print(f"job {j['job_id']}: {j['state']}, {res['outcome']}, {res['runtime']:.4f} ms")
else:
    sys.exit(f"unknown check {what}")
EOF

# The MCP call from inside the container, with the MCP client the image has installed.
cat >"$WORK/mcp_check.py" <<'EOF'
import asyncio, sys
from mcp.client import Client

async def main(url):
    async with Client(url) as client:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        assert "evaluate_kernel" in tools, tools
        result = await client.call_tool("evaluate_kernel", {
            "kernel_source": "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2",
            "kernel_type": "torch", "num_trials": 10})
        assert not result.is_error, result
        res = result.structured_content["kernel_exec_result"]
        assert res["outcome"] == "success", res
        print(f"MCP evaluate_kernel: {res['outcome']}, {res['runtime']:.4f} ms "
              f"({len(tools)} tools listed)")

asyncio.run(main(sys.argv[1]))
EOF

# What the worker sandbox needs, checked by hand with bwrap: the same namespaces, a fresh /proc.
cat >"$WORK/bwrap_check.py" <<'EOF'
import glob, os, socket, sys
cmdlines = [open(p, "rb").read() for p in glob.glob("/proc/[0-9]*/cmdline")]
if any(b"main.py" in c for c in cmdlines):
    sys.exit("the server's processes are visible")
try:
    open("/data/probe", "w")
    sys.exit("/data is writable")
except OSError:
    pass
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
    sys.exit("the server's port is reachable")
except OSError:
    pass
EOF

say "run (port $PORT, volume $VOLUME)"
echo "${RUN[*]}"
docker volume create "$VOLUME" >/dev/null
start_container
out=$(python3 "$WORK/check.py" "$URL" health 2>&1) || { echo "$out"; fail "/health"; }
ok "/health: $out"

uids=$(docker exec "$NAME" sh -c 'for p in /proc/[0-9]*; do
    sed -n "s/^Uid:\t\([0-9]*\).*/\1/p" "$p/status" 2>/dev/null; done' | sort -u | tr '\n' ' ')
[ "$uids" = "1000 " ] || fail "processes in the container run as uids $uids, not only 1000"
owner=$(docker exec "$NAME" stat -c %U /data /data/jobs.sqlite3 | sort -u | tr '\n' ' ')
[ "$owner" = "kes " ] || fail "/data belongs to $owner"
ok "every process runs as kes (uid 1000); /data and the job store belong to kes"
docker exec -i "$NAME" bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp \
    --unshare-pid --unshare-net --unshare-ipc python - "$PORT" <"$WORK/bwrap_check.py" \
    || fail "bwrap cannot isolate a process in the container"
ok "bwrap in the container: the server invisible, / and /data read-only, its port unreachable"

JOB=$(python3 "$WORK/check.py" "$URL" evaluate 2>"$WORK/evaluate.txt") \
    || { cat "$WORK/evaluate.txt"; fail "/evaluate"; }
ok "$(cat "$WORK/evaluate.txt") [job $JOB]"
out=$(python3 "$WORK/check.py" "$URL" compare 2>&1) || { echo "$out"; fail "/compare"; }
ok "$out"
out=$(docker exec -i "$NAME" python - "$URL/mcp" <"$WORK/mcp_check.py" 2>&1) \
    || { echo "$out" | tail -20; fail "MCP tool call"; }
ok "$out"

say "a new container on the same volume"
stop_start=$SECONDS
docker stop -t 30 "$NAME" >/dev/null
exit_code=$(docker inspect -f '{{.State.ExitCode}}' "$NAME")
# uvicorn shuts down, then re-raises the SIGTERM: 143; 137 would be docker's SIGKILL after 30 s.
case $exit_code in 0|143) ;; *) fail "the server exited with $exit_code on docker stop (SIGTERM)" ;; esac
ok "docker stop: the server shut down on SIGTERM in $((SECONDS - stop_start)) s (exit code $exit_code)"
docker rm "$NAME" >/dev/null
start_container
out=$(python3 "$WORK/check.py" "$URL" job "$JOB" 2>&1) \
    || { echo "$out"; fail "the first job, read after the restart"; }
ok "a new container on the volume reads the first job back: $out"
# The image's HEALTHCHECK (curl /health every 30 s) must find it healthy too.
deadline=$((SECONDS + 120))
until [ "$(docker inspect -f '{{.State.Health.Status}}' "$NAME")" = healthy ]; do
    [ $SECONDS -lt $deadline ] || fail "docker never reported the container healthy"
    sleep 2
done
ok "docker's HEALTHCHECK: healthy"

echo
echo "image $IMAGE: $IMAGE_MB MB, built in $BUILD_S s (storage driver $(docker info -f '{{.Driver}}'))"
