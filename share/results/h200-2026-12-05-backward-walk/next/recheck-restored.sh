#!/usr/bin/env bash
# After the walk landed (dffa10e), the deterministic head_dim 128 kernel, which does not walk,
# read 3 % slower (call4-recheck). Its PTX now matches the kernel's before the walk again (the
# walk's barriers initialised only where it walks, the slot wait before the query block's head is
# worked out, the dQ reduce inline as before). This times main before the walk (REV, default
# 1c877b1) against the checkout's files: deterministic `seed` head_dim 128 (fp16/bf16) and
# default `seed` head_dim 128, two interleaved rounds, and `fa` backward at 512-1k rows once (the
# walk's gain, which must stay).
# About 6 minutes.
#
#   share/results/h200-2026-12-05-backward-walk/next/recheck-restored.sh [OUT_DIR] [REV]
set -uo pipefail
ROOT=$(pwd)
RATIOS=share/results/h200-2026-12-04-query-blocks-80/ratios.py
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
REV=${2:-1c877b1}
mkdir -p "$O/logs"
source share/scripts/patch_trees.sh  # say, build, cli, ratio, pack
T="timeout 120"

# (head: the checkout's tracked files as they are, not `git archive HEAD`: a checkout whose git
# history lacked the new commits made a first run of this script compare main with itself.)
checkout_tree before "$REV" || { say "no revision $REV here"; exit 1; }
checkout_tree head
say "before: $(git rev-parse --short "$REV"); head: the working tree (git HEAD here $(git rev-parse --short HEAD))"
build before 8 OFF cuflash_app &
build head 8 OFF cuflash_app &
wait
for t in before head; do [[ -x $(cli $t) ]] || { say "no cuflash for $t"; exit 1; }; done

for r in 1 2; do
  for t in before head; do
    $T $(cli $t) bench --sweep seed --pass bwd --deterministic --filter '(fp16|bf16).*d:128' \
      --out-dir "$O/$t-det-r$r" >"$O/logs/$t-det-r$r.log" 2>&1
    $T $(cli $t) bench --sweep seed --pass bwd --filter '(fp16|bf16).*d:128' \
      --out-dir "$O/$t-seed-r$r" >"$O/logs/$t-seed-r$r.log" 2>&1
  done
  ratio "head/before deterministic d128 r$r" before-det-r$r head-det-r$r . 'causal:0' 'causal:1'
  ratio "head/before seed d128 r$r" before-seed-r$r head-seed-r$r .
done
for t in before head; do
  $T $(cli $t) bench --sweep fa --pass bwd --filter 'sq:(512|1024)/' --out-dir "$O/$t-fa" \
    >"$O/logs/$t-fa.log" 2>&1
done
ratio "head/before fa S=512-1k" before-fa head-fa . 'd:64' 'd:128'
PER_CASE=1 python3 $RATIOS "$O/before-det-r2" "$O/head-det-r2" >"$O/per-case-det-r2.txt"
pack
