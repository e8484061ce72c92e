#!/usr/bin/env bash
# Measures this folder's backward patches against the tree they apply to, on one H200, in one go
# (about 8 minutes); then, as a second run on the same machine, the walking kernel's GPU suite
# and compute-sanitizer racecheck / synccheck / memcheck (`measure.sh suite`, about 7 minutes).
#
#   share/results/h200-2026-12-05-backward-walk/next/measure.sh [OUT_DIR]     (default: out)
#   share/results/h200-2026-12-05-backward-walk/next/measure.sh suite [OUT_DIR]
#   share/results/h200-2026-12-05-backward-walk/next/measure.sh quick [OUT_DIR]  (base and walk,
#       one round, about 5 minutes)
#   share/results/h200-2026-12-05-backward-walk/next/measure.sh dynamic [OUT_DIR]  (the same with
#       the dynamic walk)
#   share/results/h200-2026-12-05-backward-walk/next/measure.sh profile [OUT_DIR]  (ncu: main,
#       the dynamic walk one tile a CTA and walking, on one long case; about 4 minutes)
#   share/results/h200-2026-12-05-backward-walk/next/measure.sh short [OUT_DIR]  (main against
#       the dynamic walk where it pays, walk-landing.patch: verify, fa two rounds, seed,
#       variants, deterministic seed, cuDNN; about 7 minutes)
#   share/results/h200-2026-12-05-backward-walk/next/measure.sh short-suite [OUT_DIR]  (its GPU
#       suite and sanitizers; about 7 minutes, less on a machine where `short` built it)
#   share/results/h200-2026-12-05-backward-walk/next/measure.sh package [OUT_DIR]  (the result
#       package of main with walk-landing.patch that the README's table would quote:
#       share/scripts/bench_h200.sh in its tree, `fa` and `seed`, both passes, every SDPA
#       backend; about 5 minutes, plus the build on a machine where `short` did not build it)
#
# Three trees from the checkout's HEAD (git archive), each under build/<name>-src with its build
# in build/<name>-src/build/gpu:
#   base   HEAD as it is;
#   walk   persistent-backward.patch (the default dense backward kernels walk key blocks on one
#          CTA an SM, dK and dV stored by TMA) and dev-backward-grid.patch
#          (CUFLASH_DEV_BWD_GRID=tiles runs the same kernel one tile a CTA: the walk's share
#          apart from the rest of the change);
#   order  causal-key-order.patch (the kernels of one key block a CTA, causal: every head's
#          first key block first).
# Then: `verify --backward` of walk on shapes whose CTAs walk several tiles; `fa` backward two
# rounds of every tree and of walk one tile a CTA, interleaved; `seed` backward of each tree;
# `variants` and deterministic `seed` backward of base and walk (their kernels' code moved:
# SASS differs, spills equal); SDPA cuDNN `fa` and `seed` backward; ratios last (summary.txt).
set -uo pipefail

ROOT=$(pwd)
NEXT=share/results/h200-2026-12-05-backward-walk/next
RATIOS=share/results/h200-2026-12-04-query-blocks-80/ratios.py
WALK=("$NEXT/persistent-backward.patch" "$NEXT/dev-backward-grid.patch")
MODE=measure
if [[ ${1:-} =~ ^(suite|quick|dynamic|profile|short|short-suite|package)$ ]]; then MODE=$1; shift; fi
# dynamic: quick's measurements of the walk with tiles taken from a counter (dynamic-walk.patch,
# dev-dynamic-grid.patch in place of dev-backward-grid.patch).
if [[ $MODE == dynamic || $MODE == profile ]]; then
  WALK=("$NEXT/persistent-backward.patch" "$NEXT/dynamic-walk.patch" "$NEXT/dev-dynamic-grid.patch")
  [[ $MODE == dynamic ]] && MODE=quick
  WT=dyn
fi
# short / short-suite: the dynamic walk where it pays, as it would land (walk-landing.patch: the
# three walk patches and walk-where-short.patch in one change, without the measurement switch;
# at most 1024 query rows and twice as many tiles as SMs, main's kernels elsewhere), measured
# beside main (below), or its GPU suite and sanitizers (suite).
if [[ $MODE == short || $MODE == short-suite || $MODE == package ]]; then
  [[ $MODE == short-suite ]] && MODE=suite
  WALK=("$NEXT/walk-landing.patch")
  WT=short
fi
WT=${WT:-walk}  # quick's tree of the walk
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
mkdir -p "$O/logs"
source share/scripts/patch_trees.sh  # say, tree, build, cli, ratio, pack
# A hang (a barrier the walk never completes) costs one step, not the call.
T="timeout 120"

# Shapes of at least twice as many (key block, kv head) tiles as 132 SMs and at most 1024 query
# rows (walk-where-short.patch walks only those): CTAs walk two to four. The fourth (2048 rows)
# takes the 80-row blocks, which do not walk there.
walk_verify() {
  local B=$1
  $B verify --backward -b 2 --heads 16 --heads-kv 8 -s 300 --seq-k 2200 -d 128 --dtype fp16 \
    --causal --layout bshd &&
    $B verify --backward -b 1 --heads 12 -s 333 --seq-k 4200 -d 64 --dtype bf16 &&
    $B verify --backward -b 1 --heads 32 --heads-kv 16 -s 513 --seq-k 2049 -d 96 --dtype bf16 \
      --mask causal-top-left &&
    $B verify --backward -b 1 --heads 18 -s 2048 --seq-k 1023 -d 128 --dtype bf16 --layout bshd &&
    $B verify --backward -b 4 --heads 16 -s 1024 -d 128 --dtype bf16 --causal
}

# Main and the walk's tree ($WT), built side by side (cuflash alone).
trees_base_and_walk() {
  tree base && tree $WT "${WALK[@]}" || return 1
  build base 8 OFF cuflash_app &
  build $WT 8 OFF cuflash_app &
  wait
}

# The same, then the walk's tree verified on walk_verify's shapes.
build_and_verify() {
  trees_base_and_walk || return 1
  for t in base $WT; do [[ -x $(cli $t) ]] || { say "no cuflash for $t"; return 1; }; done
  $T bash -c "$(declare -f walk_verify); walk_verify $(cli $WT)" >"$O/logs/verify-walk.log" 2>&1
  say "verify --backward ($WT): rc $?"
}

# profile: Nsight Compute on one long case (the non-walk parts' overhead shows best where tiles
# are long): main's kernel against the dynamic walk's one tile a CTA, then walking; source
# counters for share/tools/ncu_stalls.py, the details page for the rest (about 4 minutes).
if [[ $MODE == profile ]]; then
  trees_base_and_walk || exit 1
  CASE=(-b 2 --heads 16 -s 8192 -d 128 --dtype bf16 --backward)
  for run in base:base tiles:$WT walk:$WT; do
    name=${run%%:*} t=${run#*:} grid=
    [[ $name == tiles ]] && grid=tiles
    CUFLASH_DEV_BWD_GRID=$grid timeout 240 ncu --clock-control none --kernel-name regex:backward_kernel \
      --launch-count 1 --set full --import-source yes -o "$O/$name" \
      $(cli $t) run "${CASE[@]}" >"$O/logs/ncu-$name.log" 2>&1
    say "ncu $name: rc $?"
    ncu --import "$O/$name.ncu-rep" --page source --csv --print-source sass >"$O/$name-sass.csv" 2>&1
    ncu --import "$O/$name.ncu-rep" --page details --csv >"$O/$name-details.csv" 2>&1
    say "$name: $(grep -E '"(Duration|Executed Instructions|Registers Per Thread|L2 Hit Rate|Issue Slots Busy|Warp Cycles Per Issued Instruction|Local Memory Spilling Requests)"' \
      "$O/$name-details.csv" | awk -F'","' '{printf "%s=%s %s; ", $(NF-2), $NF, $(NF-1)}' | tr -d '"')"
  done
  python3 share/tools/ncu_stalls.py "$O/base-sass.csv" "$O/tiles-sass.csv" "$O/walk-sass.csv" \
    --match 'LDL|STL|LDGSTS|UTMASTG|SYNCS' >"$O/stalls.txt" 2>&1
  say "stalls: $(head -c 600 "$O/stalls.txt" | tr '\n' ' ')"
  pack
  exit 0
fi

if [[ $MODE == suite ]]; then
  tree $WT "${WALK[@]}" || exit 1
  [[ -x build/$WT-src/build/gpu/tests/cuflash_gpu_tests ]] || build $WT 16 ON all
  B=$(cli $WT)
  for tool in racecheck synccheck memcheck; do
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 \
      $B verify --backward -b 4 --heads 16 --heads-kv 8 -s 256 --seq-k 2048 -d 128 --dtype bf16 \
      --causal >"$O/logs/$tool-d128.log" 2>&1
    say "$tool d128 walk: rc $? | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$O/logs/$tool-d128.log" | tr '\n' ' ')"
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 \
      $B verify --backward -b 2 --heads 8 -s 200 --seq-k 2100 -d 64 --dtype fp16 \
      --mask causal-top-left >"$O/logs/$tool-d64.log" 2>&1
    say "$tool d64 walk: rc $? | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$O/logs/$tool-d64.log" | tr '\n' ' ')"
  done
  timeout 330 ctest --test-dir build/$WT-src/build/gpu -L gpu -j10 --timeout 250 \
    >"$O/logs/ctest-gpu.log" 2>&1
  say "ctest -L gpu ($WT): rc $? | $(grep -E 'tests passed' "$O/logs/ctest-gpu.log")"
  pack
  exit 0
fi

# package: bench_h200.sh run from the walk tree (its own copy of the script and tools), so that
# the package is that of the tree as it would land; tree.txt names the tree (an archive of HEAD
# has no git history for the package's environment.txt to record).
if [[ $MODE == package ]]; then
  tree $WT "${WALK[@]}" || exit 1
  [[ -x $(cli $WT) ]] || build $WT 16 OFF cuflash_app
  [[ -x $(cli $WT) ]] || { say "no cuflash for $WT"; exit 1; }
  (cd build/$WT-src && bash share/scripts/bench_h200.sh "$O/package" --no-build) \
    >"$O/logs/bench_h200.log" 2>&1
  say "bench_h200.sh ($WT): rc $?"
  echo "main $(git rev-parse HEAD) with ${WALK[*]} (sha256 $(sha256sum "${WALK[@]}" | cut -c1-16))" \
    >"$O/package/tree.txt"
  cat "$O/package/summary.txt" >>"$SUMMARY"
  pack
  exit 0
fi

# short: main and the walk where it pays, side by side (about 7 minutes).
if [[ $MODE == short ]]; then
  build_and_verify || exit 1
  timeout 150 python3 share/tools/sdpa_bench.py --sweep fa --pass bwd --backends cudnn \
    --out-dir "$O/sdpa-fa" >"$O/logs/sdpa-fa.log" 2>&1
  for r in 1 2; do
    for t in base $WT; do
      $T $(cli $t) bench --sweep fa --pass bwd --out-dir "$O/$t-fa-r$r" >"$O/logs/$t-fa-r$r.log" 2>&1
    done
    ratio "$WT/base fa r$r" base-fa-r$r $WT-fa-r$r . 'sq:(512|1024)/' 'sq:2048/' \
      'sq:(4096|8192|16384)/'
    for t in base $WT; do
      ratio "cudnn/$t fa r$r" $t-fa-r$r sdpa-fa . 'd:64' 'd:128.*causal:0' 'd:128.*causal:1' \
        'sq:(512|1024)/'
    done
  done
  for t in base $WT; do
    $T $(cli $t) bench --sweep seed --pass bwd --out-dir "$O/$t-seed" >"$O/logs/$t-seed.log" 2>&1
  done
  ratio "$WT/base seed" base-seed $WT-seed . '(fp16|bf16)' fp32
  for t in base $WT; do
    $T $(cli $t) bench --sweep variants --pass bwd --out-dir "$O/$t-variants" \
      >"$O/logs/$t-variants.log" 2>&1
    $T $(cli $t) bench --sweep seed --pass bwd --deterministic --filter '(fp16|bf16)' \
      --out-dir "$O/$t-seed-det" >"$O/logs/$t-seed-det.log" 2>&1
  done
  ratio "$WT/base variants" base-variants $WT-variants .
  ratio "$WT/base seed deterministic" base-seed-det $WT-seed-det .
  PER_CASE=1 python3 $RATIOS "$O/base-fa-r1" "$O/$WT-fa-r1" >"$O/per-case-$WT-base.txt"
  PER_CASE=1 python3 $RATIOS "$O/$WT-fa-r1" "$O/sdpa-fa" >"$O/per-case-cudnn-$WT.txt"
  pack
  exit 0
fi

# quick: base and walk alone, one round (about 5 minutes), when GPU time is short.
if [[ $MODE == quick ]]; then
  build_and_verify || exit 1
  for t in base $WT; do
    $T $(cli $t) bench --sweep fa --pass bwd --out-dir "$O/$t-fa-r1" >"$O/logs/$t-fa-r1.log" 2>&1
  done
  CUFLASH_DEV_BWD_GRID=tiles $T $(cli $WT) bench --sweep fa --pass bwd --out-dir "$O/tiles-fa-r1" \
    >"$O/logs/tiles-fa-r1.log" 2>&1
  $T $(cli base) bench --sweep fa --pass bwd --out-dir "$O/base-fa-r2" >"$O/logs/base-fa-r2.log" 2>&1
  for t in base $WT; do
    $T $(cli $t) bench --sweep seed --pass bwd --out-dir "$O/$t-seed" >"$O/logs/$t-seed.log" 2>&1
  done
  timeout 150 python3 share/tools/sdpa_bench.py --sweep fa --pass bwd --backends cudnn \
    --out-dir "$O/sdpa-fa" >"$O/logs/sdpa-fa.log" 2>&1
  ratio "base r2/base r1 fa (noise)" base-fa-r1 base-fa-r2 .
  ratio "walk/base fa" base-fa-r1 $WT-fa-r1 . 'causal:0' 'causal:1' 'sq:(512|1024)/' \
    'sq:(4096|8192|16384)/' 'd:64' 'd:128'
  ratio "walk/tiles fa (the walk alone)" tiles-fa-r1 $WT-fa-r1 . 'causal:0' 'causal:1' \
    'sq:(512|1024)/'
  ratio "walk/base seed" base-seed $WT-seed . '(fp16|bf16)' fp32
  for t in base $WT; do
    ratio "cudnn/$t fa" $t-fa-r1 sdpa-fa . 'd:64' 'd:128.*causal:0' 'd:128.*causal:1' 'sq:(512|1024)/'
  done
  PER_CASE=1 python3 $RATIOS "$O/base-fa-r1" "$O/$WT-fa-r1" >"$O/per-case-walk-base.txt"
  PER_CASE=1 python3 $RATIOS "$O/$WT-fa-r1" "$O/sdpa-fa" >"$O/per-case-cudnn-walk.txt"
  pack
  exit 0
fi

tree base || exit 1
tree walk "${WALK[@]}" || exit 1
tree order "$NEXT/causal-key-order.patch" || exit 1
build base 5 OFF cuflash_app &
build walk 6 OFF cuflash_app &
build order 5 OFF cuflash_app &
wait
for t in base walk order; do [[ -x $(cli $t) ]] || { say "no cuflash for $t"; exit 1; }; done

# Correctness of the candidates first: verify (against the float64 reference).
$T bash -c "$(declare -f walk_verify); walk_verify $(cli walk)" >"$O/logs/verify-walk.log" 2>&1
say "verify --backward (walk): rc $?"
CUFLASH_DEV_BWD_GRID=tiles $T bash -c "$(declare -f walk_verify); walk_verify $(cli walk)" >"$O/logs/verify-walk-tiles.log" 2>&1
say "verify --backward (walk, one tile a CTA): rc $?"
$T $(cli order) verify --backward -b 2 --heads 16 --heads-kv 8 -s 700 --seq-k 1100 -d 128 \
  --dtype fp16 --causal >"$O/logs/verify-order.log" 2>&1
say "verify --backward (order): rc $?"

# Timing: every tree's sweeps, interleaved, then SDPA.
for round in 1 2; do
  for t in base walk order; do
    $T $(cli $t) bench --sweep fa --pass bwd --out-dir "$O/$t-fa-r$round" >"$O/logs/$t-fa-r$round.log" 2>&1
  done
  CUFLASH_DEV_BWD_GRID=tiles $T $(cli walk) bench --sweep fa --pass bwd --out-dir "$O/tiles-fa-r$round" \
    >"$O/logs/tiles-fa-r$round.log" 2>&1
done
for t in base walk order; do
  $T $(cli $t) bench --sweep seed --pass bwd --out-dir "$O/$t-seed" >"$O/logs/$t-seed.log" 2>&1
done
for t in base walk; do
  $T $(cli $t) bench --sweep variants --pass bwd --out-dir "$O/$t-variants" >"$O/logs/$t-variants.log" 2>&1
  $T $(cli $t) bench --sweep seed --pass bwd --deterministic --filter '(fp16|bf16)' \
    --out-dir "$O/$t-seed-det" >"$O/logs/$t-seed-det.log" 2>&1
done
python3 share/tools/sdpa_bench.py --sweep fa --pass bwd --backends cudnn --out-dir "$O/sdpa-fa" \
  >"$O/logs/sdpa-fa.log" 2>&1
python3 share/tools/sdpa_bench.py --sweep seed --pass bwd --backends cudnn --out-dir "$O/sdpa-seed" \
  >"$O/logs/sdpa-seed.log" 2>&1

for round in 1 2; do
  ratio "walk/base fa r$round" base-fa-r$round walk-fa-r$round . 'causal:0' 'causal:1' \
    'sq:(512|1024)/' 'sq:(4096|8192|16384)/' 'd:64' 'd:128'
  ratio "walk/tiles fa r$round (the walk alone)" tiles-fa-r$round walk-fa-r$round . 'causal:0' \
    'causal:1' 'sq:(512|1024)/'
  ratio "order/base fa r$round" base-fa-r$round order-fa-r$round . 'causal:1' 'd:128.*causal:1'
  for t in base walk order; do
    ratio "cudnn/$t fa r$round" $t-fa-r$round sdpa-fa . 'd:64' 'd:128.*causal:0' 'd:128.*causal:1' \
      'sq:(512|1024)/'
  done
done
ratio "walk/base seed" base-seed walk-seed . '(fp16|bf16)' fp32
ratio "order/base seed" base-seed order-seed . '(fp16|bf16).*causal:1'
ratio "walk/base variants" base-variants walk-variants .
ratio "walk/base seed deterministic" base-seed-det walk-seed-det .
for t in base walk order; do ratio "cudnn/$t seed" $t-seed sdpa-seed '(fp16|bf16)'; done
PER_CASE=1 python3 $RATIOS "$O/walk-fa-r1" "$O/sdpa-fa" >"$O/per-case-cudnn-walk-r1.txt"
PER_CASE=1 python3 $RATIOS "$O/base-fa-r1" "$O/walk-fa-r1" >"$O/per-case-walk-base-r1.txt"
pack
