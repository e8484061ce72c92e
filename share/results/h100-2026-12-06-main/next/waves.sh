#!/usr/bin/env bash
# Whole waves on unmasked grids (performance log, Next 6): head_dim 128 without a mask, B = 1,
# on 32 and 33 heads and on 64 and 66, at 4k and 16k rows. The 128-row tiles (forward) and key
# blocks (backward) number 32 a head at 4k: 1024 / 1056 (7.76 / 8.00 rounds of 132 SMs) and
# 2048 / 2112 (15.52 / 16.00); 128 a head at 16k: 4096 / 4224 (31.03 / 32.00) and 8192 / 8448
# (62.06 / 64.00). The work grows by 33/32 = 1.031 within each pair; the whole rounds do not
# grow at all (the last pair: 63 -> 64, 1.016). cuflash (three rounds) and SDPA's cuDNN backend
# in one call, every pass; the last lines print each case's time at the larger head count over
# its time at the smaller one: near 1.00 (1.016) says the smaller grid paid for its last
# round's idle SMs, near 1.031 that it did not.
#
#   share/results/h100-2026-12-06-main/next/waves.sh OUT_DIR     (about 3 minutes with the build)
set -uo pipefail
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
cmake --preset gpu -DCMAKE_PREFIX_PATH="$PWD/.deps" >"$O/configure.log" 2>&1 &&
  cmake --build build/gpu -j"$(nproc)" --target cuflash_app >"$O/build.log" 2>&1 ||
  { echo "build failed: $O/build.log" >&2; exit 3; }
SHAPES=(-b 1 --heads 32,33,64,66 -s 4096,16384 -d 128 --dtype fp16,bf16 --pass all)
timeout -s INT 150 build/gpu/app/cuflash bench "${SHAPES[@]}" --rounds 3 --out-dir "$O/cuflash" \
  >"$O/cuflash.log" 2>&1
echo "cuflash bench: rc $?"
timeout -s INT 150 python3 share/tools/sdpa_bench.py "${SHAPES[@]}" --backends cudnn \
  --out-dir "$O/sdpa" >"$O/sdpa.log" 2>&1
echo "sdpa_bench: rc $?"
python3 share/tools/bench_report.py "$O/cuflash" "$O/sdpa" --output "$O/report.md" >"$O/report.log" 2>&1
echo "report: rc $?"
python3 - "$O/cuflash/results.json" "$O/sdpa/sdpa-cudnn.json" <<'PY'
import json, sys
def medians(path):
    """run name -> median time of a results file (benchmark JSON: one `_median` row a case)."""
    try:
        rows = json.load(open(path))["benchmarks"]
    except (OSError, ValueError, KeyError) as e:
        print(f"{path}: {e}")
        return {}
    return {r["run_name"]: r["real_time"] for r in rows if r.get("aggregate_name") == "median"}
ours, theirs = medians(sys.argv[1]), medians(sys.argv[2])
for small, large in ((32, 33), (64, 66)):
    for name in sorted(ours):
        twin = name.replace(f"/h:{small}/", f"/h:{large}/")
        if twin == name or twin not in ours:
            continue
        line = f"{name} -> h:{large}: cuflash {ours[twin] / ours[name]:.3f}"
        if name in theirs and twin in theirs:
            line += f", cuDNN {theirs[twin] / theirs[name]:.3f}"
        print(line)
PY
