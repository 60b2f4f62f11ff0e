#!/usr/bin/env bash
# One-shot run on the lent GPU host (see docs/GPU_HOST.md): install the carried wheelhouse,
# record the environment, then run the selected steps, each under `timeout`, each logged,
# continuing past failures. The last thing printed is $OUT/summary.txt.
#
#   bash scripts/gpu_host_run.sh [STEP...] [options]
#
# Steps (default: tests bench; install + env always run first):
#   tests   GPU tests:   python3 -m pytest -m gpu -p no:cacheprovider -q tests/  -> gpu_tests.log
#   full    whole suite (CPU + GPU; replaces `tests` when both are asked) -> full_tests.log
#   bench   every bench/*.py that has a __main__ block (names starting with _ skipped), run as
#           python3 bench/X.py --out <tmp>/bench_X.json; logs -> bench.log, and the JSON files
#           merged into bench.json as {"X": <X's JSON>, ...} (the transfer returns only 8 files)
#   cmd     the --cmd string, run with bash in the same environment -> cmd.log
#   env     nothing beyond install + env (use alone for a quick look at the machine)
# Options:
#   --full              add the `full` step
#   --budget SECONDS    wall-clock budget for the whole script (default 560; the run tool's
#                       limit is 600): a step gets a fair share of what is left, unused time
#                       rolls over to the next (a share is at least 60 s while that much
#                       is left), and a step with under 15 s left is skipped
#   --timeout STEP=SECS cap one step (tests, full, bench, cmd) at SECS instead of its share
#   -k EXPR             passed to pytest (tests and full)
#   --pytest-args STR   more pytest arguments, word-split (e.g. "-x -n 4 --durations=10")
#   --bench GLOB        only bench/GLOB.py (default *)
#   --cmd STRING        command for the `cmd` step (adds the step if none was named)
#   --no-pth            don't write kernel_eval_gpu_host.pth (see below)
# Environment: OUT (default /tmp/out), PYTHON (default python3), SITE (default /tmp/site),
# DSL_SITE (default /opt/kes-dsl: the kernel languages, when scripts/dsl_wheelhouse.py
# installed them there, are added to every python3's path as a site directory).
#
# The code runs from the working tree: PYTHONPATH=$PWD:$PWD/client:$SITE, the tree first, so
# the kernel_eval_server/kernel_eval_client wheels in .whl/ are neither needed nor installed
# (an older copy of them in $SITE could never shadow the tree). The same three entries also go
# into a .pth file in the interpreter's site-packages, so subprocesses that replace
# PYTHONPATH (the worker probe does) still find them; on this throwaway machine that is safe.
set -u

OUT=${OUT:-/tmp/out}
PYTHON=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
DSL_SITE=${DSL_SITE:-/opt/kes-dsl}  # scripts/dsl_wheelhouse.py install puts the languages here
BUDGET=560
RESERVE=10          # seconds kept back for the summary
MIN_STEP=60         # a step's share is raised to this (if that much is left)
KEXPR=""
PYTEST_EXTRA=""
BENCH_GLOB="*"
CMD=""
USE_PTH=1
STEPS=()
declare -A CAP=()

usage() { sed -n '2,/^set -u/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    tests|full|bench|cmd|env) STEPS+=("$1") ;;
    --full) STEPS+=(full) ;;
    --budget) BUDGET=${2:?--budget needs seconds}; shift ;;
    --budget=*) BUDGET=${1#*=} ;;
    --timeout) CAP[${2%%=*}]=${2#*=}; shift ;;
    --timeout=*) v=${1#*=}; CAP[${v%%=*}]=${v#*=} ;;
    -k) KEXPR=${2:?-k needs an expression}; shift ;;
    --pytest-args) PYTEST_EXTRA=$2; shift ;;
    --bench) BENCH_GLOB=$2; shift ;;
    --cmd) CMD=$2; shift ;;
    --no-pth) USE_PTH=0 ;;
    -h|--help) usage 0 ;;
    *) echo "unknown argument: $1" >&2; usage 2 ;;
  esac
  shift
done
has_step() { local s; for s in "${STEPS[@]:-}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
# no step named (only flags): the default set, plus whatever the flags added
# (`full` counts as the flag --full, so `full` alone means tests->full plus bench)
named=0; for s in "${STEPS[@]:-}"; do case "$s" in tests|bench|cmd|env) named=1 ;; esac; done
if [ "$named" = 0 ]; then STEPS=(tests bench "${STEPS[@]:-}"); fi
if [ -n "$CMD" ] && ! has_step cmd; then STEPS+=(cmd); fi
if has_step cmd && [ -z "$CMD" ]; then echo "step cmd needs --cmd STRING" >&2; exit 2; fi
SUPERSEDED=""
if has_step full && has_step tests; then SUPERSEDED="tests (included in full)"; fi

mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/gpu_host_run.XXXXXX)
SUMMARY="$OUT/summary.txt"
ENVF="$OUT/env.txt"
: >"$SUMMARY"; : >"$ENVF"
ROWS=()
FAILS=0
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# multi-GPU hosts here must keep NVLink multicast off (KINDS.md); harmless on one GPU
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1} \
       NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
export PYTHONPATH="$PWD:$PWD/client:$SITE${PYTHONPATH:+:$PYTHONPATH}"

record() {  # name rc secs log note
  ROWS+=("$(printf '%-22s %4s %5s  %-14s %s' "$1" "$2" "$3" "$4" "$5")")
  case "$2" in 0|SKIP) ;; *) FAILS=$((FAILS + 1)) ;; esac
}
left() { echo $((BUDGET - SECONDS - RESERVE)); }
# seconds for the next step: its --timeout cap, else a fair share of what is left
allot() {  # step steps_left
  local l; l=$(left)
  local t=$((l / $2))
  [ "$t" -lt "$MIN_STEP" ] && t=$MIN_STEP
  if [ -n "${CAP[$1]:-}" ]; then t=${CAP[$1]}; fi
  [ "$t" -gt "$l" ] && t=$l
  echo "$t"
}
run_logged() {  # log secs cmd...  -> rc (124 = timed out)
  local log=$1 t=$2; shift 2
  echo "### $(date -u +%H:%M:%S) [${t}s] $(printf '%q ' "$@")" | tee -a "$log"
  timeout -k 15 "$t" "$@" 2>&1 | tee -a "$log"
  return "${PIPESTATUS[0]}"
}
rc_note() {  # rc secs -> text for timeouts
  case "$1" in 124|137) echo "TIMEOUT after ${2}s; " ;; esac
}

# ---- install -------------------------------------------------------------------------------
t0=$SECONDS
{
  echo "== install .whl -> $SITE"
  mapfile -t WHEELS < <(ls .whl/*.whl 2>/dev/null | grep -Ev '/kernel_eval_(server|client)-')
  if [ ${#WHEELS[@]} -eq 0 ]; then
    echo "no wheels under .whl/ (name .whl in the run call's carry)"; irc=1
  else
    stamp=$(ls -l "${WHEELS[@]}" | md5sum | cut -d' ' -f1)
    if [ -f "$SITE/.wheelhouse.stamp" ] && [ "$(cat "$SITE/.wheelhouse.stamp")" = "$stamp" ]; then
      echo "already installed (same wheels as last time on this machine)"; irc=0
    else
      rm -rf "$SITE"
      "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --disable-pip-version-check --target "$SITE" "${WHEELS[@]}" 2>&1
      irc=$?
      [ "$irc" = 0 ] && echo "$stamp" >"$SITE/.wheelhouse.stamp"
    fi
  fi
  # Subprocesses that set their own PYTHONPATH (the server's worker probe does) would lose
  # /tmp/site and the tree; a .pth in the interpreter's site-packages puts them on every
  # python3's path, ahead of the image's packages, like PYTHONPATH does (on a machine that is
  # thrown away after use). --no-pth leaves it out.
  PTH=""
  if [ "$irc" = 0 ] && [ "$USE_PTH" = 1 ]; then
    sp=$("$PYTHON" -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)
    if [ -n "$sp" ] && [ -w "$sp" ]; then
      PTH="$sp/kernel_eval_gpu_host.pth"
      printf 'import sys; _p = [%s]; sys.path[0:0] = [x for x in _p if x not in sys.path]\n' \
        "'$PWD', '$PWD/client', '$SITE'" >"$PTH"
      # the kernel languages, where scripts/dsl_wheelhouse.py installed them: a site
      # directory (CuTe DSL finds its packages through a .pth file of its own)
      if [ -d "$DSL_SITE" ]; then
        printf 'import site; site.addsitedir(%s)\n' "'$DSL_SITE'" >>"$PTH"
      fi
      echo "wrote $PTH: $(cat "$PTH")"
    else
      echo "site-packages ${sp:-?} not writable: only PYTHONPATH carries /tmp/site and the tree"
    fi
  fi
  echo "$irc" >"$WORK/install.rc"
} >>"$ENVF" 2>&1
irc=$(cat "$WORK/install.rc")
record install "$irc" $((SECONDS - t0)) env.txt "${#WHEELS[@]} wheels -> $SITE; tree on the path${PTH:+ (+ .pth)}"

# ---- env ---------------------------------------------------------------------------------------
t0=$SECONDS
{
  echo; echo "== machine"
  date -u; uname -a; ldd --version 2>&1 | head -1; nproc
  echo; echo "== nvidia-smi -L"; nvidia-smi -L 2>&1
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
    --format=csv 2>&1
  echo; echo "== toolchain"
  command -v nvcc && nvcc --version 2>&1 | tail -2
  command -v ncu && ncu --version 2>&1 | tail -1
  echo; echo "== python"
  timeout 120 "$PYTHON" - <<'PYEOF' 2>&1
import importlib, sys
print("python", sys.version.split()[0], sys.executable)
for name in ("torch", "triton", "cupy", "numpy", "nvtx", "fastapi", "starlette", "uvicorn",
             "pydantic", "pydantic_core", "mcp", "httpx", "httpx2", "anyio"):
    try:
        mod = importlib.import_module(name)
        ver = getattr(mod, "__version__", None)
        if ver is None:
            from importlib.metadata import version
            ver = version({"mcp": "mcp", "pydantic_core": "pydantic-core"}.get(name, name))
        print(f"{name:14s} {ver:24s} {getattr(mod, '__file__', '')}")
    except Exception as exc:  # noqa: BLE001
        print(f"{name:14s} MISSING: {type(exc).__name__}: {exc}")
try:
    import torch
    print("torch.version.cuda", torch.version.cuda, "cuda available", torch.cuda.is_available())
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        print("device0", p.name, f"sm_{p.major}{p.minor}", p.multi_processor_count, "SMs",
              round(p.total_memory / 2**30, 1), "GiB", "count", torch.cuda.device_count())
except Exception as exc:  # noqa: BLE001
    print("torch probe failed:", exc)
try:
    import cupy
    print("cupy runtime", cupy.cuda.runtime.runtimeGetVersion(), "driver",
          cupy.cuda.runtime.driverGetVersion())
except Exception as exc:  # noqa: BLE001
    print("cupy probe failed:", exc)
def v(name):
    mod = sys.modules.get(name)
    return getattr(mod, "__version__", "-") if mod else "missing"
gpu = "no GPU"
try:
    if torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
except Exception:  # noqa: BLE001
    pass
print(f"DEVLINE: {gpu} | python {sys.version.split()[0]} | torch {v('torch')} (cuda "
      f"{getattr(getattr(sys.modules.get('torch'), 'version', None), 'cuda', '-')}) | "
      f"triton {v('triton')} | cupy {v('cupy')} | numpy {v('numpy')}")
PYEOF
  echo; echo "== pip check (host env + $SITE)"
  timeout 60 "$PYTHON" -m pip check --disable-pip-version-check 2>&1 | tail -40
} >>"$ENVF" 2>&1
# short line for the summary
DEVLINE=$(grep '^DEVLINE: ' "$ENVF" | tail -1 | cut -d' ' -f2-)
record env 0 $((SECONDS - t0)) env.txt "$(nvidia-smi -L 2>/dev/null | sed 's/ (UUID.*//' | paste -sd ';' - | cut -c1-80)"

# server import smoke test: the modules that exist in the tree
t0=$SECONDS
mods="fastapi uvicorn pydantic starlette mcp httpx2 kernel_eval_client shared"
for m in app main mcp_server subprocess_worker; do [ -f "$m.py" ] && mods="$mods $m"; done
{
  echo; echo "== import smoke test: $mods"
  timeout 120 "$PYTHON" - $mods <<'PYEOF' 2>&1
import importlib, sys, traceback
bad = 0
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        print("ok  ", name)
    except BaseException:  # noqa: BLE001
        bad += 1
        print("FAIL", name); traceback.print_exc(limit=3)
sys.exit(1 if bad else 0)
PYEOF
  echo "$?" >"$WORK/imports.rc"
} >>"$ENVF" 2>&1
mrc=$(cat "$WORK/imports.rc" 2>/dev/null || echo 1)
record imports "$mrc" $((SECONDS - t0)) env.txt "$(grep -c '^ok  ' "$ENVF") ok, $(grep -c '^FAIL' "$ENVF") failed: $(grep '^FAIL' "$ENVF" | awk '{print $2}' | paste -sd ' ' -)"

# ---- steps -------------------------------------------------------------------------------------
ORDER=()
for s in tests full bench cmd; do
  has_step "$s" || continue
  [ "$s" = tests ] && [ -n "$SUPERSEDED" ] && continue
  ORDER+=("$s")
done
PYTEST_K=(); [ -n "$KEXPR" ] && PYTEST_K=(-k "$KEXPR")
# shellcheck disable=SC2206
PYTEST_X=($PYTEST_EXTRA)

pytest_note() {  # log -> last pytest summary line + counts of FAILED/ERROR
  local line
  line=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error|skipped|deselected|xfailed|xpassed)|no tests ran|^=+ .* in [0-9.]+s' "$1" | tail -1 | sed -e 's/^=* *//' -e 's/ *=*$//')
  echo "${line:-no pytest summary line (see log)}"
}

i=0
for step in "${ORDER[@]}"; do
  left_steps=$(( ${#ORDER[@]} - i )); i=$((i + 1))
  t=$(allot "$step" "$left_steps")
  if [ "$t" -lt 15 ]; then record "$step" SKIP 0 - "budget spent (${t}s left)"; continue; fi
  t0=$SECONDS
  case "$step" in
    tests|full)
      if [ "$step" = tests ]; then log="$OUT/gpu_tests.log"; mark=(-m gpu); else log="$OUT/full_tests.log"; mark=(); fi
      run_logged "$log" "$t" "$PYTHON" -m pytest "${mark[@]}" -p no:cacheprovider -q -rfEs \
        "${PYTEST_K[@]}" "${PYTEST_X[@]}" tests/
      rc=$?
      note="$(rc_note $rc $t)$(pytest_note "$log")"
      [ "$rc" = 5 ] && note="no tests collected (rc 5); $note"
      record "$step" "$rc" $((SECONDS - t0)) "$(basename "$log")" "$note"
      ;;
    bench)
      log="$OUT/bench.log"; : >"$log"
      mapfile -t SCRIPTS < <(ls bench/$BENCH_GLOB.py 2>/dev/null | grep -v '/_' | xargs -r grep -l '__main__' 2>/dev/null)
      if [ ${#SCRIPTS[@]} -eq 0 ]; then
        record bench SKIP 0 - "no bench/$BENCH_GLOB.py with a __main__ block"; continue
      fi
      deadline=$((SECONDS + t)); j=0
      for script in "${SCRIPTS[@]}"; do
        name=$(basename "$script" .py)
        st=$(( (deadline - SECONDS) / (${#SCRIPTS[@]} - j) )); j=$((j + 1))
        if [ "$st" -lt 10 ]; then record "bench:$name" SKIP 0 - "budget spent"; continue; fi
        s0=$SECONDS
        run_logged "$log" "$st" "$PYTHON" "$script" --out "$WORK/bench_$name.json"
        rc=$?
        record "bench:$name" "$rc" $((SECONDS - s0)) bench.log "$(rc_note $rc $st)$( [ -s "$WORK/bench_$name.json" ] && echo "-> bench.json[\"$name\"]" || echo "no JSON written")"
      done
      "$PYTHON" - "$OUT/bench.json" "${SCRIPTS[@]}" <<PYEOF >>"$log" 2>&1
import json, os, sys
merged = {}
for script in sys.argv[2:]:
    name = os.path.splitext(os.path.basename(script))[0]
    path = os.path.join("$WORK", f"bench_{name}.json")
    if not os.path.exists(path):
        merged[name] = {"error": "no output file"}
        continue
    text = open(path).read()
    try:
        merged[name] = json.loads(text)
    except ValueError:
        merged[name] = {"error": "not JSON", "raw": text[:100000]}
json.dump(merged, open(sys.argv[1], "w"), indent=1)
PYEOF
      ;;
    cmd)
      log="$OUT/cmd.log"
      run_logged "$log" "$t" bash -c "$CMD"
      rc=$?
      record cmd "$rc" $((SECONDS - t0)) cmd.log "$(rc_note $rc $t)$(echo "$CMD" | cut -c1-60)"
      ;;
  esac
done

# ---- summary -----------------------------------------------------------------------------------
{
  echo "gpu_host_run: steps=${ORDER[*]:-none} budget=${BUDGET}s elapsed=${SECONDS}s out=$OUT${SUPERSEDED:+ (skipped $SUPERSEDED)}"
  echo "device: ${DEVLINE:-unknown}"
  printf '%-22s %4s %5s  %-14s %s\n' STEP RC SECS LOG NOTE
  printf '%s\n' "${ROWS[@]}"
  for log in "$OUT/gpu_tests.log" "$OUT/full_tests.log"; do
    [ -f "$log" ] || continue
    if grep -qE '^(FAILED|ERROR) ' "$log"; then
      echo "-- failures in $(basename "$log") (first 30):"
      grep -E '^(FAILED|ERROR) ' "$log" | head -30 | cut -c1-240
    fi
  done
  nfiles=$(find "$OUT" -type f | wc -l)
  [ "$nfiles" -gt 8 ] && echo "WARNING: $nfiles files under $OUT; the transfer brings back only 8"
  echo "result: $([ "$FAILS" = 0 ] && echo OK || echo "$FAILS step(s) failed")"
} >"$SUMMARY"
rm -rf "$WORK"
echo
echo "================ $SUMMARY ================"
cat "$SUMMARY"
[ "$FAILS" = 0 ]
