#!/usr/bin/env bash
# Second round for the landed order (75192dd): the checkout against the same files with
# `order-before.patch` applied (lib/ as it was at 1772384, the order before). `candidate.patch`
# no longer reverses after the review mends of 6308c90; `order-before.patch` was made again
# against the tree of the commit after 63dddcd, which groups heads (after later changes to lib/,
# make it again with `git diff -R 1772384 -- lib/`). Both are built (app only); then, in two
# interleaved rounds, the deterministic `seed` backward (fp16/bf16, every mask: one round read
# head_dim 128 causal 16k, plain then, in groups of heads since, at 1.035-1.045 of the time; no
# mask was not timed) and the default `seed` causal backward at 8k and 16k; then the
# deterministic `fa` backward (not timed against the order before) in one round. About 6
# minutes.
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

tree before "$NEXT/order-before.patch" || exit 1
checkout_tree after
build before 8 OFF cuflash_app &
build after 8 OFF cuflash_app &
wait
for t in before after; do [[ -x $(cli $t) ]] || { say "no cuflash for $t"; exit 1; }; done

for round in 1 2; do
  for t in before after; do
    $T $(cli $t) bench --sweep seed --pass bwd --deterministic --filter '(fp16|bf16)/' \
      --out-dir "$O/$t-r$round-det" >"$O/logs/$t-r$round-det.log" 2>&1
    $T $(cli $t) bench --sweep seed --pass bwd --filter '(fp16|bf16).*sq:(8192|16384).*causal:1' \
      --out-dir "$O/$t-r$round" >"$O/logs/$t-r$round.log" 2>&1
  done
  ratio "after/before seed det round $round" before-r$round-det after-r$round-det \
    'causal:1' 'causal:0' 'd:64.*causal:1' 'd:128.*causal:1'
  ratio "after/before seed default causal 8k-16k round $round" before-r$round after-r$round \
    . 'd:64' 'd:128'
  PER_CASE=1 python3 $RATIOS "$O/before-r$round-det" "$O/after-r$round-det" \
    >"$O/per-case-det-r$round.txt"
done
for t in before after; do
  $T $(cli $t) bench --sweep fa --pass bwd --deterministic --out-dir "$O/$t-fa-det" \
    >"$O/logs/$t-fa-det.log" 2>&1
done
ratio "after/before fa det" before-fa-det after-fa-det \
  'causal:1' 'causal:0' 'd:64.*causal:1' 'd:128.*causal:1'
PER_CASE=1 python3 $RATIOS "$O/before-fa-det" "$O/after-fa-det" >"$O/per-case-fa-det.txt"
pack
