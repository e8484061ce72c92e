#!/usr/bin/env bash
# Key groups for the deterministic backward under a causal mask (workspace.h,
# dq_band_has_no_left_end()), in one GPU call: the checkout (the change) and main (the checkout
# with main.patch, the change reversed) built side by side; the checkout's GPU tests of the
# deterministic backward; its deterministic `verify --backward` on odd shapes; two interleaved
# rounds of the `seed` backward under a causal mask (every dtype and length): the checkout's
# default and deterministic runs, main's deterministic run; then the deterministic backward of
# both whole sweeps in both trees. Summary last; everything but it in OUT_DIR/all.tgz.
#
#   share/results/h100-2026-12-06-det-causal-groups/run.sh OUT_DIR
set -uo pipefail
ROOT=$(pwd)
HERE=$(cd -- "$(dirname -- "$0")" && pwd)
O=$(mkdir -p -- "${1:-out}/logs" && cd -- "${1:-out}" && pwd) || exit 2
source share/scripts/patch_trees.sh  # say, tree, build, cli, pack
say "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
tree main "$HERE/main.patch" && tree cand || exit 1
began=$SECONDS
(cd build/cand-src && cmake --preset gpu -DCMAKE_PREFIX_PATH="$ROOT/.deps" \
   -DCUFLASH_BUILD_EXAMPLES=OFF && cmake --build build/gpu -j10 --target cuflash_app \
   cuflash_gpu_tests) >"$O/logs/build-cand.log" 2>&1 &
build main 6 OFF cuflash_app &
wait
say "builds: $((SECONDS - began)) s"
[[ -x $(cli cand) && -x $(cli main) ]] || { say "a build failed"; exit 1; }

began=$SECONDS
(cd build/cand-src && timeout 200 ctest --test-dir build/gpu -L gpu -R "eterministic|interleaved" \
   -j6 --output-on-failure) >"$O/logs/gpu-tests.log" 2>&1
say "GPU tests (deterministic): rc $? $((SECONDS - began)) s | $(grep -E 'tests passed|tests failed' "$O/logs/gpu-tests.log")"

bench() {  # bench TREE NAME SWEEP FILTER [--deterministic]
  timeout 120 "$(cli "$1")" bench --sweep "$3" --pass bwd --filter "$4" "${@:5}" \
    --out-dir "$O/$2" >"$O/logs/$2.log" 2>&1 || say "bench $2: rc $?"
}
bench_round() {
  bench cand "cand-default-r$1" seed 'causal:1'
  bench cand "cand-det-r$1" seed 'causal:1' --deterministic
  bench main "main-det-r$1" seed 'causal:1' --deterministic
  say "bench round $1 done"
}
bench_round 1
began=$SECONDS
timeout 100 "$(cli cand)" verify --seq 1,113,1023 --seq-k 203,1024 --head-dim 40,64,128,256 \
  --dtype fp16,bf16,fp32 --mask causal,causal-top-left --backward --deterministic \
  >"$O/logs/verify-cand.log" 2>&1
say "verify --backward --deterministic: rc $? $((SECONDS - began)) s | $(tail -1 "$O/logs/verify-cand.log")"
bench_round 2
for sweep in fa seed; do
  bench cand "cand-det-$sweep-all" $sweep . --deterministic
  bench main "main-det-$sweep-all" $sweep . --deterministic
done
say "whole sweeps done"

python3 - "$O" <<'PY' | tee -a "$O/summary.txt"
import json, math, os, sys
O = sys.argv[1]
def medians(folder):
    try:
        rows = json.load(open(os.path.join(O, folder, "results.json")))["benchmarks"]
    except (OSError, ValueError, KeyError):
        return {}
    return {r["run_name"].replace("/deterministic", ""): r["real_time"]
            for r in rows if r.get("aggregate_name") == "median"}
for r in (1, 2):
    default, det, main = (medians(f"{k}-r{r}") for k in ("cand-default", "cand-det", "main-det"))
    for case in sorted(det):
        line = f"r{r} {case}: deterministic/default speed {default.get(case, math.nan) / det[case]:.3f}"
        if case in main:
            line += f" (main {default.get(case, math.nan) / main[case]:.3f}); time cand/main {det[case] / main[case]:.3f}"
        print(line)
for sweep in ("fa", "seed"):
    cand, main = medians(f"cand-det-{sweep}-all"), medians(f"main-det-{sweep}-all")
    both = sorted(set(cand) & set(main))
    if not both:
        continue
    ratios = {c: cand[c] / main[c] for c in both}
    geo = math.exp(sum(map(math.log, ratios.values())) / len(ratios))
    print(f"{sweep} deterministic, whole sweep, time cand/main: geo {geo:.3f} over {len(both)} cases, "
          f"{min(ratios.values()):.3f}-{max(ratios.values()):.3f}")
    for c in both:
        if abs(ratios[c] - 1) > 0.03:
            print(f"  {c}: {ratios[c]:.3f}")
PY
pack
