#!/usr/bin/env bash
# Benchmarks cuflash and PyTorch SDPA on a GPU machine and leaves one folder with everything a
# published number needs (share/docs/bench.md): result packages of both sweeps (seed, fa) for
# cuflash and for every SDPA backend, the joined report and charts, complete logs, the machine's
# description, and a summary (printed last).
#
#   usage: share/scripts/bench_h200.sh PACKAGE_DIR [--quick] [--no-build]
#
#   --quick     leave out the 16k-token sequences (the slowest cases)
#   --no-build  use build/gpu/app/cuflash as it is
#
# Build: preset `gpu` (Release, sm_90a) with the dependency bundle in .deps/. Each benchmark stage
# is stopped with Ctrl-C's signal after CUFLASH_STAGE_S (110) or SDPA_STAGE_S (100) seconds and
# the report after 40, so the whole run ends within about 8 minutes plus the build; a stopped
# stage keeps the cases it finished and says "interrupted" in its metadata.json. PYTHON picks
# the interpreter that has PyTorch (default python3); SWEEPS the named sweeps (default
# "seed fa"; e.g. SWEEPS=decode), PASS the passes timed (all, fwd or bwd; default all), ROUNDS
# cuflash's --rounds (default 1; 3 for packages a later `bench --compare` will read).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$ROOT/share/scripts/clock_log.sh"
PYTHON=${PYTHON:-python3}
CUFLASH_STAGE_S=${CUFLASH_STAGE_S:-110}
SDPA_STAGE_S=${SDPA_STAGE_S:-100}
CLI=$ROOT/build/gpu/app/cuflash
read -ra SWEEP_NAMES <<<"${SWEEPS:-seed fa}"
PASS=${PASS:-all}
ROUNDS=${ROUNDS:-1}

usage() { echo "usage: $0 PACKAGE_DIR [--quick] [--no-build]" >&2; exit 2; }

PKG=""
FILTER=()
BUILD=1
for arg in "$@"; do
  case $arg in
    --quick) FILTER=(--filter '^(?!.*sq:16384)') ;;
    --no-build) BUILD=0 ;;
    -*) usage ;;
    *) [[ -z $PKG ]] || usage; PKG=$arg ;;
  esac
done
[[ -n $PKG ]] || usage
if [[ -e $PKG && -n $(ls -A "$PKG" 2>/dev/null) ]]; then
  echo "$PKG already exists and is not empty: give a new folder" >&2
  exit 2
fi
mkdir -p "$PKG/logs" || exit 2
PKG=$(cd "$PKG" && pwd)
cd "$ROOT" || exit 2
start=$SECONDS
STAGES=()

# stage NAME LIMIT_S COMMAND...: runs COMMAND with its output in logs/NAME.log, stopped with
# SIGINT (then SIGKILL 30 s later) after LIMIT_S seconds; the summary then shows exit 124. Its
# start and end go to logs/stages.txt (clock_log.sh), beside clocks.csv (below).
stage() {
  local name=$1 limit=$2 began=$SECONDS status
  shift 2
  echo "== $name" >&2
  mark_stage "$PKG/logs/stages.txt" start "$name"
  timeout -s INT --kill-after=30 "$limit" "$@" >"$PKG/logs/$name.log" 2>&1
  status=$?
  mark_stage "$PKG/logs/stages.txt" end "$name"
  STAGES+=("$(printf '%-14s exit %-3s %4d s' "$name" "$status" $((SECONDS - began)))")
  return "$status"
}

environment() {
  date -u
  uname -a
  nvidia-smi || echo "nvidia-smi failed"
  nvidia-smi -q -d CLOCK,PERFORMANCE,POWER,MEMORY,ECC || true
  nvcc --version || echo "nvcc not found"
  git log -1 --format='commit %H %s' 2>/dev/null
  git status --short 2>/dev/null
  "$PYTHON" -c 'import sys, torch; print("python", sys.version.split()[0], "torch",
    torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' ||
    echo "no PyTorch"
}

# A command line rather than a function: `timeout` in stage() runs programs, not shell functions.
BUILD_COMMAND=(bash share/scripts/build_gpu.sh --no-tests cuflash_app)

environment >"$PKG/environment.txt" 2>&1
if ((BUILD)); then
  stage build 1800 "${BUILD_COMMAND[@]}" || { echo "build failed: see $PKG/logs/build.log" >&2; exit 3; }
fi

# The clock while the stages run (clocks.csv; the summary gives each stage's range).
start_clock_log "$PKG/clocks.csv"
trap stop_clock_log EXIT
for sweep in "${SWEEP_NAMES[@]}"; do
  stage "cuflash-$sweep" "$CUFLASH_STAGE_S" \
    "$CLI" bench --sweep "$sweep" --pass "$PASS" --rounds "$ROUNDS" "${FILTER[@]}" \
    --out-dir "$PKG/cuflash-$sweep"
done
for sweep in "${SWEEP_NAMES[@]}"; do
  stage "sdpa-$sweep" "$SDPA_STAGE_S" \
    "$PYTHON" share/tools/sdpa_bench.py --sweep "$sweep" --pass "$PASS" "${FILTER[@]}" --out-dir "$PKG/sdpa-$sweep"
done
reports=()
for sweep in "${SWEEP_NAMES[@]}"; do
  for dir in "$PKG"/{cuflash,sdpa}-"$sweep"; do
    [[ -f $dir/metadata.json ]] && reports+=("$dir")
  done
done
stage report 40 "$PYTHON" share/tools/bench_report.py "${reports[@]}" \
  --output "$PKG/report.md" --png "$PKG/report.png"

# --- Summary --------------------------------------------------------------------------------------
summary() {
  echo "stages:"
  printf '  %s\n' "${STAGES[@]}"
  echo "packages:"
  for dir in "${reports[@]}"; do
    "$PYTHON" - "$dir" <<'PY'
import json, os, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "metadata.json")))
c = m.get("cases", {})
print(f"  {os.path.basename(d):13s} {m.get('status', '?'):11s} "
      f"{c.get('finished', '?')}/{c.get('total', '?')} cases, {c.get('failed', '?')} failed, "
      f"GPU {m.get('device', {}).get('name', '?')}")
PY
  done
  if [[ -f $PKG/report.md ]]; then
    echo "report: $PKG/report.md"
    grep -h -E "^($(IFS='|'; echo "${SWEEP_NAMES[*]}")) " "$PKG/logs/report.log" | sed 's/^/  /'
    grep -h '^chart: ' "$PKG/logs/report.log" | sed 's/^/  /'
  else
    echo "report: none ($(tail -n 1 "$PKG/logs/report.log" 2>/dev/null))"
  fi
  if [[ -f $PKG/clocks.csv ]]; then
    echo "clocks (samples; SM clock min / median / max; median power; highest temperature):"
    "$PYTHON" share/tools/stage_clocks.py "$PKG/logs/stages.txt" "$PKG/clocks.csv"
    echo "clocks while each case ran (case-clocks-SWEEP.txt), median over the cases:"
    for sweep in "${SWEEP_NAMES[@]}"; do
      mapfile -t timed < <(ls "$PKG"/cuflash-"$sweep"/results.json "$PKG"/sdpa-"$sweep"/sdpa-*.json 2>/dev/null)
      ((${#timed[@]})) || continue
      (cd "$PKG" && "$PYTHON" "$ROOT/share/tools/case_clocks.py" --clocks clocks.csv \
        "${timed[@]#"$PKG"/}") >"$PKG/case-clocks-$sweep.txt" 2>&1
      grep -E '^  [0-9]+: ' "$PKG/case-clocks-$sweep.txt" | sed 's/^/  /'
    done
  fi
  echo "total: $((SECONDS - start)) s; logs in $PKG/logs"
}
summary | tee "$PKG/summary.txt"
for line in "${STAGES[@]}"; do
  [[ $line == *"exit 0  "* ]] || exit 1
done
