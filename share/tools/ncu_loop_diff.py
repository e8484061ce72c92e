#!/usr/bin/env python3
"""Compares the hot loop of one kernel in two Nsight Compute profiles, instruction by
instruction: the instructions that ran exactly N times in each (by default the count that the
most samples fall on: a loop body), aligned with register numbers and addresses set aside, and
what one has that the other lacks, with each instruction's samples. Two builds of the same loop
that ptxas scheduled differently show where the extra samples went (an operand produced just
before the instruction that needs it, a load moved into the critical path).

Input: two CSVs of ncu's source page with source counters, as for ncu_stalls.py:

  ncu --import base.ncu-rep --page source --csv --print-source sass > base.csv
  python3 share/tools/ncu_loop_diff.py base.csv candidate.csv [--executed N] [--context REGEX]

--context REGEX also prints, for each profile, the instructions before and after every loop
instruction matching REGEX (where a stall landed).
"""
import argparse
import difflib
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_stalls import Profile  # noqa: E402


def hottest_count(profile):
    """The execution count that collects the most samples: a loop body's."""
    samples_by_count = {}
    for _, executed, samples, _ in profile.instructions:
        if executed > 0:
            samples_by_count[executed] = samples_by_count.get(executed, 0) + samples
    return max(samples_by_count.items(), key=lambda item: item[1])[0]


def shape(sass):
    """The instruction without what register allocation and placement choose."""
    sass = re.sub(r"0x7f[0-9a-f]+", "ADDR", sass)
    sass = re.sub(r"\bU?R\d+\b", "R", sass)
    return re.sub(r"\bU?P\d\b", "P", sass)


def loop(profile, executed):
    return [(sass, samples) for sass, count, samples, _ in profile.instructions
            if count == executed]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base")
    parser.add_argument("candidate")
    parser.add_argument("--executed", type=int, help="the loop's execution count (default: the "
                        "count with the most samples in the base)")
    parser.add_argument("--context", help="print the neighbourhood of the loop instructions "
                        "matching this regular expression")
    parser.add_argument("--lines", type=int, default=12, help="neighbours printed before each")
    args = parser.parse_args(argv)
    try:  # bad input is one line on stderr and exit 2, as in ncu_stalls.py
        pattern = re.compile(args.context) if args.context else None
    except re.error as error:
        print(f"ncu_loop_diff.py: --context: {error}", file=sys.stderr)
        return 2
    try:
        base, candidate = Profile(args.base), Profile(args.candidate)
    except (OSError, ValueError) as error:
        print(f"ncu_loop_diff.py: {error}", file=sys.stderr)
        return 2
    if not any(executed > 0 for _, executed, _, _ in base.instructions):
        print(f"ncu_loop_diff.py: {args.base}: no executed instructions", file=sys.stderr)
        return 2
    executed = args.executed or hottest_count(base)
    a, b = loop(base, executed), loop(candidate, executed)
    if not a and not b:
        print(f"ncu_loop_diff.py: no instruction executed {executed} times in either profile",
              file=sys.stderr)
        return 2
    print(f"executed {executed} times: base {len(a)} instructions, {sum(s for _, s in a)} "
          f"samples; candidate {len(b)} instructions, {sum(s for _, s in b)} samples")
    matcher = difflib.SequenceMatcher(None, [shape(s) for s, _ in a], [shape(s) for s, _ in b],
                                      autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        print(f"{tag} base {i1}-{i2} candidate {j1}-{j2}")
        for sass, samples in a[i1:i2]:
            print(f"  - {sass[:72]:72s} {samples:7d}")
        for sass, samples in b[j1:j2]:
            print(f"  + {sass[:72]:72s} {samples:7d}")
    if pattern:
        for name, body in (("base", a), ("candidate", b)):
            for i, (sass, _) in enumerate(body):
                if pattern.search(sass):
                    print(f"{name}, loop instruction {i}:")
                    for near, samples in body[max(0, i - args.lines):i + 3]:
                        print(f"    {near[:72]:72s} {samples:7d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
