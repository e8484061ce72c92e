#!/usr/bin/env bash
# Turns to exponentiate in the wgmma forward (`candidate.patch`, applied to the checkout) against
# main (HEAD), in one short GPU call: both trees built side by side (app only), the candidate's
# forward `verify` on odd shapes, then two interleaved rounds of `fa` forward at head_dim 64
# (every case) and head_dim 128 causal at 512-2k rows. Each step is left out where it would not
# end by DEADLINE seconds (400).
#
#   share/results/h100-2026-12-06-exp-turns/ab.sh [OUT_DIR]
set -uo pipefail
ROOT=$(pwd)
RATIOS=share/results/h200-2026-12-04-query-blocks-80/ratios.py
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
mkdir -p "$O/logs"
source share/scripts/patch_trees.sh  # say, checkout_tree, build_apps, cli, ratio, pack
DEADLINE=${DEADLINE:-400}
say "$(nvidia-smi --query-gpu=name --format=csv,noheader)"
checkout_tree main HEAD && checkout_tree cand || exit 1
build_apps main cand || { pack; exit 1; }
if ((SECONDS + 40 < DEADLINE)); then
  timeout 40 "$(cli cand)" verify --seq 1,113,1023 --seq-k 203,1024 --head-dim 40,64,128,256 \
    --dtype fp16,bf16 --mask none,causal,causal-top-left >"$O/logs/verify-cand.log" 2>&1
  say "verify cand: rc $? | $(tail -1 "$O/logs/verify-cand.log")"
fi
FILTER='d:64/|sq:(512|1024|2048)/.*d:128/causal:1'
for round in 1 2; do
  for t in main cand; do
    ((SECONDS + 45 < DEADLINE)) || { say "no time left for round $round $t"; break 2; }
    timeout 60 "$(cli $t)" bench --sweep fa --pass fwd --filter "$FILTER" \
      --out-dir "$O/$t-r$round" >"$O/logs/$t-r$round.log" 2>&1
    say "bench $t round $round: rc $?"
  done
  ratio "cand/main d64 causal, round $round" main-r$round cand-r$round 'd:64/causal:1'
  ratio "cand/main d64 no mask, round $round" main-r$round cand-r$round 'd:64/causal:0'
  ratio "cand/main d128 causal 512-2k, round $round" main-r$round cand-r$round 'd:128/causal:1'
done
for round in 1 2; do
  [[ -d $O/cand-r$round ]] && PER_CASE=1 python3 $RATIOS "$O/main-r$round" "$O/cand-r$round" \
    >"$O/per-case-r$round.txt" 2>&1
done
pack
