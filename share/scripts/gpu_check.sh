#!/usr/bin/env bash
# The whole check on a GPU machine, in one go: configure and build (preset `gpu`, dependencies from
# the staged bundle .deps/, see stage_deps_bundle.sh), the GPU tests, the host tests, the four
# compute-sanitizer tools on the "[sanitizer]" test subset, a `cuflash verify` sweep and a short
# `cuflash bench --verify` run.
#
#   usage: share/scripts/gpu_check.sh [--stages LIST] [LOG_DIR]   (default: ./gpu-check-logs)
#   environment: CTEST_JOBS (tests at once, default 1), STAGE_TIMEOUT (seconds, default 1800)
#   --stages LIST: the stages to run after the build, comma-separated, out of gpu-tests,
#     host-tests, sanitizers, verify, bench (default: all); e.g. --stages gpu-tests,sanitizers
#     where the machine time is short. The others show as "SKIPPED (--stages)" and do not fail.
#
# Every stage writes its own log into LOG_DIR. A failed stage does not stop the next ones (only
# the stages that need a fresh build are skipped when the build fails, so stale binaries are never
# tested). A PASS/FAIL table comes last; the exit status is non-zero when anything failed.
set -uo pipefail

# -h/--help prints the comment above; any other option is refused (an argument starting with
# "-" would otherwise be taken for a folder).
usage() { sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
refuse() { echo "gpu_check.sh: $1 (see --help)" >&2; exit 2; }
KNOWN_STAGES=,gpu-tests,host-tests,sanitizers,verify,bench,
STAGES=$KNOWN_STAGES
LOG_DIR=
while (($#)); do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --stages)
      [[ -n ${2:-} && ${2//,/} != "" ]] || refuse "--stages needs a list"
      IFS=, read -ra asked <<<"$2"
      for stage in "${asked[@]}"; do
        [[ $KNOWN_STAGES == *",$stage,"* ]] || refuse "unknown stage '$stage' in --stages"
      done
      STAGES=,$2,
      shift 2 ;;
    -*) refuse "unknown option $1" ;;
    *)
      [[ -z $LOG_DIR ]] || refuse "one log folder only, not '$LOG_DIR' and '$1'"
      LOG_DIR=$1
      shift ;;
  esac
done
wanted() { [[ $STAGES == *",$1,"* ]]; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LOG_DIR=${LOG_DIR:-gpu-check-logs}
mkdir -p "$LOG_DIR" || { echo "cannot create log folder $LOG_DIR" >&2; exit 2; }
LOG_DIR=$(cd "$LOG_DIR" && pwd)
cd "$ROOT" || exit 2

BUILD=build/gpu
GPU_TESTS=$BUILD/tests/cuflash_gpu_tests
CLI=$BUILD/app/cuflash
SANITIZER_TOOLS=(memcheck racecheck initcheck synccheck)
# A hung kernel must not hang the whole check: the sanitizer runs and the sweep get a time limit
# (ctest has its own per-test limit, 1500 s by default).
STAGE_TIMEOUT=${STAGE_TIMEOUT:-1800}
# Tests ctest runs at once (GPU and host tests alike), 1 by default. The GPU suite's tests take
# minutes each (the 100-run determinism checks, the varlen sweep); 8 at once ran the suite in
# about 4 minutes on an H100.
CTEST_JOBS=${CTEST_JOBS:-1}

STAGE_NAMES=()
STAGE_RESULTS=()
STAGE_SECONDS=()

record() {  # record NAME RESULT SECONDS
  STAGE_NAMES+=("$1")
  STAGE_RESULTS+=("$2")
  STAGE_SECONDS+=("$3")
}

# run_stage NAME LOG COMMAND...: runs COMMAND with stdout and stderr in LOG_DIR/LOG.
run_stage() {
  local name=$1 log=$LOG_DIR/$2 start=$SECONDS status
  shift 2
  echo "== $name  ->  $log" >&2
  "$@" >"$log" 2>&1
  status=$?
  if ((status == 0)); then
    record "$name" PASS $((SECONDS - start))
  else
    record "$name" "FAIL (exit $status)" $((SECONDS - start))
  fi
  return "$status"
}

skip_stage() {  # skip_stage NAME REASON
  echo "== $1  skipped: $2" >&2
  record "$1" "FAIL (skipped: $2)" 0
}

# --- Stages ---------------------------------------------------------------------------------------

environment() {
  date -u
  uname -a
  nvidia-smi || echo "nvidia-smi failed"
  nvcc --version || echo "nvcc not found"
  compute-sanitizer --version || echo "compute-sanitizer not found"
  cmake --version
  git -C "$ROOT" log -1 --format='commit %H %s' 2>/dev/null
  git -C "$ROOT" status --short 2>/dev/null
}

# Tests and examples included (build_gpu.sh sets them on every call).
build() { bash share/scripts/build_gpu.sh --jobs 16; }

gpu_tests() {
  ctest --test-dir "$BUILD" -L gpu -j "$CTEST_JOBS" --output-on-failure --no-tests=error
}

host_tests() {
  ctest --test-dir "$BUILD" -LE gpu -j "$CTEST_JOBS" --output-on-failure --no-tests=error
}

# sanitize TOOL: the [sanitizer] subset under one compute-sanitizer tool. The exit code alone is
# not trusted: the tool's summary line must be there and report 0 errors.
sanitize() {
  local tool=$1 log=$LOG_DIR/sanitizer-$1.log
  local extra=() tests="[sanitizer]"
  [[ $tool == memcheck ]] && extra=(--leak-check full)
  # initcheck reports the reads of rows that only the bulk copy wrote as uninitialized (it appears
  # not to track those writes); only the "[bulk-store]" cases read such rows back
  # (tests/gpu/test_gpu_attention.cpp).
  [[ $tool == initcheck ]] && tests="[sanitizer]~[bulk-store]"
  timeout --kill-after=30 "$STAGE_TIMEOUT" \
    compute-sanitizer --tool "$tool" --error-exitcode 9 "${extra[@]}" \
    "$GPU_TESTS" "$tests" --warn NoTests >"$log" 2>&1
  local status=$?
  # racecheck sums up as "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)", the
  # other tools as "ERROR SUMMARY: N errors".
  local clean='ERROR SUMMARY: 0 errors'
  [[ $tool == racecheck ]] && clean='RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)'
  grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log"
  if ! grep -qF "$clean" "$log"; then
    echo "$tool: no '$clean' line in $log"
    ((status == 0)) && status=1
  fi
  return "$status"
}

# Each sweep runs even when one before it failed (every failure then shows in verify.log); the
# stage fails with the first failing sweep's status.
verify_sweep() {
  local status=0
  run_verify() {  # run_verify OUTPUT ARGS...: one `cuflash verify` into LOG_DIR/OUTPUT
    local output=$1
    shift
    timeout --kill-after=30 "$STAGE_TIMEOUT" "$CLI" verify "$@" --backward --format json \
      >"$LOG_DIR/$output"
    local result=$?
    ((result != 0 && status == 0)) && status=$result
    return 0
  }
  run_verify verify.json --seq 1,113,1023 --seq-k 203,1024 --head-dim 32,64,128 \
    --dtype fp16,bf16,fp32 --mask none,causal,causal-top-left
  # Head dims on the tuned kernels of 96, 192, 256 and padded ones (40 on 64's, 200 on 256's).
  run_verify verify-head-dims.json --heads 4 --heads-kv 2 --seq 1,113,1023 --seq-k 1024 \
    --head-dim 40,96,192,200,256 --dtype fp16,bf16,fp32 --mask none,causal
  # Variable-length batches: lengths 1, 113, 1023, 2048 against keys of other lengths. fp32
  # pairs the one-key sequence with the one-query one, as its GPU test does: 1023 queries on one
  # key leave dK a sum of terms that cancel exactly, where the split-TF32 dP against the fp32 D
  # exceeds the fp32 rule (tests/gpu/test_gpu_varlen.cpp, kOtherKeyLengthsFp32).
  local dtype keys
  for dtype in fp16,bf16 fp32; do
    keys=1023,113,1,2048
    [[ $dtype == fp32 ]] && keys=1,1023,113,2048
    run_verify "verify-varlen-${dtype/,/-}.json" --layout thd --seqlens 1,113,1023,2048 \
      --seqlens-k "$keys" --heads 4 --heads-kv 2 --head-dim 40,64,128,256 --dtype "$dtype" \
      --mask none,causal,causal-top-left
  done
  return "$status"
}

# A short timed sweep with --verify: the benchmark path end to end (graph timing, formats).
bench_smoke() {
  timeout --kill-after=30 "$STAGE_TIMEOUT" \
    "$CLI" bench -s 1024 -d 64,128 --dtype fp16,bf16,fp32 --causal --warmup 2 --iters 5 --verify \
    --format markdown
}

# --- Main -----------------------------------------------------------------------------------------

environment >"$LOG_DIR/environment.log" 2>&1

run_stage "configure and build" build.log build
built=$?

# run_wanted STAGE NAME LOG COMMAND...: run_stage, or a SKIPPED row when --stages leaves STAGE out.
run_wanted() {
  local stage=$1
  shift
  if wanted "$stage"; then
    run_stage "$@"
  else
    record "$1" "SKIPPED (--stages)" 0
  fi
}

if ((built == 0)); then
  run_wanted gpu-tests "gpu tests (ctest -L gpu)" gpu-tests.log gpu_tests
  run_wanted host-tests "host tests (ctest -LE gpu)" host-tests.log host_tests
  for tool in "${SANITIZER_TOOLS[@]}"; do
    run_wanted sanitizers "compute-sanitizer $tool" "sanitizer-$tool.summary.log" sanitize "$tool"
  done
  run_wanted verify "cuflash verify sweep" verify.log verify_sweep
  run_wanted bench "cuflash bench --verify" bench-smoke.log bench_smoke
else
  for stage in "gpu tests (ctest -L gpu)" "host tests (ctest -LE gpu)" \
    "${SANITIZER_TOOLS[@]/#/compute-sanitizer }" "cuflash verify sweep" \
    "cuflash bench --verify"; do
    skip_stage "$stage" "no fresh build"
  done
fi

# --- Summary --------------------------------------------------------------------------------------

failures=0
ran=0
for result in "${STAGE_RESULTS[@]}"; do
  [[ $result == SKIPPED* ]] && continue
  ran=$((ran + 1))
  [[ $result == PASS ]] || failures=$((failures + 1))
done
skipped=
((ran < ${#STAGE_RESULTS[@]})) && skipped=", $((${#STAGE_RESULTS[@]} - ran)) skipped by --stages"

print_summary() {
  printf '%-32s %-30s %8s\n' STAGE RESULT SECONDS
  for i in "${!STAGE_NAMES[@]}"; do
    printf '%-32s %-30s %8s\n' "${STAGE_NAMES[$i]}" "${STAGE_RESULTS[$i]}" "${STAGE_SECONDS[$i]}"
  done
  if ((failures == 0)); then
    echo "ALL $ran STAGES PASSED$skipped (logs in $LOG_DIR)"
  else
    echo "$failures OF $ran STAGES FAILED$skipped (logs in $LOG_DIR)"
  fi
}

print_summary >"$LOG_DIR/summary.txt"
echo
cat "$LOG_DIR/summary.txt"
((failures == 0))
