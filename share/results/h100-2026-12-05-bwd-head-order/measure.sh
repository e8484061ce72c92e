#!/usr/bin/env bash
# The wgmma backward's CTA order under a causal mask: plain (a head's key blocks one after the
# other, as on main) against heads interleaved (every head's first key block, then every head's
# second, ...; the deterministic kernels from the last key block), switched at run time by
# CUFLASH_DEV_BWD_INTERLEAVE in a build of the checkout's files with `switch.patch` applied.
# Times causal `seed` and `fa` backward (default and deterministic, fp16/bf16) in two interleaved
# rounds, and checks `verify --backward` under the switch. About 5 minutes.
#
#   share/results/h100-2026-12-05-bwd-head-order/measure.sh [OUT_DIR]
set -uo pipefail
ROOT=$(pwd)
RATIOS=share/results/h200-2026-12-04-query-blocks-80/ratios.py
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
mkdir -p "$O/logs"
source share/scripts/patch_trees.sh  # say, build, cli, ratio, pack
T="timeout 120"
HERE=share/results/h100-2026-12-05-bwd-head-order

checkout_tree order
if ! grep -q CUFLASH_DEV_BWD_INTERLEAVE build/order-src/lib/src/kernels/sm90/backward.cuh; then
  git apply --directory=build/order-src "$HERE/switch.patch" || { say "switch.patch failed"; exit 1; }
fi
build order 16 OFF cuflash_app
B=$(cli order)
[[ -x $B ]] || { say "no cuflash"; exit 1; }

for mode in plain inter; do
  env=()
  [[ $mode == inter ]] && env=(CUFLASH_DEV_BWD_INTERLEAVE=1)
  for shape in "-b 1 --heads 8 --heads-kv 4 -s 1100 -d 128" "-b 1 --heads 8 -s 2100 --seq-k 2000 -d 128" \
               "-b 2 --heads 4 -s 3000 -d 64"; do
    for det in "" "--deterministic"; do
      env "${env[@]}" $T $B verify --backward $det $shape --dtype bf16 --mask causal,causal-top-left \
        >>"$O/logs/verify-$mode.log" 2>&1
      say "verify $mode $shape $det: rc $?"
    done
  done
done

run_set() {  # run_set MODE ROUND
  local env=()
  [[ $1 == inter ]] && env=(CUFLASH_DEV_BWD_INTERLEAVE=1)
  env "${env[@]}" $T $B bench --sweep seed --pass bwd --filter '(fp16|bf16).*causal:1' \
    --out-dir "$O/$1-seed-r$2" >"$O/logs/$1-seed-r$2.log" 2>&1
  env "${env[@]}" $T $B bench --sweep seed --pass bwd --deterministic --filter '(fp16|bf16).*causal:1' \
    --out-dir "$O/$1-seed-det-r$2" >"$O/logs/$1-seed-det-r$2.log" 2>&1
  env "${env[@]}" $T $B bench --sweep fa --pass bwd --filter 'causal:1' \
    --out-dir "$O/$1-fa-r$2" >"$O/logs/$1-fa-r$2.log" 2>&1
}
for r in 1 2; do
  run_set plain $r
  run_set inter $r
  ratio "inter/plain seed causal r$r" plain-seed-r$r inter-seed-r$r . 'd:64' 'd:128' 'sq:1024/' 'sq:4096/' 'sq:8192/' 'sq:16384/'
  ratio "inter/plain seed causal det r$r" plain-seed-det-r$r inter-seed-det-r$r . 'd:64' 'd:128' 'sq:4096/' 'sq:8192/' 'sq:16384/'
  ratio "inter/plain fa causal r$r" plain-fa-r$r inter-fa-r$r . 'd:64' 'd:128' 'sq:512/' 'sq:2048/' 'sq:16384/'
done
for s in seed seed-det fa; do
  PER_CASE=1 python3 $RATIOS "$O/plain-$s-r2" "$O/inter-$s-r2" >"$O/per-case-$s-r2.txt"
done
pack
