#!/usr/bin/env python3
"""Issue 13's targets read from one package of bench_h200.sh (plus its deterministic/ folders).

    targets.py PACKAGE [PACKAGE...]

PACKAGE holds cuflash-SWEEP/results.json and sdpa-SWEEP/sdpa-{cudnn,flash,efficient}.json for the
sweeps `seed` and `fa` (one call), and the backward with --deterministic, same call: in
deterministic/SWEEP-{default,deterministic}-{1,2}/results.json (run.sh: both modes timed one after
the other, each mode's speed the geometric mean of its two runs), or in packages made before that,
deterministic/SWEEP/results.json (compared with the sweep's own default backward). Speed = the
other side's median time / cuflash's. Printed:
  1-2. fp16/bf16 against cuDNN per pass: geometric mean, minimum, cases below 1.0 by name; the
       same by head_dim; TFLOP/s of head_dim 128 at S >= 4k beside cuDNN's;
  3.   deterministic speed relative to the default backward: geometric mean, minimum, cases
       below 0.85;
  4.   fp32 against SDPA efficient.
Where the package has clocks.csv and its rows carry sample_spans (bench_h200.sh from a399f2a), each
case below 1.0 against cuDNN also shows the SM clock while each side's samples ran
(share/tools/case_clocks.py), for a miss that a lower clock on cuflash's side may explain.
With several packages (runs of the same tree), each one's report in turn, then every case below
its floor in any of them with each package's speed: a case's speed moves by a few percent from
run to run, so the misses that every run shows are the ones to explain.
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from case_clocks import clock_during, log_interval  # noqa: E402
from stage_clocks import read_clocks  # noqa: E402


def medians(path):
    rows = json.load(open(path))["benchmarks"]
    return {r["run_name"]: r for r in rows if r.get("aggregate_name") == "median"}


def geo(values):
    return math.exp(sum(map(math.log, values)) / len(values))


def half(row):
    """Whether a result row is fp16 or bf16 (the dtypes of the targets against cuDNN)."""
    return row["dtype"] in ("fp16", "bf16")


def line(label, speeds, floor, list_below=True, note=lambda case: ""):
    """speeds: {case: speed}; one summary line, then (list_below) each case below floor, with
    note(case) after it."""
    if not speeds:
        return
    below = sorted((s, c) for c, s in speeds.items() if s < floor)
    print(f"  {label}: geo {geo(speeds.values()):.3f} min {min(speeds.values()):.3f} "
          f"({len(speeds) - len(below)}/{len(speeds)} at or above {floor})")
    for s, c in below if list_below else []:
        print(f"      {s:.3f} {c}{note(c)}")


def package_clocks(pkg):
    """The package's clock log (read_clocks()), empty where it has none."""
    path = os.path.join(pkg, "clocks.csv")
    return read_clocks([path]) if os.path.exists(path) else []


def clock_note(samples, ours, theirs):
    """note(case) for line(): " (SM clock cuflash N / cudnn M MHz)" where the package logged the
    clock (`samples`, package_clocks()) and both rows say when their samples ran; "" elsewhere."""
    margin = log_interval(samples) / 2

    def note(case):
        spans = [rows.get(case, {}).get("sample_spans") for rows in (ours, theirs)]
        if not samples or not all(spans):
            return ""
        mhz = [clock_during(s, samples, margin) for s in spans]
        if None in mhz:
            return ""
        return f" (SM clock cuflash {mhz[0]:.0f} / cudnn {mhz[1]:.0f} MHz)"
    return note


def against(ours, theirs, keep):
    return {c: theirs[c]["real_time"] / r["real_time"]
            for c, r in ours.items() if c in theirs and keep(r)}


def main():
    packages = sys.argv[1:]
    for pkg in packages:
        if len(packages) > 1:
            print(f"#### {pkg}")
        report(pkg)
    if len(packages) > 1:
        below_in_any(packages)


def report(pkg):
    samples = package_clocks(pkg)
    for sweep in ("seed", "fa"):
        cuf = os.path.join(pkg, f"cuflash-{sweep}", "results.json")
        if not os.path.exists(cuf):
            continue
        ours = medians(cuf)
        sdpa = {b: medians(os.path.join(pkg, f"sdpa-{sweep}", f"sdpa-{b}.json"))
                for b in ("cudnn", "flash", "efficient")
                if os.path.exists(os.path.join(pkg, f"sdpa-{sweep}", f"sdpa-{b}.json"))}
        print(f"== {sweep}")
        for p in ("fwd", "bwd"):
            if "cudnn" in sdpa:
                line(f"{p} fp16/bf16 vs cudnn", against(
                    ours, sdpa["cudnn"], lambda r: half(r) and r["pass"] == p), 1.0,
                    note=clock_note(samples, ours, sdpa["cudnn"]))
                for d in sorted({r["head_dim"] for r in ours.values()}):
                    line(f"{p} d{d} vs cudnn", against(
                        ours, sdpa["cudnn"],
                        lambda r: half(r) and r["pass"] == p and r["head_dim"] == d), 1.0, False)
            if "efficient" in sdpa:
                line(f"{p} fp32 vs efficient", against(
                    ours, sdpa["efficient"], lambda r: r["dtype"] == "fp32" and r["pass"] == p),
                    1.0)
            big = [c for c, r in ours.items() if half(r) and r["pass"] == p and
                   r["head_dim"] == 128 and r["seq_q"] >= 4096]
            for c in sorted(big):
                theirs = sdpa.get("cudnn", {}).get(c, {}).get("tflops", float("nan"))
                print(f"    TFLOP/s {ours[c]['tflops']:6.1f} (cudnn {theirs:6.1f}) {c}")
        speeds = deterministic_speeds(pkg, sweep, ours)
        for dt in ("fp16", "bf16", "fp32"):
            line(f"deterministic/default speed {dt}",
                 {c: s for c, (s, dtype) in speeds.items() if dtype == dt}, 0.85)


def case_speeds(pkg):
    """{(sweep, measure, case): speed}: fp16/bf16 against cuDNN, deterministic against default."""
    speeds = {}
    for sweep in ("seed", "fa"):
        cuf = os.path.join(pkg, f"cuflash-{sweep}", "results.json")
        cudnn = os.path.join(pkg, f"sdpa-{sweep}", "sdpa-cudnn.json")
        if not (os.path.exists(cuf) and os.path.exists(cudnn)):
            continue
        ours = medians(cuf)
        for c, s in against(ours, medians(cudnn), half).items():
            speeds[(sweep, "vs cudnn", c)] = s
        for c, (s, _) in deterministic_speeds(pkg, sweep, ours).items():
            speeds[(sweep, "deterministic/default", c)] = s
    return speeds


def below_in_any(packages):
    """Every case below its floor (1.0 against cuDNN, 0.85 deterministic) in any package."""
    runs = [case_speeds(pkg) for pkg in packages]
    print(f"== below in any of the {len(packages)} packages (speed in each)")
    for key in sorted(set().union(*runs)):
        floor = 0.85 if key[1].startswith("deterministic") else 1.0
        values = [run.get(key, float("nan")) for run in runs]
        if any(v < floor for v in values):
            print(f"  {key[0]:4} {key[1]:21} {' '.join(f'{v:.3f}' for v in values)}  {key[2]}")


def times_by_case(path):
    """{case: median row} of a backward run, a deterministic case under the default one's name
    (its own has "/deterministic" appended)."""
    return {c.removesuffix("/deterministic"): r for c, r in medians(path).items()}


def deterministic_speeds(pkg, sweep, ours):
    """{case: (default time / deterministic time, dtype)} from the runs beside each other when
    the package has them, else against the sweep's own default backward (`ours`)."""
    folder = os.path.join(pkg, "deterministic")
    beside = {mode: [os.path.join(folder, f"{sweep}-{mode}-{k}", "results.json") for k in (1, 2)]
              for mode in ("default", "deterministic")}
    if all(map(os.path.exists, beside["default"] + beside["deterministic"])):
        runs = {mode: [times_by_case(p) for p in paths] for mode, paths in beside.items()}
        mean = lambda mode, c: geo([run[c]["real_time"] for run in runs[mode]])
        cases = set.intersection(*(set(run) for mode in runs for run in runs[mode]))
        return {c: (mean("default", c) / mean("deterministic", c),
                    runs["deterministic"][0][c]["dtype"]) for c in cases}
    old = os.path.join(folder, sweep, "results.json")
    if not os.path.exists(old):
        return {}
    return {c: (ours[c]["real_time"] / r["real_time"], r["dtype"])
            for c, r in times_by_case(old).items() if c in ours}


if __name__ == "__main__":
    main()
