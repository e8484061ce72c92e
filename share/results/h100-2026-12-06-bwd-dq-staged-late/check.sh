#!/usr/bin/env bash
# The checks of the landed change on one GPU, in about 5 minutes: the build (preset gpu,
# app and GPU tests), the "[sanitizer]" subset under the four compute-sanitizer tools (initcheck
# without the "[bulk-store]" cases, as share/scripts/gpu_check.sh runs them; the subset now has
# the 80-row kernels), the GPU tests of the backward on 80-row blocks, then the whole GPU suite
# in what time is left. Logs in OUT_DIR, a summary last.
#
#   share/results/h100-2026-12-06-bwd-dq-staged-late/check.sh OUT_DIR
set -uo pipefail
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || exit 2
began=$SECONDS
say() { echo "$*" | tee -a "$O/summary.txt"; }
say "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader); commit $(git log -1 --format=%h 2>/dev/null)"
(cmake --preset gpu -DCMAKE_PREFIX_PATH="$PWD/.deps" -DCUFLASH_BUILD_EXAMPLES=OFF &&
   cmake --build build/gpu -j16 --target cuflash_app cuflash_gpu_tests) >"$O/build.log" 2>&1
say "build: rc $? $((SECONDS - began)) s"
TESTS=build/gpu/tests/cuflash_gpu_tests
for tool in memcheck racecheck initcheck synccheck; do
  subset="[sanitizer]" extra=()
  [[ $tool == initcheck ]] && subset="[sanitizer]~[bulk-store]"
  [[ $tool == memcheck ]] && extra=(--leak-check full)
  t=$SECONDS
  timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 "${extra[@]}" "$TESTS" \
    "$subset" --warn NoTests >"$O/sanitizer-$tool.log" 2>&1
  say "$tool: rc $? $((SECONDS - t)) s | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|test cases' "$O/sanitizer-$tool.log" | tr '\n' ' ')"
done
t=$SECONDS
timeout 120 ctest --test-dir build/gpu -L gpu -R "query blocks of 80|CTAs walk" -j6 \
  --output-on-failure >"$O/gpu-tests-80.log" 2>&1
say "GPU tests on 80-row blocks: rc $? $((SECONDS - t)) s | $(grep -E 'tests passed|tests failed' "$O/gpu-tests-80.log")"
left=$((400 - SECONDS))
if ((left > 60)); then
  t=$SECONDS
  timeout "$left" ctest --test-dir build/gpu -L gpu -j8 --output-on-failure >"$O/gpu-tests.log" 2>&1
  say "whole GPU suite (limit ${left} s): rc $? $((SECONDS - t)) s | $(grep -E 'tests passed|tests failed' "$O/gpu-tests.log")"
fi
