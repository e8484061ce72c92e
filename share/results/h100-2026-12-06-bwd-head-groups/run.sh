#!/usr/bin/env bash
# Heads interleaved in groups (`candidate.patch`, lib/ only, its tests in the checkout: the wgmma
# backward under a causal mask interleaves as many kv heads at a time as keep their Q, dO and
# fp32 dQ within 64 MiB, where main interleaves all or none) in one GPU call of about 9 minutes:
#   1. the checkout (with the candidate) built with its tests;
#   2. its GPU tests (ctest -L gpu), which hold the candidate's test of grouped grids and the
#      100-run deterministic bits, while main (the checkout with `candidate.patch` reversed) is
#      built (app only);
#   3. candidate against main, causal backward, where the groups change the order: `seed`
#      head_dim 128 at 16k (four heads of eight at a time) in two interleaved rounds, default and
#      deterministic; `fa` bf16 (every case: 256 MiB of Q, dO and dQ) in one round, both modes;
#      each left out where it would not end within DEADLINE seconds (540).
#
#   share/results/h100-2026-12-06-bwd-head-groups/run.sh [OUT_DIR]
set -uo pipefail
ROOT=$(pwd)
RATIOS=share/results/h200-2026-12-04-query-blocks-80/ratios.py
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
mkdir -p "$O/logs"
source share/scripts/patch_trees.sh  # say, build, cli, ratio, pack
T="timeout 150"
HERE=share/results/h100-2026-12-06-bwd-head-groups

DEADLINE=${DEADLINE:-540}  # seconds: the benches are left out where they would not end by then
say "$(nvidia-smi --query-gpu=name --format=csv,noheader)"
tree main || exit 1
git apply -R --directory=build/main-src "$HERE/candidate.patch" || { say "reverse patch failed"; exit 1; }
began=$SECONDS
(cmake --preset gpu -DCMAKE_PREFIX_PATH="$ROOT/.deps" && cmake --build build/gpu -j16) \
  >"$O/logs/build-checkout.log" 2>&1
say "build checkout: $(tail -1 "$O/logs/build-checkout.log") $((SECONDS - began)) s"
[[ -x build/gpu/app/cuflash ]] || { say "the checkout's build failed"; exit 1; }

# main's build beside the tests (most of their time is the GPU's and the reference's few cores)
build main 6 OFF cuflash_app &
began=$SECONDS
timeout 260 ctest --test-dir build/gpu -L gpu -j 8 --output-on-failure --no-tests=error \
  >"$O/logs/gpu-tests.log" 2>&1
say "gpu tests: rc $? $((SECONDS - began)) s | $(grep -E 'tests passed|tests failed' "$O/logs/gpu-tests.log")"
grep -E '^\s+[0-9]+ - ' "$O/logs/gpu-tests.log" | head -20 | tee -a "$SUMMARY"
wait
[[ -x $(cli main) ]] || { say "main's build failed"; pack; exit 1; }

cand=$ROOT/build/gpu/app/cuflash
seed16k='(fp16|bf16).*sq:16384.*d:128.*causal:1'
for round in 1 2; do
  ((SECONDS + 40 < DEADLINE)) || { say "no time left for round $round"; break; }
  for t in main cand; do
    c=$(cli main)
    [[ $t == cand ]] && c=$cand
    $T $c bench --sweep seed --pass bwd --filter "$seed16k" --out-dir "$O/$t-r$round" \
      >"$O/logs/$t-r$round.log" 2>&1
    $T $c bench --sweep seed --pass bwd --deterministic --filter "$seed16k" \
      --out-dir "$O/$t-r$round-det" >"$O/logs/$t-r$round-det.log" 2>&1
  done
  ratio "cand/main seed 16k d128 causal, round $round" main-r$round cand-r$round .
  ratio "cand/main seed 16k d128 causal det, round $round" main-r$round-det cand-r$round-det .
done
((SECONDS + 100 < DEADLINE)) || { say "no time left for fa"; pack; exit 0; }
for t in main cand; do
  c=$(cli main)
  [[ $t == cand ]] && c=$cand
  $T $c bench --sweep fa --pass bwd --filter 'bf16.*causal:1' --out-dir "$O/$t-fa" \
    >"$O/logs/$t-fa.log" 2>&1
  $T $c bench --sweep fa --pass bwd --deterministic --filter 'bf16.*causal:1' \
    --out-dir "$O/$t-fa-det" \
    >"$O/logs/$t-fa-det.log" 2>&1
done
ratio "cand/main fa causal" main-fa cand-fa . 'd:64' 'd:128' 'sq:512/' 'sq:16384/'
ratio "cand/main fa causal det" main-fa-det cand-fa-det . 'd:64' 'd:128' 'sq:512/' 'sq:16384/'
PER_CASE=1 python3 $RATIOS "$O/main-fa" "$O/cand-fa" >"$O/per-case-fa.txt"
PER_CASE=1 python3 $RATIOS "$O/main-fa-det" "$O/cand-fa-det" >"$O/per-case-fa-det.txt"
pack
