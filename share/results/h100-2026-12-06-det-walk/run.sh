#!/usr/bin/env bash
# The deterministic backward walking key blocks, in one GPU call: the build (preset `gpu`), its
# GPU tests (the deterministic walk's test case, the default walk's, the deterministic ones on a
# workspace of NaN bytes and the 100-run bits of the small matrix), the sanitizer subset under
# the four tools, then `fa` backward at 512 and 1k rows, default and deterministic alternately,
# two runs of three rounds each; det_speed.py gives the deterministic/default speed per case.
#
#   share/results/<this folder>/run.sh [OUT_DIR]
set -uo pipefail
HERE=$(dirname "${BASH_SOURCE[0]}")
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
mkdir -p "$O/logs"
say() { echo "$*" | tee -a "$O/summary.txt"; }
# Everything but the summary into all.tgz (written beside the folder, then moved in).
pack() {
  (cd "$O" && tar -czf "$O.all.tgz" --exclude=./summary.txt . && mv "$O.all.tgz" all.tgz &&
    find . -mindepth 1 ! -path ./all.tgz ! -path ./summary.txt -delete)
}
say "$(nvidia-smi --query-gpu=name --format=csv,noheader) $(git log -1 --format=%h 2>/dev/null)"
start=$SECONDS
cmake --preset gpu -DCMAKE_PREFIX_PATH="$PWD/.deps" >"$O/logs/configure.log" 2>&1 &&
  cmake --build build/gpu -j16 >"$O/logs/build.log" 2>&1
built=$?
say "build: rc $built, $((SECONDS - start)) s"
((built == 0)) || { pack; exit 1; }
T=build/gpu/tests/cuflash_gpu_tests
CLI=build/gpu/app/cuflash
run_tests() {  # run_tests NAME SECONDS FILTER
  local s=$SECONDS
  timeout "$2" "$T" "$3" >"$O/logs/$1.log" 2>&1
  say "tests $1: rc $? $((SECONDS - s)) s | $(grep -E 'test cases|All tests' "$O/logs/$1.log" | tail -1)"
}
run_tests walk-deterministic 240 "[backward_walk][deterministic]"
run_tests walk-default 120 "[backward_walk]~[deterministic]"
run_tests deterministic-bits 150 "*100 runs"
for tool in memcheck racecheck initcheck synccheck; do
  filter="[sanitizer]"
  [[ $tool == initcheck ]] && filter="[sanitizer]~[bulk-store]"
  s=$SECONDS
  timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 "$T" "$filter" \
    >"$O/logs/sanitizer-$tool.log" 2>&1
  say "$tool: rc $? $((SECONDS - s)) s | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$O/logs/sanitizer-$tool.log" | head -1)"
done
folders=()
for run in 1 2; do
  for mode in default deterministic; do
    flag=()
    [[ $mode == deterministic ]] && flag=(--deterministic)
    timeout 90 "$CLI" bench --sweep fa --pass bwd --filter 'sq:(512|1024)/' --rounds 3 \
      "${flag[@]}" --out-dir "$O/$mode-$run" >"$O/logs/bench-$mode-$run.log" 2>&1
    say "bench $mode $run: rc $?"
    folders+=("$O/$mode-$run")
  done
done
python3 "$HERE/det_speed.py" "${folders[@]}" >"$O/det_speed.txt" 2>&1
cat "$O/det_speed.txt" | tee -a "$O/summary.txt"
pack
