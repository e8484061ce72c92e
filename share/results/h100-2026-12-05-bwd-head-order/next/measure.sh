#!/usr/bin/env bash
# `candidate.patch` (heads interleaved on small causal grids, both modes; the wgmma deterministic
# kernels' turns from the first key block up, heaviest first) against the checkout's files
# without it, in one GPU call of about 3 minutes: both built (app only), `verify --backward` of
# the candidate (default and deterministic) on interleaved shapes, its deterministic bits over
# five runs on two `seed` shapes, and causal `seed` (default and deterministic) and `fa`
# backward of both in one round each.
#
#   share/results/h100-2026-12-05-bwd-head-order/next/measure.sh [OUT_DIR]
set -uo pipefail
ROOT=$(pwd)
RATIOS=share/results/h200-2026-12-04-query-blocks-80/ratios.py
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
mkdir -p "$O/logs"
source share/scripts/patch_trees.sh  # say, build_apps, cli, ratio, pack
T="timeout 120"
NEXT=share/results/h100-2026-12-05-bwd-head-order/next

checkout_tree main
checkout_tree cand
git apply --directory=build/cand-src "$NEXT/candidate.patch" || { say "candidate.patch failed"; exit 1; }
build_apps main cand || exit 1
C=$(cli cand)

# Correctness of the candidate (interleaved causal grids, GQA, 80-row blocks, windows, more
# queries than keys, key groups without a mask).
n=0
for args in "-b 2 --heads 8 --heads-kv 4 -s 1100 -d 128 --mask causal,causal-top-left" \
            "-b 1 --heads 8 -s 2100 --seq-k 2000 -d 128,96 --causal" \
            "-b 2 --heads 4 -s 3000 -d 64 --mask causal,causal-top-left" \
            "-b 1 --heads 4 --heads-kv 2 -s 1023 --seq-k 113 -d 64,128 --mask none,causal" \
            "-b 1 --heads 4 --heads-kv 2 -s 300 --seq-k 2100 -d 64,128" \
            "-b 1 --heads 4 -s 1500 -d 128 --causal --window 300,0"; do
  for det in "" "--deterministic"; do
    n=$((n + 1))
    $T $C verify --backward $det $args --dtype fp16,bf16 >"$O/logs/verify-$n.log" 2>&1
    say "verify $args $det: rc $? | $(tail -1 "$O/logs/verify-$n.log")"
  done
done
for args in "-b 1 --heads 8 -s 4096 -d 128 --causal" "-b 1 --heads 8 -s 8192 -d 64 --causal"; do
  differing=0
  for r in 1 2 3 4 5; do
    $T $C run --backward --deterministic $args --dtype bf16 --seed 7 --out-dir "$O/bits-$r" \
      >/dev/null 2>"$O/logs/bits-$r.log" || say "run $r failed: $(tail -1 "$O/logs/bits-$r.log")"
    if ((r > 1)); then
      for f in dq dk dv; do cmp -s "$O/bits-1/$f.npy" "$O/bits-$r/$f.npy" || differing=$((differing + 1)); done
    fi
  done
  say "deterministic bits $args: $differing of 12 files differ from run 1's"
  rm -rf "$O"/bits-*
done

for t in main cand; do
  $T $(cli $t) bench --sweep seed --pass bwd --filter '(fp16|bf16).*causal:1' \
    --out-dir "$O/$t-seed" >"$O/logs/$t-seed.log" 2>&1
  $T $(cli $t) bench --sweep seed --pass bwd --deterministic --filter '(fp16|bf16).*causal:1' \
    --out-dir "$O/$t-seed-det" >"$O/logs/$t-seed-det.log" 2>&1
  $T $(cli $t) bench --sweep fa --pass bwd --filter 'causal:1' --out-dir "$O/$t-fa" \
    >"$O/logs/$t-fa.log" 2>&1
done
ratio "cand/main seed causal" main-seed cand-seed . 'd:64' 'd:128' 'sq:1024/' 'sq:4096/' 'sq:8192/' 'sq:16384/'
ratio "cand/main seed causal det" main-seed-det cand-seed-det . 'sq:1024/' 'sq:4096/' 'sq:8192/' 'sq:16384/'
ratio "cand/main fa causal" main-fa cand-fa . 'd:64' 'd:128'
python3 - "$O" >>"$SUMMARY" <<'PY'
import json, math, os, sys
def med(folder):
    rows = json.load(open(os.path.join(folder, "results.json")))["benchmarks"]
    return {r["run_name"]: r["real_time"] for r in rows if r.get("aggregate_name") == "median"}
o = sys.argv[1]
for t in ("main", "cand"):
    default, det = med(f"{o}/{t}-seed"), med(f"{o}/{t}-seed-det")
    pairs = [(c, default[c.replace("/deterministic", "")] / v) for c, v in det.items()
             if c.replace("/deterministic", "") in default]
    speeds = [s for _, s in pairs]
    geo = math.exp(sum(map(math.log, speeds)) / len(speeds))
    low = min(pairs, key=lambda p: p[1])
    print(f"det speed {t} seed causal: n={len(speeds)} geo {geo:.3f} min {low[1]:.3f} ({low[0]})")
PY
for s in seed seed-det fa; do
  PER_CASE=1 python3 $RATIOS "$O/main-$s" "$O/cand-$s" >"$O/per-case-$s.txt"
done
pack
