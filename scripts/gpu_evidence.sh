#!/usr/bin/env bash
# GPU runs of the benchmarks and the GPU tests, one phase at a time, each writing its logs and
# JSON under $OUT (default /tmp/out); bench/results/README.md names the phase behind each
# figure. Run after the wheelhouse install that scripts/gpu_host_run.sh does (docs/GPU_HOST.md):
#
#   export SITE=/opt/kes-site; bash scripts/gpu_host_run.sh cmd --cmd 'bash scripts/gpu_evidence.sh overhead corpus'
#
# Phases (each under its own `timeout`, continuing past failures):
#   overhead     bench/job_overhead.py (SPARES_LIST, default auto,6,32; no spares; cold)
#                -> job_overhead.json
#   contexts     bench/context_rate.py: worker start steps, 1/8/24 at once, and with
#                CUDA_DEVICE_MAX_CONNECTIONS=1                                  -> context_rate.json
#   neighbours   bench/neighbours.py: a timing beside processes idle, stopped, leaving, starting
#                -> neighbours.json
#   adversarial  GPU-marked cheats, escapes and honest kernels, and the seeds' GPU examples
#   root_defaults  a server started as this user with nothing but PORT set (every directory its
#                default), then `kernel-eval suite` on KB_SUITES (default: ext/kb, where carried,
#                and the 17 GB avg-pool problem of the corpus) -> root_defaults.log, root_server.log
#   arena        tests/gpu/test_arena.py (the memory a judge and a kernel's process share)
#   judge        bench/timing_rigour.py --compare: every kernel a /compare candidate against
#                itself, on the judge's clock, beside ncu and do_bench  -> judge_rigour.json
#   identity     bench/identity.py over IDENTITY_DIRS (KernelBench problem folders, e.g. its
#                level3): each problem against itself renamed ModelNew  -> identity.json
#   profile      where a job's time goes (this tree): 100 trivial /evaluate, 40 /compare at
#                JOBS_PER_GPU 1 and 4 -> profile_*.json, profile.log
#   before_after two trees side by side: the tree in BASELINE (default ./baseline, e.g. from
#                `git archive`) and this one, in one call: 200 sequential trivial /evaluate, 100
#                /compare at once, the same as /compare/batch per problem, one batch of 50
#                -> ba_*.json (BA_SIDES="baseline" or "new" and BA_MODES="overhead compare batch
#                batch50" pick a part; TP_ARGS goes to bench/compare_throughput.py, e.g. "--small
#                --num-trials 20", and TP_TAG to the names of its files)
#   gpu_files    the GPU-marked tests of the files GPU_TESTS names -> gpu_files.log
#   full_adversarial  every test of tests/adversarial and tests/compat, CPU-mode ones included
#   corpus       the cheats and honest kernels of tests/adversarial, each answer's median, integrity
#                and timing figures kept, and the build stage's GPU mask -> corpus.log,
#                corpus_answers.jsonl
#   corpus_table scripts/adversarial_corpus.py: every cheat against its honest twin at each size,
#                the speedup review off (CORPUS_K narrows, e.g. "stays_within" for the cheats
#                with a stated expectation) -> corpus_table.md, corpus_rows.jsonl
#   gpu_tests    tests/gpu except the full KernelBench corpus (timing figures, device metrics)
#   integrity_e2e  the end-to-end tests of the timed-sample audit, the reference timed first,
#                the workers' OOM score, bounded scratch and task limit, on the GPU server
#   audit        the timed-sample audit and server-descriptor e2e tests on the GPU server
#   devmetrics   tests/gpu/test_device_metrics.py (every kernel type, /evaluate and /compare)
#   kernelbench  tests/gpu/test_kernelbench_full.py (KERNELBENCH_FILTER narrows it)
#   rigour       bench/timing_rigour.py                                            -> timing_rigour.json
#   throughput   bench/compare_throughput.py --jobs 100, once per JOBS_PER_GPU_LIST value (default
#                "1,4"; GPUS="0" or "0,1" to pick)  -> compare_throughput*.json, throughput_server_j*.log
#   throughput_gpus  one GPU, then every GPU (GPU_LIST, default "0,1"), TP_JOBS (60) each, server
#                logs kept; TP_ENV adds server settings (e.g. CUDA_DEVICE_MAX_CONNECTIONS=1)
#                -> tp_1gpu.json, tp_all.json, tp_*.log
#   languages    after `python3 scripts/dsl_wheelhouse.py install`: the kernel languages' GPU tests
#                (examples, wrong twins, a second job compiling nothing), the JIT store's e2e
#                tests, `kernel-eval health` and client/examples/kernel_languages.py against a
#                server started here  -> languages.log, languages_example.log
#   dsl_escapes  the corpus's escapes from inside each language's process -> dsl_escapes.log
#   soak         bench/soak.py --jobs ${SOAK_JOBS:-2000}                          -> soak.json
#   soak_start   the soak detached (setsid), logs under /var/tmp/kes-soak; SOAK_ARGS adds options
#   soak_collect waits (up to PHASE_TIMEOUT) for that soak, copies soak.json/.md/.log to $OUT;
#                run it before the machine is released, if the soak outlives one command
# PHASE_TIMEOUT (seconds, default 300) caps each phase.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
T=${PHASE_TIMEOUT:-300}
LIVE="$OUT/failures.txt"
reap_servers() {  # servers a killed pytest left running (own sessions), with their workers
  local pid sid
  for pid in $(pgrep -f "$PWD/main.py"); do
    sid=$(ps -o sid= -p "$pid" | tr -d ' ')
    [ -n "$sid" ] && pkill -9 -s "$sid" && echo "reaped the server session $sid left running"
  done
  sleep 1
}
pytest_gpu() {  # log name, pytest args...
  local log="$OUT/$1.log" rc; shift
  LIVE_FAILURES="$LIVE" timeout -k 10 "$T" "$PY" -m pytest -p scripts.pytest_live_failures \
    -p no:cacheprovider -q -rfE --durations=15 "$@" >"$log" 2>&1
  rc=$?
  echo "$(date -u +%T) pytest $* -> rc $rc ($(tail -1 "$log"))"
  reap_servers
}
for phase in "$@"; do
  echo "$(date -u +%T) phase $phase"
  case "$phase" in
    overhead)
      timeout -k 10 "$T" "$PY" bench/job_overhead.py --jobs 50 --spares "${SPARES_LIST:-auto,6,32}" \
        --out "$OUT/job_overhead.json" >"$OUT/job_overhead.log" 2>&1
      echo "rc $?"; cat "$OUT/job_overhead.log" ;;
    contexts)
      timeout -k 10 "$T" "$PY" bench/context_rate.py --counts 1,8,24 --skip-cublas no \
        --env "CUDA_DEVICE_MAX_CONNECTIONS=1" --out "$OUT/context_rate.json" 2>&1
      echo "rc $?" ;;
    neighbours)
      timeout -k 10 "$T" "$PY" bench/neighbours.py --out "$OUT/neighbours.json" 2>&1
      echo "rc $?" ;;
    adversarial) pytest_gpu adversarial -m gpu tests/adversarial tests/compat ;;
    arena) pytest_gpu arena -m gpu --timeout 60 -x tests/gpu/test_arena.py tests/gpu/test_stream_gate.py tests/gpu/test_gpu_flows.py ;;
    root_defaults)
      port=18777
      env -u CACHE_DIR -u JOB_DIR -u JOB_STORE_PATH PORT=$port \
        setsid "$PY" main.py >"$OUT/root_server.log" 2>&1 < /dev/null &
      for _ in $(seq 120); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
      echo "server as $(id -un), health: $(curl -s "http://127.0.0.1:$port/health" | head -c 300)"
      for suite in ${KB_SUITES:-ext/kb corpus/kernelbench/44_avg_pool_17gb_input}; do
        [ -d "$suite" ] || { echo "no $suite here"; continue; }
        timeout -k 10 "$T" "$PY" -m kernel_eval_client.cli suite "$suite" \
          --server "http://127.0.0.1:$port" --timeout 600 --concurrency 4 >>"$OUT/root_defaults.log" 2>&1
        echo "rc $? (suite $suite)"
      done
      cat "$OUT/root_defaults.log"
      pkill -f "$PWD/main.py" ; pkill -f " main.py" ; sleep 2; reap_servers ;;
    judge)
      timeout -k 10 "$T" "$PY" bench/timing_rigour.py --compare --budget-s $((T - 30)) \
        ${RIGOUR_ARGS:-} --out "$OUT/judge_rigour.json" >"$OUT/judge_rigour.log" 2>&1
      echo "rc $?"; tail -40 "$OUT/judge_rigour.log" ;;
    identity)
      timeout -k 10 "$T" "$PY" bench/identity.py ${IDENTITY_DIRS:?IDENTITY_DIRS names the problem folders} \
        --budget-s $((T - 30)) --out "$OUT/identity.json" >"$OUT/identity.log" 2>&1
      echo "rc $?"; grep -E "within|outside" "$OUT/identity.log" ;;
    before_after)
      for side in ${BA_SIDES:-baseline new}; do
        root=$([ "$side" = baseline ] && echo "${BASELINE:-$PWD/baseline}" || echo "$PWD")
        export KES_SERVER_ROOT=$root
        if [ -z "${BA_MODES:-}" ] || [[ " $BA_MODES " == *" overhead "* ]]; then
          timeout -k 10 "$T" "$PY" bench/job_overhead.py --jobs "${BA_EVAL_JOBS:-200}" --spares auto \
            --pool-only --out "$OUT/ba_${side}_overhead.json" >>"$OUT/ba_${side}.log" 2>&1
          echo "rc $? ($side overhead)"; tail -4 "$OUT/ba_${side}.log"
        fi
        for mode in ${BA_MODES:-compare batch batch50}; do
          [ "$mode" = overhead ] && continue
          jobs=$([ "$mode" = batch50 ] && echo 50 || echo "${TP_JOBS:-100}")
          timeout -k 10 "$T" "$PY" bench/compare_throughput.py --jobs "$jobs" --mode "$mode" ${TP_ARGS:-} \
            --out "$OUT/ba_${side}_$mode${TP_TAG:-}.json" >>"$OUT/ba_${side}.log" 2>&1
          echo "rc $? ($side $mode)"; grep -E '"(jobs_per_min|wall_per_job_s|reference_figures|suspicious|[0-9]{3} [a-z_]+)"' "$OUT/ba_${side}_$mode${TP_TAG:-}.json"
        done
        unset KES_SERVER_ROOT
      done ;;
    profile)
      # where a job's time goes, this tree only: trivial /evaluate, then /compare at
      # JOBS_PER_GPU 1 and 4 (timing_figures.spent_ms and worker_calls aggregated per job)
      timeout -k 10 "$T" "$PY" bench/job_overhead.py --jobs "${BA_EVAL_JOBS:-100}" --spares auto \
        --pool-only --out "$OUT/profile_overhead.json" >"$OUT/profile.log" 2>&1
      echo "rc $? (overhead)"; "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); [print(k, json.dumps({x: v[x] for x in ('wall_ms','stage_p50_ms','spent_p50_ms') if x in v})) for k, v in d.items() if isinstance(v, dict)]" "$OUT/profile_overhead.json"
      timeout -k 10 "$T" "$PY" bench/compare_throughput.py --jobs "${TP_JOBS:-40}" \
        --jobs-per-gpu "${JOBS_PER_GPU_LIST:-1,4}" --num-trials "${TP_TRIALS:-100}" \
        --out "$OUT/profile_compare.json" >>"$OUT/profile.log" 2>&1
      echo "rc $? (compare)"; "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); d=d if isinstance(d,list) else [d]; [print(json.dumps({k: r.get(k) for k in ('jobs_per_gpu','jobs_per_min','suspicious','speedup','stage_p50_ms','worker_calls_mean_ms','timing_spent_mean_ms')})) for r in d]" "$OUT/profile_compare.json" ;;
    languages)
      pytest_gpu languages -s -rA tests/gpu/test_kernel_languages.py \
        tests/e2e/test_kernel_languages.py tests/e2e/test_jit_cache.py
      port=18778; url="http://127.0.0.1:$port"
      PORT=$port CACHE_DIR=$(mktemp -d) setsid "$PY" main.py >"$OUT/languages_server.log" 2>&1 < /dev/null &
      for _ in $(seq 180); do curl -sf "$url/health" >/dev/null && break; sleep 1; done
      { "$PY" -m kernel_eval_client.cli health --server "$url"
        for run in first second; do
          echo "== client/examples/kernel_languages.py, $run run"
          (cd client/examples && timeout -k 10 "$T" "$PY" kernel_languages.py "$url"; echo "rc $?")
        done; } >"$OUT/languages_example.log" 2>&1
      cat "$OUT/languages_example.log"
      pkill -f "$PWD/main.py"; sleep 2; reap_servers ;;
    dsl_escapes) pytest_gpu dsl_escapes tests/adversarial/test_escapes_in_kernel_languages.py ;;
    full_adversarial) pytest_gpu full_adversarial tests/adversarial tests/compat ;;
    corpus)  # every cheat and honest kernel, each answer's figures kept
      # CORPUS_TESTS narrows the files, CORPUS_K is a pytest -k expression
      KES_CORPUS_RECORD="$OUT/corpus_answers.jsonl" pytest_gpu corpus \
        ${CORPUS_TESTS:-tests/adversarial/test_cheats.py tests/adversarial/test_honest.py \
        tests/gpu/test_build_stage_sees_no_gpu.py} ${CORPUS_K:+-k "$CORPUS_K"} ;;
    corpus_table)
      timeout -k 10 "$T" "$PY" scripts/adversarial_corpus.py --out "$OUT" ${CORPUS_K:+-k "$CORPUS_K"} \
        >"$OUT/corpus_table.log" 2>&1
      echo "rc $?"; head -5 "$OUT/corpus_table.md"; reap_servers ;;
    gpu_tests) pytest_gpu gpu_tests -m gpu tests/gpu --deselect tests/gpu/test_kernelbench_full.py ;;
    gpu_files) pytest_gpu gpu_files -m gpu ${GPU_TESTS:?GPU_TESTS names the test files} ;;
    integrity_e2e)
      pytest_gpu integrity_e2e tests/e2e/test_timed_sample_audit.py \
        tests/e2e/test_reference_timed_first.py tests/e2e/test_worker_memory_pressure.py \
        tests/e2e/test_worker_disk.py tests/e2e/test_worker_task_limit.py \
        tests/e2e/test_reference_reuse.py ;;
    audit) pytest_gpu audit tests/e2e/test_timed_sample_audit.py tests/e2e/test_server_descriptors.py ;;
    devmetrics) pytest_gpu devmetrics -m gpu tests/gpu/test_device_metrics.py ;;
    kernelbench)
      KERNELBENCH_PROGRESS="$OUT/kernelbench_progress.log" \
        KERNELBENCH_CACHE_DIR=${KERNELBENCH_CACHE_DIR:-/var/tmp/kes-kernelbench-cache} \
        pytest_gpu kernelbench -m gpu tests/gpu/test_kernelbench_full.py
      cp bench/results/kernelbench_fast_p.md bench/results/kernelbench_fast_p.json "$OUT/" 2>/dev/null ;;
    rigour)
      timeout -k 10 "$T" "$PY" bench/timing_rigour.py --budget-s $((T - 30)) \
        --out "$OUT/timing_rigour.json" >"$OUT/timing_rigour.log" 2>&1
      echo "rc $?"; tail -40 "$OUT/timing_rigour.log" ;;
    throughput)
      timeout -k 10 "$T" "$PY" bench/compare_throughput.py --jobs "${TP_JOBS:-100}" ${GPUS:+--gpus "$GPUS"} \
        --jobs-per-gpu "${JOBS_PER_GPU_LIST:-1,4}" --server-log "$OUT/throughput_server.log" \
        --out "$OUT/compare_throughput${GPUS:+_$GPUS}.json" >"$OUT/throughput.log" 2>&1
      echo "rc $?"; tail -30 "$OUT/throughput.log" ;;
    throughput_gpus)
      for gpus in 0 "${GPU_LIST:-0,1}"; do
        name=$([ "$gpus" = 0 ] && echo 1gpu || echo all)
        env ${TP_ENV:-} timeout -k 20 "$T" "$PY" bench/compare_throughput.py --jobs "${TP_JOBS:-60}" \
          --gpus "$gpus" --out "$OUT/tp_$name.json" --server-log "$OUT/tp_${name}_server.log" \
          >"$OUT/tp_$name.log" 2>&1
        echo "rc $? ($gpus)"; tail -4 "$OUT/tp_$name.log"
      done ;;
    soak)
      timeout -k 10 "$T" "$PY" bench/soak.py --jobs "${SOAK_JOBS:-2000}" --out "$OUT/soak.json" \
        >"$OUT/soak.log" 2>&1
      echo "rc $?"; tail -40 "$OUT/soak.log" ;;
    soak_start)  # detached (a new session outlives the command)
      mkdir -p /var/tmp/kes-soak && rm -f /var/tmp/kes-soak/*
      setsid nohup "$PY" bench/soak.py --jobs "${SOAK_JOBS:-2000}" ${SOAK_ARGS:-} \
        --out /var/tmp/kes-soak/soak.json >/var/tmp/kes-soak/soak.log 2>&1 < /dev/null &
      sleep 5; tail -3 /var/tmp/kes-soak/soak.log ;;
    soak_collect)  # wait for the detached soak, then copy its results
      while pgrep -f "bench/soak.py" >/dev/null && [ "$SECONDS" -lt "$T" ]; do sleep 5; done
      cp /var/tmp/kes-soak/soak.* "$OUT/" 2>/dev/null; tail -40 /var/tmp/kes-soak/soak.log ;;
    *) echo "unknown phase $phase" ;;
  esac
done
[ -s "$LIVE" ] && { echo "== failures so far"; grep -c "^FAILED" "$LIVE"; grep "^FAILED" "$LIVE"; }
exit 0
