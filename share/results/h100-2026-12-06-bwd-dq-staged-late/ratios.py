"""Time ratios candidate / main of run.sh's bench folders: per case and round, the geometric
mean of each sweep and round, and of the whole sweeps (with the cases beyond +-3 %).

    python3 ratios.py OUT_DIR
"""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tools"))
from bench_report import ReportError, load  # noqa: E402  (the reader of the packages)

O = sys.argv[1]


def medians(folder):
    """{case: median time in ms} of a bench folder, the deterministic runs' names as the
    default's; empty where the folder has no readable results."""
    try:
        rows = load(os.path.join(O, folder, "results.json"))[0]
    except ReportError:
        return {}
    return {r["run_name"].replace("/deterministic", ""): r["ms"] for r in rows}


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
            print(f"  {c}: {ratios[c]:.3f} ({1000 * main[c]:.1f} -> {1000 * cand[c]:.1f} us)")


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
