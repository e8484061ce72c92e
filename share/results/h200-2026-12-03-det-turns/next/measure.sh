#!/usr/bin/env bash
# Measures this folder's patches to the deterministic mma.sync backward (the fp32 kernels on the
# H200) against the tree they apply to, on one GPU, in one go (about 7 minutes):
#
#   share/results/h200-2026-12-03-det-turns/next/measure.sh [OUT_DIR]         (default: out)
#   share/results/h200-2026-12-03-det-turns/next/measure.sh quick [OUT_DIR]   (base and both
#       patches only, one round, no GPU tests; about 4 minutes)
#
# Three trees from the checkout's HEAD (git archive), each under build/<name>-src:
#   base   HEAD as it is;
#   poll   early-poll.patch: thread 0 reads the turn's semaphore (relaxed) before the dQ product
#          and, when the turn was passed by then, acquires with a fence instead of a round trip;
#   defer  poll + deferred-pass.patch: the turn is passed after the next query block's barrier
#          and S^T product instead of after a barrier of its own (its release fence no longer
#          waits for the atomics just issued; one barrier a query block fewer).
# Then: `verify --backward --deterministic` (fp32: S = 1k both head dims, odd shapes, GQA,
# causal, four key groups) of poll and defer; defer's dQ the same bits over two runs; defer's
# deterministic GPU tests; `seed` fp32 backward, default once, deterministic in two interleaved
# rounds of every tree; ratios last (summary.txt): deterministic speed over the default's (as
# the issue counts it) and each patch's deterministic time over base's.
set -uo pipefail

ROOT=$(pwd)
NEXT=share/results/h200-2026-12-03-det-turns/next
RATIOS=share/results/h200-2026-12-04-query-blocks-80/ratios.py
MODE=measure
if [[ ${1:-} == quick ]]; then MODE=quick; shift; fi
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
mkdir -p "$O/logs"
source share/scripts/patch_trees.sh  # say, tree, build, cli, ratio, pack
T="timeout 150"  # a turn never passed hangs a step, not the call

tree base || exit 1
tree poll "$NEXT/early-poll.patch" || exit 1
tree defer "$NEXT/early-poll.patch" "$NEXT/deferred-pass.patch" || exit 1
build base 5 OFF cuflash_app &
build poll 5 OFF cuflash_app &
if [[ $MODE == quick ]]; then build defer 6 OFF cuflash_app & else build defer 6 ON all & fi
wait
for t in base poll defer; do [[ -x $(cli $t) ]] || { say "no cuflash for $t"; exit 1; }; done

det_verify() {
  local B=$1
  $B verify --backward --deterministic --dtype fp32 -b 1 --heads 8 -s 1024 -d 64,128 &&
    $B verify --backward --deterministic --dtype fp32 -b 1 --heads 8 -s 1024 -d 64,128 --causal &&
    $B verify --backward --deterministic --dtype fp32 -b 2 --heads 6 --heads-kv 2 -s 113 \
      --seq-k 1023 -d 40,128 --causal &&
    $B verify --backward --deterministic --dtype fp32 -b 1 --heads 4 -s 300 --seq-k 2100 \
      -d 64 --mask causal-top-left &&
    $B verify --backward --deterministic --dtype fp32 -b 1 --heads 2 -s 1 --seq-k 1100 -d 96
}
for t in poll defer; do
  $T bash -c "$(declare -f det_verify); det_verify $(cli $t)" >"$O/logs/verify-$t.log" 2>&1
  say "verify --backward --deterministic fp32 ($t): rc $?"
done
# The same bits on two runs (the GPU tests run 100; this is the quick mode's check).
for r in 1 2; do
  $T $(cli defer) run --backward --deterministic --dtype fp32 -b 1 --heads 8 --heads-kv 4 \
    -s 1024 -d 64 --seed 7 --out-dir "$O/bits-$r" >"$O/logs/bits-$r.log" 2>&1
done
cmp -s "$O/bits-1/dq.npy" "$O/bits-2/dq.npy" && cmp -s "$O/bits-1/dk.npy" "$O/bits-2/dk.npy"
say "defer: dQ, dK the same bits on two runs: rc $?"
rm -rf "$O/bits-1" "$O/bits-2"
if [[ $MODE == measure ]]; then
  timeout 240 ctest --test-dir build/defer-src/build/gpu -L gpu -R 'eterministic' -j4 \
    --timeout 200 >"$O/logs/ctest-det-defer.log" 2>&1
  say "ctest -L gpu -R deterministic (defer): rc $? | $(grep -E 'tests passed' "$O/logs/ctest-det-defer.log")"
fi

seed_fp32() {  # TREE OUT [--deterministic]
  $T $(cli $1) bench --sweep seed --pass bwd --filter fp32 "${@:3}" --out-dir "$O/$2" \
    >"$O/logs/$2.log" 2>&1
}
seed_fp32 base default
rounds=2
[[ $MODE == quick ]] && rounds=1
for r in $(seq $rounds); do
  for t in base poll defer; do seed_fp32 $t $t-det-r$r --deterministic; done
done

# Deterministic speed over the default's: default median time / deterministic one, per case
# (names without "/deterministic").
det_speed() {
  python3 - "$O/default" "$O/$1" <<'PY'
import json, math, sys
def medians(folder):
    rows = json.load(open(folder + "/results.json"))["benchmarks"]
    return {r["run_name"].replace("/deterministic", ""): r["real_time"]
            for r in rows if r.get("aggregate_name") == "median"}
base, det = medians(sys.argv[1]), medians(sys.argv[2])
cases = sorted(set(base) & set(det))
speeds = {c: base[c] / det[c] for c in cases}
geo = math.exp(sum(math.log(s) for s in speeds.values()) / len(speeds))
low = sorted(speeds.items(), key=lambda kv: kv[1])[:4]
print(f"n={len(cases)} geo {geo:.3f} min {min(speeds.values()):.3f}; lowest: " +
      ", ".join(f"{c.split('/', 1)[1]} {s:.3f}" for c, s in low))
PY
}
for r in $(seq $rounds); do
  for t in base poll defer; do say "deterministic speed $t r$r: $(det_speed $t-det-r$r)"; done
  ratio "poll/base deterministic r$r" base-det-r$r poll-det-r$r . 'sq:1024/' 'causal:1'
  ratio "defer/base deterministic r$r" base-det-r$r defer-det-r$r . 'sq:1024/' 'causal:1'
done
PER_CASE=1 python3 $RATIOS "$O/base-det-r1" "$O/defer-det-r1" >"$O/per-case-defer-base.txt"
pack
