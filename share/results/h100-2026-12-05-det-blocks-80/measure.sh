#!/usr/bin/env bash
# The deterministic backward on query blocks of 80 rows (head_dims 128 and 96 from 2048 query
# rows) against main before it (REV, default c1526dc), in one GPU call of about 8 minutes:
# builds both (the checkout's files, not `git archive HEAD`: a GPU machine's git history may lack
# the newest commits), times deterministic `seed` head_dim 128, deterministic `fa` head_dim 128
# from 2k rows and deterministic head_dim 96 at B = 1, H = 8, S = 4k and 16k in two interleaved
# rounds, the default backward of the same cases once (the deterministic speed), then runs the
# checkout's 80-row GPU tests (deterministic and default) and racecheck / synccheck on a
# deterministic 80-row shape. (The whole GPU suite: share/scripts/gpu_check.sh.)
#
#   share/results/h100-2026-12-05-det-blocks-80/measure.sh [OUT_DIR] [REV]
set -uo pipefail
ROOT=$(pwd)
RATIOS=share/results/h200-2026-12-04-query-blocks-80/ratios.py
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
REV=${2:-c1526dc}
mkdir -p "$O/logs"
source share/scripts/patch_trees.sh  # say, build, cli, ratio, pack
T="timeout 120"

checkout_tree before "$REV" || { say "no revision $REV here"; exit 1; }
checkout_tree head
say "before: $(git rev-parse --short "$REV"); head: the working tree (git HEAD here $(git rev-parse --short HEAD))"
build before 6 OFF cuflash_app &
began=$SECONDS
(cd build/head-src && cmake --preset gpu -DCMAKE_PREFIX_PATH="$ROOT/.deps" -DCUFLASH_BUILD_TESTS=ON \
   -DCUFLASH_BUILD_EXAMPLES=OFF && cmake --build build/gpu -j10 --target cuflash_app cuflash_gpu_tests) \
  >"$O/logs/build-head.log" 2>&1
say "build head (app and GPU tests): rc $? $((SECONDS - began)) s"
wait
for t in before head; do [[ -x $(cli $t) ]] || { say "no cuflash for $t"; exit 1; }; done

D96=(-b 1 --heads 8 -s 4096,16384 -d 96 --dtype fp16,bf16 --mask none,causal)
bench_det() {  # bench_det TREE ROUND
  $T $(cli $1) bench --sweep seed --pass bwd --deterministic --filter '(fp16|bf16).*d:128' \
    --out-dir "$O/$1-seed-det-r$2" >"$O/logs/$1-seed-det-r$2.log" 2>&1
  $T $(cli $1) bench --sweep fa --pass bwd --deterministic --filter 'sq:(2048|4096|8192|16384)/.*d:128' \
    --out-dir "$O/$1-fa-det-r$2" >"$O/logs/$1-fa-det-r$2.log" 2>&1
  $T $(cli $1) bench "${D96[@]}" --pass bwd --deterministic \
    --out-dir "$O/$1-d96-det-r$2" >"$O/logs/$1-d96-det-r$2.log" 2>&1
}
for r in 1 2; do
  for t in before head; do bench_det $t $r; done
  ratio "head/before det seed d128 r$r" before-seed-det-r$r head-seed-det-r$r . 'causal:0' 'causal:1' 'sq:(4096|8192|16384)/'
  ratio "head/before det fa d128 2k-16k r$r" before-fa-det-r$r head-fa-det-r$r . 'causal:0' 'causal:1'
  ratio "head/before det d96 r$r" before-d96-det-r$r head-d96-det-r$r .
done
# the default backward of the same cases (the deterministic speed = default time / deterministic)
H=$(cli head)
$T $H bench --sweep seed --pass bwd --filter '(fp16|bf16).*d:128' --out-dir "$O/head-seed" \
  >"$O/logs/head-seed.log" 2>&1
$T $H bench --sweep fa --pass bwd --filter 'sq:(2048|4096|8192|16384)/.*d:128' \
  --out-dir "$O/head-fa" >"$O/logs/head-fa.log" 2>&1
$T $H bench "${D96[@]}" --pass bwd --out-dir "$O/head-d96" >"$O/logs/head-d96.log" 2>&1
python3 - "$O" >>"$SUMMARY" <<'PY'
import json, math, sys, os
def med(folder):
    rows = json.load(open(os.path.join(folder, "results.json")))["benchmarks"]
    return {r["run_name"]: r["real_time"] for r in rows if r.get("aggregate_name") == "median"}
o = sys.argv[1]
for name in ("seed", "fa", "d96"):
    default = med(f"{o}/head-{name}")
    for tree in ("before", "head"):
        det = med(f"{o}/{tree}-{name}-det-r2")
        pairs = [(c, default[c.replace("/deterministic", "")] / t) for c, t in det.items()
                 if c.replace("/deterministic", "") in default]
        if not pairs: continue
        speeds = [s for _, s in pairs]
        geo = math.exp(sum(map(math.log, speeds)) / len(speeds))
        low = min(pairs, key=lambda p: p[1])
        print(f"det speed {tree} {name} (head's default / det r2): n={len(speeds)} geo {geo:.3f} "
              f"min {low[1]:.3f} ({low[0]}) max {max(speeds):.3f}")
PY
PER_CASE=1 python3 $RATIOS "$O/before-seed-det-r2" "$O/head-seed-det-r2" >"$O/per-case-seed-det-r2.txt"

G=build/head-src/build/gpu/tests/cuflash_gpu_tests
timeout 120 $G "[blocks_of_80]" >"$O/logs/gpu-blocks-of-80.log" 2>&1
say "gpu tests [blocks_of_80]: rc $? | $(tail -3 "$O/logs/gpu-blocks-of-80.log" | tr '\n' ' ')"
DET80=(--backward --deterministic -b 1 --heads 4 --heads-kv 2 -s 2100 --seq-k 1023 -d 128 --dtype bf16 --causal)
for tool in racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 $H verify "${DET80[@]}" \
    >"$O/logs/$tool-det80.log" 2>&1
  say "$tool det80: rc $? | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$O/logs/$tool-det80.log" | tr '\n' ' ')"
done
pack
