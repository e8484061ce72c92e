#!/usr/bin/env bash
# One GPU call, two candidates against the checkout, each on the cases it changes:
#   det:      two reduce threads with the relaxed poll (../h200-2026-12-07-main/next/), `fa`
#             deterministic backward at head_dim 64 without a mask;
#   colsplit: the column-split kernel at head_dim 128 on grids that fill at most half the SMs
#             (column-split-d128.patch), `seed` backward at 1k, head_dim 128 (fp32 runs on
#             mma.sync: the control).
# The three trees are built at once; each candidate's `verify` runs the backward on odd shapes
# at the head dim it changes; then rounds of bench (checkout, det, colsplit; even rounds in the
# reverse order), each candidate's ratios to the checkout on its own cases per round.
#   share/results/h100-2026-12-07-bwd-small-grids/run.sh OUT_DIR [DEADLINE_SECONDS]
set -uo pipefail
HERE=share/results/h100-2026-12-07-bwd-small-grids
ROOT=$(pwd)
O=$1
DEADLINE=${2:-560}
mkdir -p "$O/logs"
RATIOS=share/results/h200-2026-12-04-query-blocks-80/ratios.py
source share/scripts/patch_trees.sh  # say, checkout_tree, build_apps, cli, ratio, pack

say "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)"
for t in main det colsplit; do checkout_tree "$t" || { say "no tree $t"; exit 1; }; done
git apply --directory=build/det-src \
  share/results/h200-2026-12-07-main/next/dq-two-reducers-relaxed-poll.patch || exit 1
git apply --directory=build/colsplit-src "$HERE/column-split-d128.patch" || exit 1
build_apps main det colsplit || exit 1

verify_case() {  # TREE LOG ARGS...
  local began=$SECONDS
  timeout 150 "$(cli "$1")" verify --seq 1,113,1023 --seq-k 203,1024 --dtype fp16,bf16 \
    --mask none,causal,causal-top-left --backward "${@:3}" >"$O/logs/$2.log" 2>&1
  say "verify $2: rc $? $((SECONDS - began)) s | $(tail -1 "$O/logs/$2.log")"
}
verify_case det verify-det --head-dim 64,128 --deterministic
verify_case colsplit verify-colsplit --head-dim 128,120
verify_case colsplit verify-colsplit-gqa --head-dim 128 --heads 8 --heads-kv 2

DET=(--sweep fa --pass bwd --deterministic --filter 'd:64/causal:0')
SMALL=(--sweep seed --pass bwd --filter 'sq:1024/.*d:128/')
bench_run() {  # TREE NAME ARGS...
  ((SECONDS + 40 < DEADLINE)) || { say "no time left for $2"; return 1; }
  local began=$SECONDS
  timeout 120 "$(cli "$1")" bench "${@:3}" --out-dir "$O/$2" >"$O/logs/$2.log" 2>&1
  say "bench $2: rc $? $((SECONDS - began)) s"
}
for round in 1 2 3 4; do
  order=(main det colsplit)
  ((round % 2)) || order=(colsplit det main)
  for t in "${order[@]}"; do
    case $t in
      main)
        bench_run main main-det-r$round "${DET[@]}" &&
          bench_run main main-small-r$round "${SMALL[@]}" ;;
      det) bench_run det det-r$round "${DET[@]}" ;;
      colsplit) bench_run colsplit colsplit-r$round "${SMALL[@]}" ;;
    esac
  done
  [[ -f $O/det-r$round/results.json ]] &&
    ratio "det/main round $round" main-det-r$round det-r$round 'sq:(1024|2048)/' &&
    ratio "det/main round $round" main-det-r$round det-r$round '.'
  [[ -f $O/colsplit-r$round/results.json ]] &&
    ratio "colsplit/main round $round" main-small-r$round colsplit-r$round '(fp16|bf16)/' &&
    ratio "colsplit/main round $round" main-small-r$round colsplit-r$round 'fp32/' &&
    PER_CASE=1 python3 "$RATIOS" "$O/main-small-r$round" "$O/colsplit-r$round" \
      >"$O/per-case-colsplit-r$round.txt" 2>&1
done
pack
