#!/usr/bin/env python3
"""Two kernels' opcodes side by side, from Nsight Compute source pages (CSV, SASS).

    opcode_mix.py A.csv B.csv [--reason stall_wait] [--top 30] [--full] [--match REGEX]

For each opcode (its name up to the first dot, HGMMA whole; with --full, with its modifiers): the
instructions executed, the warp-stall samples and the --reason column's samples of each kernel,
the largest first; --match keeps the opcodes that match a regular expression. Input: `ncu --import R.ncu-rep --page source --csv --print-source sass` of a report
profiled with source counters (as share/results/h200-2026-12-06-main/next/stalls.sh does).
"""
import argparse
import collections
import csv
import re


def rows_of(path):
    lines = open(path).read().splitlines()
    table = list(csv.reader(lines[1:]))  # the first line names the kernel
    header = table[0]
    return [dict(zip(header, r)) for r in table[1:] if len(r) == len(header)]


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(sass, full):
    op = re.sub(r"^@!?U?P\w+\s+", "", sass.strip()).split(" ")[0]
    if full:
        return op
    return "HGMMA" if op.startswith("HGMMA") else op.split(".")[0]


def tally(path, reason, full):
    executed, samples, by_reason = (collections.Counter() for _ in range(3))
    for r in rows_of(path):
        op = opcode(r["Source"], full)
        executed[op] += number(r["Instructions Executed"])
        samples[op] += number(r["Warp Stall Sampling (All Samples)"])
        by_reason[op] += number(r.get(reason, "0"))
    return executed, samples, by_reason


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--reason", default="stall_wait")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--full", action="store_true", help="opcodes with their modifiers")
    parser.add_argument("--match", default="", help="only opcodes matching this regex")
    args = parser.parse_args()
    a, b = tally(args.a, args.reason, args.full), tally(args.b, args.reason, args.full)
    ops = sorted((o for o in set(a[0]) | set(b[0]) if re.search(args.match, o)),
                 key=lambda o: -(a[0][o] + b[0][o]))
    print(f"A: {args.a}\nB: {args.b}")
    print(f"{'opcode':14s} {'A executed':>12s} {'B executed':>12s} {'A samples':>10s} "
          f"{'B samples':>10s} {'A ' + args.reason:>16s} {'B ' + args.reason:>16s}")
    print(f"{'(all)':14s} {sum(a[0].values()):12.0f} {sum(b[0].values()):12.0f} "
          f"{sum(a[1].values()):10.0f} {sum(b[1].values()):10.0f} {sum(a[2].values()):16.0f} "
          f"{sum(b[2].values()):16.0f}")
    for o in ops[:args.top]:
        print(f"{o:14s} {a[0][o]:12.0f} {b[0][o]:12.0f} {a[1][o]:10.0f} {b[1][o]:10.0f} "
              f"{a[2][o]:16.0f} {b[2][o]:16.0f}")


if __name__ == "__main__":
    main()
