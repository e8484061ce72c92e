#!/usr/bin/env python3
"""Geometric-mean time ratios of two result folders of this package (same call only).

    ratios.py BASE CANDIDATE [REGEX ...]

BASE and CANDIDATE: folders holding a results.json (cuflash bench) or an sdpa-*.json
(sdpa_bench.py). For each regular expression (default: every case) it prints the geometric mean,
minimum and maximum of CANDIDATE's median time over BASE's, over the cases whose name matches:
with BASE a cuflash folder and CANDIDATE an SDPA one, that is SDPA's speed as cuflash sees it
(cuDNN time / cuflash time). PER_CASE=1 lists every case as well.
"""
import glob
import json
import math
import os
import re
import sys


def medians(folder):
    path = (glob.glob(os.path.join(folder, "results.json")) +
            glob.glob(os.path.join(folder, "sdpa-*.json")))[0]
    rows = json.load(open(path))["benchmarks"]
    return {r["run_name"]: r["real_time"] for r in rows if r.get("aggregate_name") == "median"}


def main():
    base, candidate = medians(sys.argv[1]), medians(sys.argv[2])
    cases = sorted(set(base) & set(candidate))
    for pattern in sys.argv[3:] or ["."]:
        ratios = [candidate[c] / base[c] for c in cases if re.search(pattern, c)]
        if ratios:
            geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
            print(f"{pattern} n={len(ratios)} geo {geo:.3f} min {min(ratios):.3f} "
                  f"max {max(ratios):.3f}")
    if os.environ.get("PER_CASE"):
        for c in cases:
            print(f"  {c} {base[c]:.1f} {candidate[c]:.1f} {candidate[c] / base[c]:.3f}")


if __name__ == "__main__":
    main()
