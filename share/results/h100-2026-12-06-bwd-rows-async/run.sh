#!/usr/bin/env bash
# The loader's LSE and D by cp.async on the backward kernels of one key block (candidate.patch)
# against the checkout, in one GPU call of about 9 minutes: share/scripts/ab_patch.sh on the `fa`
# backward (both trees built, the candidate's `verify`, three interleaved rounds), then the
# candidate tree's GPU tests (the whole suite, in the time left). A summary last.
#
#   share/results/h100-2026-12-06-bwd-rows-async/run.sh OUT_DIR
set -uo pipefail
HERE=share/results/h100-2026-12-06-bwd-rows-async
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || exit 2
began=$SECONDS
# (SKIP_TESTS=1: the A/B alone)
share/scripts/ab_patch.sh "$HERE/candidate.patch" "$O/ab" --sweep fa --pass bwd --rounds 3 \
  --deadline "${DEADLINE:-270}" --group 'd:128/' --group 'd:64/' --group 'd:128/.*causal:0' \
  --group 'sq:(512|1024)/' --group 'sq:(4096|8192|16384)/' >"$O/ab.log" 2>&1
echo "ab_patch: rc $? $((SECONDS - began)) s" | tee "$O/summary.txt"
[[ ${SKIP_TESTS:-0} == 1 ]] && { cat "$O/ab/summary.txt"; exit 0; }
t=$SECONDS
(cd build/cand-src && cmake --preset gpu -DCMAKE_PREFIX_PATH="$PWD/../../.deps" \
   -DCUFLASH_BUILD_TESTS=ON -DCUFLASH_BUILD_EXAMPLES=OFF &&
   cmake --build build/gpu -j16 --target cuflash_gpu_tests) >"$O/test-build.log" 2>&1
echo "candidate's GPU tests built: rc $? $((SECONDS - t)) s" | tee -a "$O/summary.txt"
left=$((520 - SECONDS))
if ((left > 60)); then
  t=$SECONDS
  timeout "$left" ctest --test-dir build/cand-src/build/gpu -L gpu -j8 --output-on-failure \
    >"$O/gpu-tests.log" 2>&1
  echo "candidate's GPU suite (limit $left s): rc $? $((SECONDS - t)) s | $(grep -E 'tests passed|tests failed' "$O/gpu-tests.log")" |
    tee -a "$O/summary.txt"
fi
cat "$O/ab/summary.txt"
