#!/usr/bin/env bash
# One case under Nsight Compute, cuflash's main kernel beside the kernel of PyTorch SDPA's cuDNN
# backend: the first launch of each, the full set with source counters; each report's source
# page as CSV (SASS) and details page as text; share/tools/ncu_stalls.py on the pair (samples
# by stall reason, the instructions that collect them, with their executions), printed last.
# About a minute a pass on a GPU machine, plus the build.
#   usage: share/scripts/profile_vs_cudnn.sh [--no-build] [--deterministic] OUT_DIR fwd|bwd SHAPE...
#   SHAPE: options that `cuflash run` and share/tools/sdpa_bench.py both take, e.g.
#     -b 1 --heads 8 -s 4096 -d 128 --dtype fp16 [--causal]
#   e.g. share/scripts/profile_vs_cudnn.sh out/bwd-4k bwd -b 1 --heads 8 -s 4096 -d 128 --dtype fp16
# --no-build: build/gpu/app/cuflash as it is (else the `gpu` preset's tool is built first, with
# the dependency bundle in .deps/). PYTHON: the interpreter with PyTorch (default python3).
# --deterministic (bwd only): cuflash's deterministic backward is profiled too (cuflash-det.*),
# and ncu_stalls.py also compares it with the default backward (stalls-det.txt): where the
# ordered dQ sums wait.
# OUT_DIR: new or empty. The reports end up in OUT_DIR/reports.tgz.
# Exit status: 0 both profiled; 1 the build, a profile or the export failed; 2 a bad argument;
# 3 ncu is not on PATH.
set -uo pipefail
usage() { sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
BUILD=1
DETERMINISTIC=0
while [[ ${1:-} == -* ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --no-build) BUILD=0; shift ;;
    --deterministic) DETERMINISTIC=1; shift ;;
    *) echo "profile_vs_cudnn.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
OUT=${1:-}
PASS=${2:-}
if [[ -z $OUT || ($PASS != fwd && $PASS != bwd) || $# -lt 3 ]]; then
  usage >&2
  exit 2
fi
if ((DETERMINISTIC)) && [[ $PASS != bwd ]]; then
  echo "profile_vs_cudnn.sh: --deterministic orders the backward's dQ sums: use it with bwd" >&2
  exit 2
fi
shift 2
SHAPE=("$@")
if [[ -e $OUT && -n $(ls -A "$OUT" 2>/dev/null) ]]; then
  echo "profile_vs_cudnn.sh: $OUT is not empty: give a new folder" >&2
  exit 2
fi
if ! command -v ncu >/dev/null; then
  echo "profile_vs_cudnn.sh: ncu (Nsight Compute) is not on PATH" >&2
  exit 3
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 2
cd "$ROOT" || exit 2
CLI=build/gpu/app/cuflash
if ((BUILD)); then
  bash share/scripts/build_gpu.sh --no-tests cuflash_app >"$OUT/build.log" 2>&1 ||
    { echo "build failed: see $OUT/build.log" >&2; exit 1; }
fi
if [[ ! -x $CLI ]]; then
  echo "profile_vs_cudnn.sh: no $CLI (build it, or leave out --no-build)" >&2
  exit 1
fi

# The kernels: cuflash's main one of the pass (not the prologue or the dQ conversion), cuDNN's.
if [[ $PASS == fwd ]]; then
  ours=forward_kernel theirs=flash_fprop run_flags=()
else
  ours=backward_kernel theirs=flash_bprop run_flags=(--backward)
fi

# profile NAME KERNEL_REGEX COMMAND...: NAME.ncu-rep, NAME.csv, NAME.details.txt, NAME.log.
status=0
profile() {
  local name=$1 regex=$2
  shift 2
  timeout 300 ncu --kernel-name "regex:$regex" --launch-count 1 --set full --import-source yes \
    -f -o "$OUT/$name" "$@" >"$OUT/$name.log" 2>&1 &&
    ncu --import "$OUT/$name.ncu-rep" --page source --csv --print-source sass >"$OUT/$name.csv" &&
    ncu --import "$OUT/$name.ncu-rep" --page details >"$OUT/$name.details.txt" ||
    { echo "$name: the profile failed: see $OUT/$name.log" >&2; status=1; }
}
profile cuflash "$ours" "$CLI" run "${run_flags[@]}" "${SHAPE[@]}"
profile cudnn "$theirs" "${PYTHON:-python3}" share/tools/sdpa_bench.py --backends cudnn \
  --pass "$PASS" --warmup 1 --iters 1 --no-graph "${SHAPE[@]}"
if ((DETERMINISTIC)); then
  profile cuflash-det "$ours" "$CLI" run "${run_flags[@]}" --deterministic "${SHAPE[@]}"
fi
# stalls NAME A B: ncu_stalls.py on two of the profiles into NAME.txt, printed.
stalls() {
  python3 share/tools/ncu_stalls.py "$OUT/$2.csv" "$OUT/$3.csv" >"$OUT/$1.txt" 2>&1 || status=1
  cat "$OUT/$1.txt"
}
if ((status == 0)); then
  stalls stalls cuflash cudnn
  ((DETERMINISTIC)) && stalls stalls-det cuflash cuflash-det
fi
# (One archive of the reports: one file to keep.)
(cd "$OUT" && shopt -s nullglob && reports=(./*.ncu-rep) &&
   if ((${#reports[@]})); then tar -czf reports.tgz "${reports[@]}" && rm -f "${reports[@]}"; fi)
exit "$status"
