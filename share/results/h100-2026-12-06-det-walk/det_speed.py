#!/usr/bin/env python3
"""The deterministic backward's speed relative to the default one, per case (same call).

    det_speed.py DEFAULT_FOLDER DETERMINISTIC_FOLDER [DEFAULT_FOLDER DETERMINISTIC_FOLDER ...]

Each folder holds a results.json of `cuflash bench` (the deterministic one with --deterministic,
whose cases are named as the default ones with "/deterministic" appended). Prints, per case, the
default median time over the deterministic one for each pair of folders, then their geometric
mean over the pairs.
"""
import json
import math
import os
import sys


def medians(folder):
    rows = json.load(open(os.path.join(folder, "results.json")))["benchmarks"]
    return {r["run_name"].removesuffix("/deterministic"): r["real_time"]
            for r in rows if r.get("aggregate_name") == "median"}


def main():
    pairs = [(medians(a), medians(b)) for a, b in zip(sys.argv[1::2], sys.argv[2::2])]
    cases = sorted(set.intersection(*(set(d) & set(t) for d, t in pairs)))
    for case in cases:
        speeds = [d[case] / t[case] for d, t in pairs]
        mean = math.exp(sum(map(math.log, speeds)) / len(speeds))
        print(f"{mean:.3f}  ({' '.join(f'{s:.3f}' for s in speeds)})  {case}")


if __name__ == "__main__":
    main()
