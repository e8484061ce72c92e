#!/usr/bin/env bash
# main's package in one GPU call of about 6 minutes: share/scripts/bench_h200.sh (build, `seed`
# and `fa`, every pass, three rounds of cuflash, SDPA's three backends, the joined report), then
# the deterministic backward of both sweeps (three rounds) and `nvidia-smi` after; targets.py
# reads it all last. Everything but the summaries comes back as one archive, package.tgz.
#
#   share/results/h200-2026-12-06-main/run.sh [OUT_DIR] [--no-build]
set -uo pipefail
HERE=share/results/h200-2026-12-06-main
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
BUILD_FLAG=()
[[ ${2:-} == --no-build ]] && BUILD_FLAG=(--no-build)

ROUNDS=3 bash share/scripts/bench_h200.sh "$O/package" "${BUILD_FLAG[@]}" >"$O/bench_h200.log" 2>&1
echo "bench_h200.sh: rc $?"
for sweep in seed fa; do
  timeout -s INT --kill-after=20 100 build/gpu/app/cuflash bench --sweep "$sweep" --pass bwd \
    --deterministic --rounds 3 --out-dir "$O/package/deterministic/$sweep" \
    >"$O/package/logs/deterministic-$sweep.log" 2>&1
  echo "deterministic $sweep: rc $?"
done
nvidia-smi -q -d CLOCK,PERFORMANCE,POWER >"$O/nvidia-smi-after.txt" 2>&1
python3 "$HERE/targets.py" "$O/package" >"$O/targets.txt" 2>&1
cp "$O/package/summary.txt" "$O/summary.txt"
# (The package is kept as one archive.)
tar -czf "$O/package.tgz" -C "$O" package && rm -rf "$O/package"
grep -v '^      ' "$O/targets.txt" | grep -v TFLOP
