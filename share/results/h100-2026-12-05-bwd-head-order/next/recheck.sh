#!/usr/bin/env bash
# Second round for the landed order (75192dd): the checkout against the same files with
# `candidate.patch` reversed (the order before), both built (app only), then three interleaved
# rounds of the deterministic and default `seed` causal backward at 8k and 16k (where one round
# read head_dim 128 deterministic 1.035-1.045, within that call's noise), about 4 minutes.
#
#   share/results/h100-2026-12-05-bwd-head-order/next/recheck.sh [OUT_DIR]
set -uo pipefail
ROOT=$(pwd)
RATIOS=share/results/h200-2026-12-04-query-blocks-80/ratios.py
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
mkdir -p "$O/logs"
source share/scripts/patch_trees.sh  # say, build, cli, ratio, pack
T="timeout 120"
NEXT=share/results/h100-2026-12-05-bwd-head-order/next

checkout_tree before
git apply -R --directory=build/before-src "$NEXT/candidate.patch" || { say "reverse patch failed"; exit 1; }
checkout_tree after
build before 8 OFF cuflash_app &
build after 8 OFF cuflash_app &
wait
for t in before after; do [[ -x $(cli $t) ]] || { say "no cuflash for $t"; exit 1; }; done

FILTER='(fp16|bf16).*sq:(8192|16384).*causal:1'
for round in 1 2 3; do
  for t in before after; do
    for mode in "" "--deterministic"; do
      name=$t-r$round${mode:+-det}
      $T $(cli $t) bench --sweep seed --pass bwd $mode --filter "$FILTER" --out-dir "$O/$name" \
        >"$O/logs/$name.log" 2>&1
    done
  done
  ratio "after/before round $round default" before-r$round after-r$round . 'd:64' 'd:128'
  ratio "after/before round $round det" before-r$round-det after-r$round-det . 'd:64' 'd:128'
done
for round in 1 2 3; do
  PER_CASE=1 python3 $RATIOS "$O/before-r$round-det" "$O/after-r$round-det" >"$O/per-case-det-r$round.txt"
done
pack
