#!/usr/bin/env python3
"""The GPU's SM clock while each case was timed, side by side for several result files.

    case_clocks.py --clocks CLOCKS.csv [--clocks ...] RESULTS.json [RESULTS.json ...]

RESULTS: result files of `cuflash bench` (results.json) or share/tools/sdpa_bench.py
(sdpa-BACKEND.json) whose median rows carry "sample_spans", the spans in which each round's
samples ran (Unix seconds). CLOCKS: nvidia-smi's log as share/tools/stage_clocks.py reads it,
in the local time of the machine that took it (run this there, or under the same TZ). A span of
a few milliseconds rarely holds a sample of a log taken every 100 ms or more, and the clock moves over tenths of a second (the power cap): a span
takes the samples within half the log's median interval of it. Printed per case (a row's
run_name) and file: the median SM clock of those samples (MHz), "-" where none or no spans; then
per file the median over its cases. Timings compare fairly where their clocks do: under sustained
load the clock falls within seconds, and one side of a comparison may run hotter than the other.
"""
import argparse
import json
import os
import statistics
from datetime import datetime, timedelta

from stage_clocks import read_clocks


def median_rows(path):
    """{run_name: median row} of one result file."""
    rows = json.load(open(path))["benchmarks"]
    return {r["run_name"]: r for r in rows if r.get("aggregate_name") == "median"}


def log_interval(samples):
    gaps = [(b[0] - a[0]).total_seconds() for a, b in zip(samples, samples[1:])]
    return statistics.median(gaps) if gaps else 0.0


def clock_during(spans, samples, margin):
    """Median SM clock of the samples within `margin` seconds of any span; None if none are."""
    windows = [(datetime.fromtimestamp(b) - timedelta(seconds=margin),
                datetime.fromtimestamp(e) + timedelta(seconds=margin)) for b, e in spans]
    clocks = [s[1] for s in samples
              if s[1] is not None and any(lo <= s[0] <= hi for lo, hi in windows)]
    return statistics.median(clocks) if clocks else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clocks", action="append", required=True, metavar="CLOCKS.csv")
    parser.add_argument("results", nargs="+", metavar="RESULTS.json")
    args = parser.parse_args()
    samples = read_clocks(args.clocks)
    margin = log_interval(samples) / 2
    files = [(os.path.relpath(path), median_rows(path)) for path in args.results]
    cases = sorted({name for _, rows in files for name in rows})
    per_file = [[] for _ in files]
    print("SM clock (MHz, median) while each case's samples ran:")
    print("  " + " ".join(f"{i + 1:>6}" for i in range(len(files))) + "  case")
    for case in cases:
        cells = []
        for i, (_, rows) in enumerate(files):
            spans = rows.get(case, {}).get("sample_spans") or []
            mhz = clock_during(spans, samples, margin)
            if mhz is not None:
                per_file[i].append(mhz)
            cells.append(f"{mhz:6.0f}" if mhz is not None else f"{'-':>6}")
        print("  " + " ".join(cells) + f"  {case}")
    for i, (path, _) in enumerate(files):
        overall = f"{statistics.median(per_file[i]):.0f} MHz" if per_file[i] else "no samples"
        print(f"  {i + 1}: {path}: median over {len(per_file[i])} cases {overall}")


if __name__ == "__main__":
    main()
