#!/usr/bin/env bash
# One GPU call for this folder's two patches against the checkout, on the cases they change
# (`seed` backward at 1k, head_dim 128: the column-split kernel since edbff85):
#   twin:   column-split-d128-deterministic.patch, the deterministic backward on the column-split
#           kernel at 128 (the deterministic / default speed there, about 0.78-0.80 computed for
#           the checkout, predicted back to 0.88-0.95);
#   stages: column-split-d128-two-dq-stages.patch, two dQ stages for the default kernel.
# The three trees are built at once; then `verify` of each candidate on odd shapes, the twin's
# dQ/dK/dV compared byte for byte over five `run`s of two shapes (the 100-run GPU test, with the
# sanitizers, takes a call of its own: gpu_check.sh), and rounds of `cuflash bench`, the trees
# alternated (even rounds reversed): the checkout's default and deterministic backward, the
# twin's deterministic one, the stages' default one. Per round: twin / checkout deterministic
# time, stages / checkout default time, and each tree's deterministic / default speed.
#   share/results/h100-2026-12-07-bwd-small-grids/next/run.sh OUT_DIR [DEADLINE_SECONDS]
set -uo pipefail
HERE=share/results/h100-2026-12-07-bwd-small-grids
ROOT=$(pwd)
O=$(mkdir -p -- "$1" && cd -- "$1" && pwd) || exit 2
DEADLINE=${2:-560}
mkdir -p "$O/logs"
RATIOS=share/results/h200-2026-12-04-query-blocks-80/ratios.py
source share/scripts/patch_trees.sh  # say, checkout_tree, build_apps, cli, ratio, mode_speed, pack

say "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)"
for t in main twin stages; do checkout_tree "$t" || { say "no tree $t"; exit 1; }; done
git apply --directory=build/twin-src "$HERE/next/column-split-d128-deterministic.patch" || exit 1
git apply --directory=build/stages-src "$HERE/next/column-split-d128-two-dq-stages.patch" || exit 1
build_apps main twin stages || exit 1

verify_case() {  # TREE LOG ARGS...
  local began=$SECONDS
  timeout 150 "$(cli "$1")" verify --seq 1,113,1023 --seq-k 203,1024 --dtype fp16,bf16 \
    --mask none,causal,causal-top-left --backward --head-dim 128 "${@:3}" >"$O/logs/$2.log" 2>&1
  say "verify $2: rc $? $((SECONDS - began)) s | $(tail -1 "$O/logs/$2.log")"
}
verify_case twin verify-twin --deterministic
verify_case twin verify-twin-gqa --deterministic --heads 8 --heads-kv 2
verify_case stages verify-stages
verify_case stages verify-stages-gqa --heads 8 --heads-kv 2

# The twin's gradients, five runs of each shape, byte for byte; and the kernel each run names.
same_bits() {  # NAME ARGS...
  local name=$1 i f differ=0
  for i in 1 2 3 4 5; do
    timeout 60 "$(cli twin)" -v run --backward --deterministic --out-dir "$O/bits/$name-$i" \
      "${@:2}" >"$O/logs/bits-$name-$i.log" 2>&1 || { say "bits $name: run $i failed"; return 1; }
  done
  for i in 2 3 4 5; do
    for f in dq dk dv; do
      cmp -s "$O/bits/$name-1/$f.npy" "$O/bits/$name-$i/$f.npy" || differ=$((differ + 1))
    done
  done
  say "bits $name: $differ of 12 comparisons differ; kernel: $(grep -o \
    'column_split_backward_kernel<[^,]*, 128, true>\|sm90::backward_kernel<[^,]*, 128' \
    "$O/logs/bits-$name-1.log" | sort -u | tr '\n' ' ')"
}
same_bits gqa-113x1023 -b 2 --heads 4 --heads-kv 2 -s 113 --seq-k 1023 -d 128 --dtype bf16
same_bits seed-1k-causal --heads 8 -s 1024 -d 128 --dtype fp16 --causal
rm -rf "$O/bits"

SMALL=(--sweep seed --pass bwd --filter '(fp16|bf16)/.*sq:1024/.*d:128/')
bench_run() {  # TREE NAME ARGS...
  ((SECONDS + 30 < DEADLINE)) || { say "no time left for $2"; return 1; }
  local began=$SECONDS
  timeout 100 "$(cli "$1")" bench "${@:3}" --out-dir "$O/$2" >"$O/logs/$2.log" 2>&1
  say "bench $2: rc $? $((SECONDS - began)) s"
}
for round in 1 2 3 4; do
  order=(main twin stages)
  ((round % 2)) || order=(stages twin main)
  for t in "${order[@]}"; do
    case $t in
      main)
        bench_run main main-r$round "${SMALL[@]}" &&
          bench_run main main-det-r$round "${SMALL[@]}" --deterministic ;;
      twin) bench_run twin twin-det-r$round "${SMALL[@]}" --deterministic ;;
      stages) bench_run stages stages-r$round "${SMALL[@]}" ;;
    esac
  done
  [[ -f $O/twin-det-r$round/results.json && -f $O/main-det-r$round/results.json ]] &&
    ratio "twin/main deterministic time, round $round" main-det-r$round twin-det-r$round '.' &&
    mode_speed "main deterministic speed, round $round" main-r$round main-det-r$round &&
    mode_speed "twin deterministic speed (main's default), round $round" main-r$round \
      twin-det-r$round
  [[ -f $O/stages-r$round/results.json ]] &&
    ratio "stages/main default time, round $round" main-r$round stages-r$round '.'
done
pack
