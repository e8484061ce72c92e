#!/usr/bin/env bash
# The GPU suite and compute-sanitizer checks of every prepared kernel change at once, on one
# H200 (about 9 minutes): suite-all.patch is the forward's candidate (narrow last blocks and O
# staged without padding, on both tilings, the tiling override, ../../h200-2026-12-04-fwd-tall-tiles/next/)
# with the backward's descriptor prefetch (../../h200-2026-12-04-prologue-groups-d96/next/) and
# this folder's walking backward (persistent-backward.patch, dev-backward-grid.patch), merged.
#
#   share/results/h200-2026-12-05-backward-walk/next/suite-all.sh [OUT_DIR]     (default: out)
set -uo pipefail

ROOT=$(pwd)
NEXT=share/results/h200-2026-12-05-backward-walk/next
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
mkdir -p "$O/logs"
source share/scripts/patch_trees.sh  # say, pack
SRC=build/all-src
if [[ ! -x $SRC/build/gpu/tests/cuflash_gpu_tests ]]; then
  rm -rf "$SRC" && mkdir -p "$SRC" && git archive HEAD | tar -x -C "$SRC" || exit 1
  git apply --directory="$SRC" "$NEXT/suite-all.patch" || { say "suite-all.patch failed"; exit 1; }
  began=$SECONDS
  (cd "$SRC" && cmake --preset gpu -DCMAKE_PREFIX_PATH="$ROOT/.deps" -DCUFLASH_BUILD_EXAMPLES=OFF &&
     cmake --build build/gpu -j16) >"$O/logs/build.log" 2>&1
  say "build: rc $? $((SECONDS - began)) s"
fi
B=$ROOT/$SRC/build/gpu/app/cuflash

timeout 300 ctest --test-dir $SRC/build/gpu -L gpu -j8 --timeout 250 >"$O/logs/ctest-gpu.log" 2>&1 &
CTEST=$!

# sanitize NAME TOOL ARGS...: one compute-sanitizer run of `cuflash verify`.
sanitize() {
  local name=$1 tool=$2
  shift 2
  timeout 140 compute-sanitizer --tool "$tool" --error-exitcode 9 "$B" verify "$@" \
    >"$O/logs/$tool-$name.log" 2>&1
  say "$tool $name: rc $? | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$O/logs/$tool-$name.log" | tr '\n' ' ')"
}
WALK=(--backward -b 2 --heads 16 --heads-kv 8 -s 700 --seq-k 1100 -d 128 --dtype fp16 --causal)
WALK64=(--backward -b 1 --heads 12 -s 333 --seq-k 2100 -d 64 --dtype bf16)
FWD128=(-b 2 --heads 16 -s 1200 -d 128 --dtype bf16 --causal)
TALL=(-b 1 --heads 48 -s 1100 --causal -d 64 --dtype bf16)
{ sanitize bwd-walk-d128 racecheck "${WALK[@]}"; sanitize bwd-walk-d128 synccheck "${WALK[@]}";
  sanitize bwd-walk-d64 racecheck "${WALK64[@]}"; } &
P1=$!
{ sanitize fwd-d128 racecheck "${FWD128[@]}"; sanitize fwd-tall racecheck "${TALL[@]}";
  sanitize bwd-walk-d128 memcheck "${WALK[@]}"; } &
P2=$!
wait $P1 $P2
wait $CTEST
say "ctest -L gpu: rc $? | $(grep -E 'tests passed' "$O/logs/ctest-gpu.log")"
grep -E "Failed|\*\*\*" "$O/logs/ctest-gpu.log" | head -20 | tee -a "$SUMMARY"
pack
