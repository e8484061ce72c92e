#!/usr/bin/env bash
# dQ^T staged in the next iteration, while the next query block's S^T is multiplied
# (candidate.patch: sm90/backward.cuh and wgmma.cuh, query blocks of 80 rows), in one GPU call:
# the checkout (main) and the checkout with the patch built side by side; the candidate's GPU
# tests of the 80-row kernels; its `verify --backward` on shapes that take them (default and
# deterministic); three interleaved rounds of the default backward at head_dim 128 from 2048
# rows on `seed` and `fa` (candidate, main), two of the deterministic one, then the default
# backward of both whole sweeps in both trees. Summary last; everything but it in
# OUT_DIR/all.tgz.
#
#   share/results/h100-2026-12-06-bwd-dq-staged-late/run.sh OUT_DIR
set -uo pipefail
ROOT=$(pwd)
HERE=$(cd -- "$(dirname -- "$0")" && pwd)
O=$(mkdir -p -- "${1:-out}/logs" && cd -- "${1:-out}" && pwd) || exit 2
source share/scripts/patch_trees.sh  # say, tree, build, cli, pack
say "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
tree cand "$HERE/candidate.patch" && tree main || exit 1
began=$SECONDS
(cd build/cand-src && cmake --preset gpu -DCMAKE_PREFIX_PATH="$ROOT/.deps" \
   -DCUFLASH_BUILD_EXAMPLES=OFF && cmake --build build/gpu -j10 --target cuflash_app \
   cuflash_gpu_tests) >"$O/logs/build-cand.log" 2>&1 &
build main 6 OFF cuflash_app &
wait
say "builds: $((SECONDS - began)) s"
[[ -x $(cli cand) && -x $(cli main) ]] || { say "a build failed"; exit 1; }

began=$SECONDS
(cd build/cand-src && timeout 150 ctest --test-dir build/gpu -L gpu \
   -R "query blocks of 80|CTAs walk" -j6 --output-on-failure) >"$O/logs/gpu-tests.log" 2>&1
say "GPU tests (80-row blocks): rc $? $((SECONDS - began)) s | $(grep -E 'tests passed|tests failed' "$O/logs/gpu-tests.log")"
for mode in default deterministic; do
  flag=(); [[ $mode == deterministic ]] && flag=(--deterministic)
  began=$SECONDS
  timeout 100 "$(cli cand)" verify --seq 2048,2100 --seq-k 1023,2048 --head-dim 96,128 \
    --dtype fp16,bf16 --mask none,causal,causal-top-left --heads 4 --heads-kv 2 --backward \
    "${flag[@]}" >"$O/logs/verify-cand-$mode.log" 2>&1
  say "verify --backward ($mode): rc $? $((SECONDS - began)) s | $(tail -1 "$O/logs/verify-cand-$mode.log")"
done

bench() {  # bench TREE NAME SWEEP FILTER [--deterministic]
  timeout 120 "$(cli "$1")" bench --sweep "$3" --pass bwd --filter "$4" "${@:5}" \
    --out-dir "$O/$2" >"$O/logs/$2.log" 2>&1 || say "bench $2: rc $?"
}
ROWS80='(fp16|bf16)/.*sq:(2048|4096|8192|16384)/.*d:128/'
for r in 1 2 3; do
  for sweep in seed fa; do
    bench cand "cand-$sweep-r$r" $sweep "$ROWS80"
    bench main "main-$sweep-r$r" $sweep "$ROWS80"
    if ((r < 3)); then
      bench cand "cand-det-$sweep-r$r" $sweep "$ROWS80" --deterministic
      bench main "main-det-$sweep-r$r" $sweep "$ROWS80" --deterministic
    fi
  done
  say "bench round $r done"
done
for sweep in seed fa; do
  bench cand "cand-$sweep-all" $sweep .
  bench main "main-$sweep-all" $sweep .
done
say "whole sweeps done"
python3 "$HERE/ratios.py" "$O" | tee -a "$O/summary.txt"
pack
