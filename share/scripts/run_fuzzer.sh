#!/usr/bin/env bash
# Builds the libFuzzer harness for the .npy reader (the `fuzz` CMake preset: clang++, host only)
# and runs it for SECONDS (default 60) from a copy of the committed seed corpus, so the
# repository is never modified. Exits non-zero on any crash, leak, sanitizer report or timeout,
# and leaves the reproducer in build/fuzz/artifacts/.
#
#   share/scripts/run_fuzzer.sh [SECONDS]
set -euo pipefail

seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "run_fuzzer.sh: SECONDS must be a positive integer, got '$seconds'" >&2
  exit 2
fi

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"

if ! command -v clang++ > /dev/null; then
  echo "run_fuzzer.sh: clang++ not found (Debian: apt-get install clang)" >&2
  exit 2
fi
if [[ "$(clang++ -print-file-name=libclang_rt.fuzzer-x86_64.a)" != /* ]]; then
  echo "run_fuzzer.sh: clang's libFuzzer runtime is missing (Debian: apt-get install" \
       "libclang-rt-14-dev, matching clang++ --version)" >&2
  exit 2
fi

build_log="$(mktemp)"
work="$(mktemp -d)"
trap 'rm -rf "$work" "$build_log"' EXIT
if ! { cmake --preset fuzz && cmake --build --preset fuzz; } > "$build_log" 2>&1; then
  cat "$build_log" >&2
  echo "run_fuzzer.sh: building the fuzz preset failed" >&2
  exit 1
fi

fuzzer="$repo/build/fuzz/tests/fuzz/cuflash_fuzz_npy"
artifacts="$repo/build/fuzz/artifacts"
mkdir -p "$work/corpus" "$artifacts"
cp "$repo"/tests/fuzz/corpus/* "$work/corpus/"
seeds=$(find "$work/corpus" -type f | wc -l)

status=0
"$fuzzer" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -dict="$repo/tests/fuzz/npy.dict" -print_final_stats=1 -artifact_prefix="$artifacts/" \
  "$work/corpus" > "$work/fuzz.log" 2>&1 ||
  status=$?

runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/fuzz.log" | tail -n 1)
coverage=$(grep -o 'cov: [0-9]*' "$work/fuzz.log" | tail -n 1 | cut -d' ' -f2)
inputs=$(find "$work/corpus" -type f | wc -l)
if [[ $status -ne 0 ]]; then
  tail -n 40 "$work/fuzz.log" >&2
  echo "fuzz_npy: FAILED after ${runs:-?} runs (exit $status); reproducer in $artifacts/" >&2
  exit 1
fi
echo "fuzz_npy: ${seconds} s, ${runs:-?} runs, 0 crashes, coverage ${coverage:-?} edges," \
     "corpus ${seeds} -> ${inputs} inputs"
