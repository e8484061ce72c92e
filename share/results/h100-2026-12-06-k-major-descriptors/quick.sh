#!/usr/bin/env bash
# K-major descriptors advanced by the k-step's offset (`candidate.patch`, in the checkout) against
# main (the patch reversed), in one short GPU call: both built side by side (app only), the
# candidate's `verify` on odd shapes, then two interleaved rounds of the cases that trail cuDNN
# most (`fa` forward head_dim 64 causal, `seed` backward head_dim 128 at 4k without a mask).
# Each step is left out where it would not end by DEADLINE seconds (190).
#
#   share/results/h100-2026-12-06-k-major-descriptors/quick.sh [OUT_DIR]
set -uo pipefail
ROOT=$(pwd)
HERE=share/results/h100-2026-12-06-k-major-descriptors
RATIOS=share/results/h200-2026-12-04-query-blocks-80/ratios.py
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
mkdir -p "$O/logs"
source share/scripts/patch_trees.sh  # say, tree, checkout_tree, build_apps, cli, ratio, pack
DEADLINE=${DEADLINE:-190}
say "$(nvidia-smi --query-gpu=name --format=csv,noheader)"
tree main || exit 1
git apply -R --directory=build/main-src "$HERE/candidate.patch" || { say "reverse patch failed"; exit 1; }
checkout_tree cand || exit 1
build_apps main cand || { pack; exit 1; }

if ((SECONDS + 30 < DEADLINE)); then
  timeout 30 "$(cli cand)" verify --seq 1,113,1023 --seq-k 203,1024 --head-dim 64,128 \
    --dtype fp16,bf16 --mask none,causal --backward >"$O/logs/verify-cand.log" 2>&1
  say "verify cand: rc $? | $(tail -1 "$O/logs/verify-cand.log")"
fi
for round in 1 2; do
  for t in main cand; do
    ((SECONDS + 12 < DEADLINE)) || { say "no time left for round $round $t"; break 2; }
    timeout 20 "$(cli $t)" bench --sweep fa --pass fwd --filter 'd:64/causal:1' \
      --out-dir "$O/$t-fwd-r$round" >"$O/logs/$t-fwd-r$round.log" 2>&1
    timeout 20 "$(cli $t)" bench --sweep seed --pass bwd --filter 'sq:4096/.*d:128/causal:0' \
      --out-dir "$O/$t-bwd-r$round" >"$O/logs/$t-bwd-r$round.log" 2>&1
  done
  ratio "cand/main fa fwd d64 causal, round $round" main-fwd-r$round cand-fwd-r$round . 'sq:512/'
  ratio "cand/main seed bwd d128 4k, round $round" main-bwd-r$round cand-bwd-r$round .
done
pack
