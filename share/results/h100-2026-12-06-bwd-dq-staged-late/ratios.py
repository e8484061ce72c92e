"""Time ratios candidate / main of run.sh's bench folders: per case and round, the geometric
mean of each sweep and round, and of the whole sweeps (with the cases beyond +-3 %).

    python3 ratios.py OUT_DIR
"""
import json
import math
import os
import sys

O = sys.argv[1]


def medians(folder):
    try:
        rows = json.load(open(os.path.join(O, folder, "results.json")))["benchmarks"]
    except (OSError, ValueError, KeyError):
        return {}
    return {r["run_name"].replace("/deterministic", ""): r["real_time"]
            for r in rows if r.get("aggregate_name") == "median"}


def geo(values):
    return math.exp(sum(map(math.log, values)) / len(values))


def compare(label, cand_folder, main_folder, per_case, outliers=0.0):
    cand, main = medians(cand_folder), medians(main_folder)
    both = sorted(set(cand) & set(main))
    if not both:
        print(f"{label}: no results")
        return
    ratios = {c: cand[c] / main[c] for c in both}
    print(f"{label}: time cand/main geo {geo(ratios.values()):.3f} over {len(both)} cases, "
          f"{min(ratios.values()):.3f}-{max(ratios.values()):.3f}")
    for c in both:
        if per_case or abs(ratios[c] - 1) > outliers:
            print(f"  {c}: {ratios[c]:.3f} ({main[c]:.1f} -> {cand[c]:.1f} us)")


for sweep in ("seed", "fa"):
    for r in (1, 2, 3):
        compare(f"{sweep} r{r} default, head_dim 128 from 2048 rows", f"cand-{sweep}-r{r}",
                f"main-{sweep}-r{r}", per_case=True)
    for r in (1, 2):
        compare(f"{sweep} r{r} deterministic, head_dim 128 from 2048 rows",
                f"cand-det-{sweep}-r{r}", f"main-det-{sweep}-r{r}", per_case=False)
for sweep in ("seed", "fa"):
    compare(f"{sweep} default, whole sweep", f"cand-{sweep}-all", f"main-{sweep}-all",
            per_case=False, outliers=0.03)
