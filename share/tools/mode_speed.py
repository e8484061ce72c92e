#!/usr/bin/env python3
"""The deterministic backward's speed relative to the default one, from two result folders.

    mode_speed.py DEFAULT DETERMINISTIC [REGEX ...]

DEFAULT and DETERMINISTIC: folders holding a results.json of `cuflash bench`, the second run with
--deterministic (its case names end in /deterministic, which is dropped to pair them). For each
regular expression (default: every case) it prints the geometric mean, minimum and maximum of
the default's median time over the deterministic one's (the issue's "speed of the default
backward", 0.85 the floor) over the paired cases whose name matches; PER_CASE=1 lists every
pair. Compare only folders timed in the same call, close together: under sustained load the
GPU's clock falls within seconds.
"""
import json
import math
import os
import re
import sys

DETERMINISTIC_SUFFIX = "/deterministic"


def medians(folder, suffix=""):
    """{case name without `suffix`: median real time} of a folder's results.json."""
    rows = json.load(open(os.path.join(folder, "results.json")))["benchmarks"]
    return {r["run_name"].removesuffix(suffix): r["real_time"]
            for r in rows if r.get("aggregate_name") == "median"}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    default = medians(sys.argv[1])
    deterministic = medians(sys.argv[2], DETERMINISTIC_SUFFIX)
    cases = sorted(set(default) & set(deterministic))
    if not cases:
        sys.exit("mode_speed.py: no case in both folders")
    for pattern in sys.argv[3:] or ["."]:
        speeds = [default[c] / deterministic[c] for c in cases if re.search(pattern, c)]
        if speeds:
            geo = math.exp(sum(map(math.log, speeds)) / len(speeds))
            print(f"{pattern} n={len(speeds)} geo {geo:.3f} min {min(speeds):.3f} "
                  f"max {max(speeds):.3f}")
    if os.environ.get("PER_CASE"):
        for c in cases:
            print(f"  {c} {default[c]:.1f} {deterministic[c]:.1f} "
                  f"{default[c] / deterministic[c]:.3f}")


if __name__ == "__main__":
    main()
