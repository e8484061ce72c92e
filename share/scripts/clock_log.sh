#!/usr/bin/env bash
# Sourced by bench_h200.sh and the package scripts: the GPU's clock logged while benchmarks run,
# and each stage's start and end in the same time format, for share/tools/stage_clocks.py (under
# sustained load the clock falls within seconds, the power cap: two stages' timings compare
# fairly only where their clocks do).
#   start_clock_log CSV      nvidia-smi's SM clock, power and temperature ten times a second
#                            into CSV, in the background (nothing where nvidia-smi is missing;
#                            a case's samples last tens of milliseconds: case_clocks.py)
#   stop_clock_log           ends it
#   mark_stage FILE WORD NAME  appends "TIMESTAMP WORD NAME" (WORD: start or end; local time, in
#                            nvidia-smi's format)

start_clock_log() {
  command -v nvidia-smi >/dev/null || return 0
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 100 \
    >"$1" 2>&1 &
  CLOCK_LOGGER=$!
}

stop_clock_log() {
  [[ -n ${CLOCK_LOGGER:-} ]] && kill "$CLOCK_LOGGER" 2>/dev/null
  CLOCK_LOGGER=
}

mark_stage() { echo "$(date '+%Y/%m/%d %H:%M:%S.%3N') $2 $3" >>"$1"; }
