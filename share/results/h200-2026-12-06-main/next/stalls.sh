#!/usr/bin/env bash
# Where the warps wait, cuflash against SDPA's cuDNN backend, in the two cases that trail it most
# in the package (../README.md): the forward at head_dim 64 causal, S = 512 (`fa` fp16, 0.889x)
# and the backward at head_dim 128, S = 4k without a mask (`seed`, 0.944-0.948x). One launch of
# each main kernel under Nsight Compute's full set with source counters; the source pages as
# CSV; share/tools/ncu_stalls.py on each pair (stall reasons, the instructions that collect the
# samples). About 3 minutes with the build.
#
#   share/results/h200-2026-12-06-main/next/stalls.sh [OUT_DIR]
set -uo pipefail
HERE=share/results/h200-2026-12-06-main/next
O=$(mkdir -p -- "${1:-out}" && cd -- "${1:-out}" && pwd) || { echo "no output folder ${1:-out}" >&2; exit 2; }
(cmake --preset gpu -DCMAKE_PREFIX_PATH="$PWD/.deps" -DCUFLASH_BUILD_TESTS=OFF \
   -DCUFLASH_BUILD_EXAMPLES=OFF && cmake --build build/gpu -j16 --target cuflash_app) \
  >"$O/build.log" 2>&1 || { echo "build failed: $(tail -3 "$O/build.log")"; exit 1; }
CLI=build/gpu/app/cuflash

# profile NAME KERNEL_REGEX COMMAND...: the first launch of the kernel whose function name
# matches, full set, into NAME.ncu-rep, NAME.csv (source page, SASS) and NAME.details.txt.
profile() {
  local name=$1 regex=$2
  shift 2
  timeout 240 ncu --kernel-name "regex:$regex" --launch-count 1 --set full --import-source yes \
    -f -o "$O/$name" "$@" >"$O/$name.log" 2>&1
  echo "$name: ncu rc $?"
  ncu --import "$O/$name.ncu-rep" --page source --csv --print-source sass >"$O/$name.csv" 2>&1
  ncu --import "$O/$name.ncu-rep" --page details >"$O/$name.details.txt" 2>&1
}
profile cuflash-fwd-d64 forward_kernel \
  "$CLI" run -b 32 --heads 32 -s 512 -d 64 --dtype fp16 --causal
profile cudnn-fwd-d64 'flash_fprop' python3 "$HERE/sdpa_case.py" fwd 32 32 512 64 causal
profile cuflash-bwd-d128 backward_kernel \
  "$CLI" run --backward -b 1 --heads 8 -s 4096 -d 128 --dtype fp16
profile cudnn-bwd-d128 'flash_bprop' python3 "$HERE/sdpa_case.py" bwd 1 8 4096 128 none

for pair in fwd-d64 bwd-d128; do
  python3 share/tools/ncu_stalls.py "$O/cuflash-$pair.csv" "$O/cudnn-$pair.csv" \
    >"$O/stalls-$pair.txt" 2>&1
  echo "== $pair"
  head -40 "$O/stalls-$pair.txt"
done
# (One archive of the reports: fewer, flatter files to keep.)
(cd "$O" && tar -czf reports.tgz ./*.ncu-rep && rm -f ./*.ncu-rep)
