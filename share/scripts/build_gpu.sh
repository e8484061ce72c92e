#!/usr/bin/env bash
# Configures a source tree with the `gpu` preset (Release, sm_90a) and this checkout's
# dependency bundle (.deps/, made by share/scripts/stage_deps_bundle.sh), then builds targets
# into the tree's build/gpu. Configuring again records the tree's git commit and dirty flag in
# the binary.
#
#   usage: share/scripts/build_gpu.sh [--source DIR] [--jobs N] [--no-tests] [TARGET...]
#   --source DIR  the tree to build (default: this checkout)
#   --jobs N      parallel jobs (default: the machine's processors)
#   --no-tests    configure without the tests and examples (faster where only the tool is needed)
#   TARGET        what to build (default: everything configured)
#
# Tests and examples are set on every call, on or off: CMake's cache keeps an option from one
# configuration to the next, so a build without tests would otherwise leave the next one without
# them. Exit status: 0 built; 1 the configuration or the build failed; 2 a bad argument.
set -uo pipefail
usage() { sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SOURCE=$ROOT
JOBS=$(nproc)
TESTS=ON
TARGETS=()
while (($#)); do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --source) SOURCE=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
    --jobs) JOBS=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
    --no-tests) TESTS=OFF; shift ;;
    -*) echo "build_gpu.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
if [[ ! $JOBS =~ ^[1-9][0-9]*$ ]]; then
  echo "build_gpu.sh: --jobs takes a positive number, not '$JOBS'" >&2
  exit 2
fi
if [[ ! -f $SOURCE/CMakePresets.json ]]; then
  echo "build_gpu.sh: --source $SOURCE is not a cuflash tree (no CMakePresets.json)" >&2
  exit 2
fi
if [[ ! -d $ROOT/.deps ]]; then
  echo "build_gpu.sh: no dependency bundle at $ROOT/.deps (share/scripts/stage_deps_bundle.sh" \
    "makes one); trying the system's packages" >&2
fi
cd "$SOURCE" || exit 2
TARGET_FLAGS=()
((${#TARGETS[@]})) && TARGET_FLAGS=(--target "${TARGETS[@]}")
cmake --preset gpu -DCMAKE_PREFIX_PATH="$ROOT/.deps" -DCUFLASH_BUILD_TESTS="$TESTS" \
  -DCUFLASH_BUILD_EXAMPLES="$TESTS" || exit 1
cmake --build build/gpu -j"$JOBS" "${TARGET_FLAGS[@]}" || exit 1
