#!/usr/bin/env bash
# The deterministic backward with two reduce threads (dq-two-reducers.patch) against main, one
# GPU call: main's tool built and timed, then the patch applied and the tool rebuilt and timed,
# each the backward of `fa`'s head_dim 64 cases without a mask at 1k and 2k rows (the ones below
# 0.85x the default in the H200 packages) in the order default, deterministic, deterministic,
# default; then the 100-run bit test of the deterministic backward on the patched build.
#   share/results/h200-2026-12-07-main/next/run.sh OUT_DIR   (from main's tree; the patch is
#   applied for the second build and taken back at the end)
set -uo pipefail
HERE=share/results/h200-2026-12-07-main/next
O=$(mkdir -p -- "$1" && cd -- "$1" && pwd) || exit 2
time_modes() {  # $1: label
  for run in default-1 deterministic-1 deterministic-2 default-2; do
    mode=()
    [[ $run == deterministic-* ]] && mode=(--deterministic)
    for shape in "-b 16 --heads 32 -s 1024" "-b 8 --heads 32 -s 2048"; do
      # shellcheck disable=SC2086
      build/gpu/app/cuflash bench $shape -d 64 --dtype fp16,bf16 --pass bwd --iters 20 \
        "${mode[@]}" 2>&1 | grep '^bwd' | sed "s/^/$1 $run /"
    done
  done
}
share/scripts/build_gpu.sh --no-tests cuflash >"$O/build-main.log" 2>&1 || { echo "main build failed"; exit 1; }
time_modes main | tee "$O/times.txt"
git apply "$HERE/dq-two-reducers.patch" || exit 1
share/scripts/build_gpu.sh cuflash cuflash_gpu_tests >"$O/build-cand.log" 2>&1 || { echo "candidate build failed"; exit 1; }
time_modes cand | tee -a "$O/times.txt"
timeout 120 build/gpu/tests/cuflash_gpu_tests "deterministic backward: dQ, dK and dV are the same bits over 100 runs" \
  >"$O/bits-test.log" 2>&1
echo "bit test: rc $?"; tail -3 "$O/bits-test.log"
git apply -R "$HERE/dq-two-reducers.patch"
