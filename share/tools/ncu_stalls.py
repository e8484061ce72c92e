#!/usr/bin/env python3
"""Summarises where a kernel's warps stall, per SASS instruction, from Nsight Compute's source
page: which stall reasons the samples fall on, which instructions collect the most, and how
often chosen instructions ran. Two profiles side by side show what a change added (for example
the deterministic backward against the default one: the barrier stalls while one thread spins
on a counter, the fence of a release).

Input: the CSV that ncu writes for a report profiled with source counters (`--set full`, or at
least the SourceCounters section, and `--import-source yes` for CUDA lines):

  ncu --kernel-name regex:backward_kernel --launch-count 1 --set full -o det \\
      cuflash run -b 1 --heads 8 -s 1024 -d 64 --dtype fp32 --backward --deterministic
  ncu --import det.ncu-rep --page source --csv --print-source sass > det.csv
  python3 share/tools/ncu_stalls.py default.csv det.csv --match 'MEMBAR|ERRBAR|CCTL|STRONG'

Each file: its sample count, the reasons with at least --min-share of the samples, the --top
instructions by samples (with each one's main reason and executions) and every instruction
matching --match (a regular expression over the SASS text) that ran, with its executions and
samples.
"""
import argparse
import csv
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
SOURCE = "Source"


class Profile:
    """The instructions of one kernel: (sass text, executions, samples, {reason: samples})."""

    def __init__(self, path):
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        header_at = next((i for i, row in enumerate(rows) if SAMPLES in row and SOURCE in row),
                         None)
        if header_at is None:
            raise ValueError(f"{path}: no '{SAMPLES}' column: not ncu's source page with "
                             "source counters (--page source --csv --print-source sass)")
        header = rows[header_at]
        self.kernel = " ".join(rows[0][1:]).strip() if header_at > 0 else ""
        column = {name: i for i, name in enumerate(header)}
        reasons = [(name[len("stall_"):], i) for name, i in column.items()
                   if name.startswith("stall_") and "Not Issued" not in name]
        self.instructions = []
        for row in rows[header_at + 1:]:
            if len(row) < len(header):
                continue
            by_reason = {reason: number(row[i]) for reason, i in reasons}
            self.instructions.append((row[column[SOURCE]].strip(), number(row[column[EXECUTED]]),
                                      number(row[column[SAMPLES]]), by_reason))

    def samples(self):
        return sum(samples for _, _, samples, _ in self.instructions)

    def by_reason(self):
        totals = {}
        for _, _, _, reasons in self.instructions:
            for reason, samples in reasons.items():
                totals[reason] = totals.get(reason, 0) + samples
        return totals


def number(text):
    text = text.replace(",", "").strip()
    try:
        return int(float(text)) if text else 0
    except ValueError:
        return 0


def main_reason(reasons):
    reason, samples = max(reasons.items(), key=lambda item: item[1], default=("-", 0))
    return reason if samples > 0 else "-"


def summarise(path, profile, top, match, min_share):
    total = profile.samples()
    lines = [f"{path}: {total} samples, {len(profile.instructions)} instructions"]
    if profile.kernel:
        lines.append(f"  kernel: {profile.kernel}")
    shares = sorted(profile.by_reason().items(), key=lambda item: -item[1])
    lines.append("  by reason: " + ", ".join(f"{reason} {samples}" for reason, samples in shares
                                               if total and samples >= min_share * total))
    # (The executions tell whose instruction it is and whether a wait succeeded at its first
    # try: an instruction of a loop that every consumer warp runs once an iteration, against one
    # warp's of the producer, or a retry branch that ran more often than its loop.)
    lines.append(f"  top {top} instructions by samples (samples, main reason, executions):")
    ranked = sorted(profile.instructions, key=lambda ins: -ins[2])[:top]
    for sass, executed, samples, reasons in ranked:
        lines.append(f"    {samples:7d}  {main_reason(reasons):18s} {executed:9d}x  {sass[:70]}")
    if match is not None:
        lines.append(f"  instructions matching /{match.pattern}/ that ran:")
        for sass, executed, samples, reasons in profile.instructions:
            if executed > 0 and match.search(sass):
                lines.append(f"    {sass[:60]:60s} executed {executed:8d}  samples {samples:6d}"
                             f" ({main_reason(reasons)})")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", nargs="+", help="ncu --page source --csv --print-source sass output")
    parser.add_argument("--top", type=int, default=10, help="instructions listed by samples")
    parser.add_argument("--match", help="also list the instructions whose SASS matches this "
                        "regular expression (e.g. 'MEMBAR|BAR.SYNC|ATOM')")
    parser.add_argument("--min-share", type=float, default=0.02,
                        help="the smallest share of the samples a listed reason has")
    args = parser.parse_args(argv)
    try:
        match = re.compile(args.match) if args.match else None
    except re.error as error:
        print(f"ncu_stalls.py: --match: {error}", file=sys.stderr)
        return 2
    reports = []
    for path in args.csv:
        try:
            reports.append(summarise(path, Profile(path), args.top, match, args.min_share))
        except (OSError, ValueError) as error:
            print(f"ncu_stalls.py: {error}", file=sys.stderr)
            return 2
    print("\n\n".join(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
