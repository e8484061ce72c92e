#!/usr/bin/env bash
# One GPU call, from the repository's root: dq-rotated-groups.patch (beside this script) applied
# to the checkout, the GPU suite and the four sanitizers (gpu_check.sh, which builds build/gpu),
# then on that build the deterministic / default speed of `seed` without a mask at 1k and 4k
# rows, timed default, deterministic, deterministic, default (20 samples a case each), paired by
# share/tools/mode_speed.py. Everything but summary.txt ends up in OUT_DIR/all.tgz.
#   share/results/h100-2026-12-07-dq-rotated/next/check.sh OUT_DIR
set -uo pipefail
O=$(mkdir -p -- "$1" && cd -- "$1" && pwd) || exit 2
{
  nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
  git apply share/results/h100-2026-12-07-dq-rotated/next/dq-rotated-groups.patch &&
    echo "patch applied"
  CTEST_JOBS=8 STAGE_TIMEOUT=300 share/scripts/gpu_check.sh --stages gpu-tests,sanitizers \
    "$O/check" >"$O/check.log" 2>&1
  echo "gpu_check rc $?"
  tail -14 "$O/check.log"
  filter='sq:(1024|4096)/.*causal:0'
  for run in default-1 deterministic-1 deterministic-2 default-2; do
    mode=()
    [[ $run == deterministic-* ]] && mode=(--deterministic)
    timeout -s INT --kill-after=20 100 build/gpu/app/cuflash bench --sweep seed --pass bwd \
      --filter "$filter" --iters 20 "${mode[@]}" --out-dir "$O/pair/$run" >"$O/pair-$run.log" 2>&1
    echo "bench $run: rc $?"
  done
  for r in 1 2; do
    echo "== deterministic / default speed, pair $r"
    PER_CASE=1 python3 share/tools/mode_speed.py "$O/pair/default-$r" "$O/pair/deterministic-$r" \
      'fp32/.*sq:1024/' 'fp32/' '(fp16|bf16)/.*sq:1024/.*d:128/' '(fp16|bf16)/.*sq:1024/.*d:64/' '.'
  done
} 2>&1 | tee "$O/summary.txt"
tar -czf "$O/all.tgz" -C "$O" --exclude=summary.txt --exclude=all.tgz . && \
  find "$O" -mindepth 1 -maxdepth 1 ! -name summary.txt ! -name all.tgz -exec rm -rf {} +
