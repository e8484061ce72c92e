#!/usr/bin/env bash
# One GPU call for the merged form of this folder's two changes: the rotated dQ sums (up to 16 key
# blocks a head) and the deterministic column-split kernel at head_dim 128 under causal masks
# only. The build; the rotated sums on `fa` shapes (2k rows: 16 key blocks; 1k with GQA)
# byte for byte over three runs, the kernel each run launched, and against the default
# backward; the GPU test of the kernels launched; racecheck on the column-split deterministic
# case; then the GPU tests of the deterministic backward. (The whole GPU suite and the four
# sanitizers ran with the two patches as prepared, the column-split kernel deterministic without
# a mask too: gpu-check.txt.)
#   share/results/h100-2026-12-07-dq-rotated/check.sh OUT_DIR
set -uo pipefail
O=$(mkdir -p -- "$1" && cd -- "$1" && pwd) || exit 2
mkdir -p "$O/logs"
say() { echo "$*" | tee -a "$O/summary.txt"; }
say "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)"
began=$SECONDS
bash share/scripts/build_gpu.sh --jobs 16 cuflash_app cuflash_gpu_tests >"$O/logs/build.log" 2>&1 || { say "build failed"; exit 1; }
say "build: $((SECONDS - began)) s"
CLI=build/gpu/app/cuflash

same_bits() {  # NAME ARGS...
  local name=$1 i f differ=0
  for i in 1 2 3; do
    timeout 60 "$CLI" -v run --backward --deterministic --out-dir "$O/bits/$name-$i" "${@:2}" \
      >"$O/logs/bits-$name-$i.log" 2>&1 || { say "bits $name: run $i failed"; return 1; }
  done
  for i in 2 3; do
    for f in dq dk dv; do
      cmp -s "$O/bits/$name-1/$f.npy" "$O/bits/$name-$i/$f.npy" || differ=$((differ + 1))
    done
  done
  say "bits $name: $differ of 6 comparisons differ; rotated kernel launches in run 1:" \
    "$(grep -c 'DqSumOrder)3' "$O/logs/bits-$name-1.log")"
  # Against the default backward of the same inputs (the float64 reference takes too long at
  # these sizes): a turn missed or taken twice would lose or double a key block's part of dQ.
  timeout 60 "$CLI" run --backward --out-dir "$O/bits/$name-default" "${@:2}" \
    >"$O/logs/bits-$name-default.log" 2>&1 || { say "$name: the default run failed"; return 1; }
  say "$name against the default: $(python3 - "$O/bits/$name-1" "$O/bits/$name-default" <<'PY'
import sys
import numpy as np
for f in ("dq", "dk", "dv"):
    a, b = (np.load(f"{d}/{f}.npy").astype(np.float64) for d in sys.argv[1:3])
    scale = np.abs(b).max()
    print(f"{f} max diff / max {np.abs(a - b).max() / scale:.2e} finite {np.isfinite(a).all()};", end=" ")
PY
)"
}
same_bits fa-2k-fp16 -b 8 --heads 32 -s 2048 -d 64 --dtype fp16
same_bits fa-1k-fp16-gqa -b 16 --heads 32 --heads-kv 8 -s 1024 -d 64 --dtype fp16
rm -rf "$O/bits"

began=$SECONDS
timeout 120 build/gpu/tests/cuflash_gpu_tests "a LaunchRecord names the kernels each call launched" \
  >"$O/logs/launches.log" 2>&1
say "GPU test of the kernels launched: rc $? $((SECONDS - began)) s | $(tail -2 "$O/logs/launches.log" | head -1)"
began=$SECONDS
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 1 build/gpu/tests/cuflash_gpu_tests \
  "sanitizer subset: the deterministic column-split backward at head_dim 128" \
  >"$O/logs/sanitizer-racecheck.log" 2>&1
say "compute-sanitizer racecheck: rc $? $((SECONDS - began)) s | $(tail -1 "$O/logs/sanitizer-racecheck.log")"
began=$SECONDS
timeout 300 ctest --test-dir build/gpu -j 8 --output-on-failure --no-tests=error \
  -R '^gpu:(.*deterministic backward|sanitizer subset: the deterministic)' >"$O/logs/ctest.log" 2>&1
say "GPU tests of the deterministic backward: rc $? $((SECONDS - began)) s |" \
  "$(grep 'tests passed' "$O/logs/ctest.log")"
