"""Candidate / main time of ab_patch.sh's rounds, from each tree's median over the rounds per
case: the geometric mean (min, max) of each group of cases, then the cases at head_dim 128
without a mask.

    mkdir ab && tar -xzf call2-ab/all.tgz -C ab && python3 medians.py ab
"""
import math
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tools"))
from bench_report import load  # noqa: E402  (the reader of the packages)

GROUPS = [".", "d:128/", "d:128/.*causal:0", "d:128/.*causal:1", "d:64/", "sq:(512|1024)/",
          "sq:2048/.*d:128/", "sq:(4096|8192|16384)/.*d:128/.*causal:0",
          "sq:(4096|8192|16384)/.*d:128/.*causal:1", "sq:(2048|4096|8192|16384)/.*d:64/"]


def times(folder):
    """{case: ms} of one bench folder."""
    return {r["run_name"]: r["ms"] for r in load(os.path.join(folder, "results.json"))[0]}


def median_times(root, tree):
    rounds = sorted(f for f in os.listdir(root) if re.fullmatch(tree + r"-r\d+", f))
    runs = [times(os.path.join(root, f)) for f in rounds]
    return {case: statistics.median(run[case] for run in runs) for case in runs[0]}


root = sys.argv[1]
main, cand = median_times(root, "main"), median_times(root, "cand")
ratio = {case: cand[case] / main[case] for case in main}
for group in GROUPS:
    xs = [r for case, r in ratio.items() if re.search(group, case)]
    geo = math.exp(sum(map(math.log, xs)) / len(xs))
    print(f"{group:42s} n={len(xs):2d} geo {geo:.3f} min {min(xs):.3f} max {max(xs):.3f}")
for case in sorted(ratio):
    if "d:128/" in case and "causal:0" in case:
        print(f"  {case} {main[case]:.3f} -> {cand[case]:.3f} ms: {ratio[case]:.3f}")
