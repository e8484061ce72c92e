#!/usr/bin/env bash
# Measures this folder's forward patches against the tree they apply to, on one H200, in one go
# (about 8 minutes); then, as a second run on the same machine, the candidate's GPU suite and
# compute-sanitizer racecheck / synccheck (`measure.sh suite`, about 6 minutes).
#
#   share/results/h200-2026-12-04-fwd-tall-tiles/next/measure.sh [OUT_DIR]     (default: out)
#   share/results/h200-2026-12-04-fwd-tall-tiles/next/measure.sh suite [OUT_DIR]
#
# Three trees from the checkout's HEAD (git archive), each under build/<name>-src with its build
# in build/<name>-src/build/gpu:
#   base   HEAD as it is;
#   both   narrow-and-staging.patch (narrow last blocks on two warpgroups, O staged without
#          padding, a second Q slot at head_dim 128), the backward's descriptor prefetch
#          (../../h200-2026-12-04-prologue-groups-d96/next/prefetch-descriptors.patch) and
#          dev-force-tiles.patch (CUFLASH_DEV_TILES=tall|wide overrides the head_dim 64 tiling;
#          unset, the launch's estimate picks as before);
#   both3  both's, plus narrow-tall-tiles.patch (narrow last blocks on tall tiles too).
# Then: `verify` of both3; SDPA cuDNN and `fa` forward round 1 of each tree; `fa` backward of
# base and both (their backward kernels differ by the prefetch alone); `seed` forward of each
# tree with SDPA cuDNN; `variants` forward of base and both; `fa` head_dim 64 causal of both3
# with the tiling forced each way; `fa` forward round 2. Each group's ratios go to summary.txt
# as soon as it ran, every step has a time limit. Each result package's `kernels` says which
# kernels ran. The O staging's share shows in head_dim 128 without a mask (both / base), which
# narrow blocks do not reach at these lengths (multiples of 128 keys).
set -uo pipefail

ROOT=$(pwd)
NEXT=share/results/h200-2026-12-04-fwd-tall-tiles/next
PREFETCH=share/results/h200-2026-12-04-prologue-groups-d96/next/prefetch-descriptors.patch
RATIOS=share/results/h200-2026-12-04-query-blocks-80/ratios.py
BOTH=("$NEXT/narrow-and-staging.patch" "$NEXT/dev-force-tiles.patch" "$PREFETCH")
MODE=measure
if [[ ${1:-} == suite ]]; then MODE=suite; shift; fi
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
mkdir -p "$O/logs"
source share/scripts/patch_trees.sh  # say, tree, build, cli, ratio, pack
# A hang costs one step, not the call.
T="timeout 120"

if [[ $MODE == suite ]]; then
  tree both3 "${BOTH[@]}" "$NEXT/narrow-tall-tiles.patch" || exit 1
  [[ -x build/both3-src/build/gpu/tests/cuflash_gpu_tests ]] || build both3 16 ON all
  B=$(cli both3)
  for tool in racecheck synccheck; do
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 \
      $B verify -b 2 --heads 16 -s 1200 -d 128 --dtype bf16 --causal >"$O/logs/$tool-d128.log" 2>&1
    say "$tool d128 persistent: rc $? | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$O/logs/$tool-d128.log" | tr '\n' ' ')"
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 \
      $B verify -b 1 --heads 48 -s 1100 --causal -d 64 --dtype bf16 >"$O/logs/$tool-tall.log" 2>&1
    say "$tool d64 tall causal: rc $? | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$O/logs/$tool-tall.log" | tr '\n' ' ')"
  done
  timeout 400 ctest --test-dir build/both3-src/build/gpu -L gpu -j10 --timeout 250 \
    >"$O/logs/ctest-gpu.log" 2>&1
  say "ctest -L gpu (both3): rc $? | $(grep -E 'tests passed' "$O/logs/ctest-gpu.log")"
  pack
  exit 0
fi

tree base || exit 1
tree both "${BOTH[@]}" || exit 1
tree both3 "${BOTH[@]}" "$NEXT/narrow-tall-tiles.patch" || exit 1
build base 5 OFF cuflash_app &
build both 5 OFF cuflash_app &
build both3 6 OFF cuflash_app &
wait
for t in base both both3; do [[ -x $(cli $t) ]] || { say "no cuflash for $t"; exit 1; }; done

# Correctness of the candidate first: verify (against the float64 reference).
B=$(cli both3)
verify_both3() {
  local B=$1
  $B verify -b 1 --heads 66 --heads-kv 6 -s 384,300 --seq-k 1023 -d 64 --dtype bf16 &&
    $B verify -b 1 --heads 48 -s 1100,1536 --causal -d 64 --dtype fp16 &&
    $B verify -b 2 --heads 8 --heads-kv 2 -s 512,200,1023 --causal -d 64,128 --dtype bf16 &&
    $B verify -b 3 --heads 4 --heads-kv 2 -s 130 --seq-k 40,64,65,300 -d 64,128 --dtype fp16 &&
    $B verify -b 4 --heads 16 -s 1200 -d 128 --dtype bf16 --causal &&
    $B verify -b 1 --heads 4 -s 333 --seq-k 200 --mask causal-top-left -d 96 --dtype fp16
}
$T bash -c "$(declare -f verify_both3); verify_both3 $B" >"$O/logs/verify.log" 2>&1
say "verify (both3): rc $?"

# Timing, each group's ratios as soon as it ran (a call cut short keeps what it has): `fa`
# forward round 1 of every tree with SDPA cuDNN, `fa` backward of base and both, `seed`,
# `variants`, the forced tilings, round 2 last.
fa_round() {
  local round=$1
  for t in base both both3; do
    $T $(cli $t) bench --sweep fa --pass fwd --out-dir "$O/$t-fa-r$round" >"$O/logs/$t-fa-r$round.log" 2>&1
  done
  ratio "both/base fa r$round" base-fa-r$round both-fa-r$round . 'd:64.*causal:1' \
    'd:128.*causal:1' 'd:128.*causal:0' 'd:64.*causal:0'
  ratio "both3/both fa r$round" both-fa-r$round both3-fa-r$round . 'd:64.*causal:1' 'd:64.*causal:0'
  for t in base both both3; do
    ratio "cudnn/$t fa r$round" $t-fa-r$round sdpa-fa . 'd:64.*causal:1' 'd:128.*causal:0'
  done
}
timeout 150 python3 share/tools/sdpa_bench.py --sweep fa --pass fwd --backends cudnn --out-dir "$O/sdpa-fa" \
  >"$O/logs/sdpa-fa.log" 2>&1
fa_round 1
PER_CASE=1 python3 $RATIOS "$O/both3-fa-r1" "$O/sdpa-fa" >"$O/per-case-cudnn-both3-r1.txt"
PER_CASE=1 python3 $RATIOS "$O/base-fa-r1" "$O/both3-fa-r1" >"$O/per-case-both3-base-r1.txt"

# The backward's kernels of base and both differ by the descriptor prefetch alone.
for t in base both; do
  $T $(cli $t) bench --sweep fa --pass bwd --out-dir "$O/$t-fa-bwd" >"$O/logs/$t-fa-bwd.log" 2>&1
done
ratio "both/base fa bwd (prefetch)" base-fa-bwd both-fa-bwd . 'sq:(512|1024)/' 'sq:(4096|8192|16384)/'

timeout 150 python3 share/tools/sdpa_bench.py --sweep seed --pass fwd --backends cudnn --out-dir "$O/sdpa-seed" \
  >"$O/logs/sdpa-seed.log" 2>&1
for t in base both both3; do
  $T $(cli $t) bench --sweep seed --pass fwd --out-dir "$O/$t-seed" >"$O/logs/$t-seed.log" 2>&1
done
ratio "both/base seed" base-seed both-seed . '(fp16|bf16)' '(fp16|bf16).*causal:1'
ratio "both3/both seed" both-seed both3-seed '(fp16|bf16).*d:64'
for t in base both3; do ratio "cudnn/$t seed" $t-seed sdpa-seed '(fp16|bf16)'; done

for t in base both; do
  $T $(cli $t) bench --sweep variants --pass fwd --out-dir "$O/$t-variants" >"$O/logs/$t-variants.log" 2>&1
done
ratio "both/base variants" base-variants both-variants .

for tiles in wide tall; do
  CUFLASH_DEV_TILES=$tiles $T $B bench --sweep fa --pass fwd --filter 'd:64.*causal:1' \
    --out-dir "$O/both3-fa-$tiles" >"$O/logs/both3-fa-$tiles.log" 2>&1
done
ratio "tall/wide both3, fa d64 causal" both3-fa-wide both3-fa-tall . 'sq:(512|1024|2048)/' \
  'sq:(4096|8192|16384)/'

fa_round 2
pack
