#!/usr/bin/env python3
"""Counts a kernel's SASS by opcode or by trip count, from Nsight Compute source pages.

  ncu_opcodes.py mix A.csv B.csv [--reason wait] [--top 30] [--full] [--match REGEX]
      Two kernels side by side, per opcode (its name up to the first dot, HGMMA whole; with
      --full, with its modifiers): instructions executed, warp-stall samples and the samples of
      stall reason --reason; the largest first; --match keeps the opcodes matching a regex.
  ncu_opcodes.py trips K.csv [--top 10] [--opcodes COUNT]
      One kernel's executed instructions by trip count: instructions that run once per tile,
      once per key block, in a retry loop, ... share an execution count. For the --top counts:
      the static instructions that have it, their executed total, share and samples. With
      --opcodes COUNT, the instructions of that count by opcode instead.

Input: the CSV that share/tools/ncu_stalls.py reads (`ncu --import R.ncu-rep --page source --csv
--print-source sass` of a report profiled with source counters).
"""
import argparse
import collections
import re

from ncu_stalls import Profile


def opcode(sass, full=False):
    op = re.sub(r"^@!?U?P\w+\s+", "", sass.strip()).split(" ")[0]
    if full:
        return op
    return "HGMMA" if op.startswith("HGMMA") else op.split(".")[0]


def tally(profile, reason, full):
    executed, samples, by_reason = (collections.Counter() for _ in range(3))
    for sass, count, sampled, reasons in profile.instructions:
        op = opcode(sass, full)
        executed[op] += count
        samples[op] += sampled
        by_reason[op] += reasons.get(reason, 0)
    return executed, samples, by_reason


def mix(args):
    a = tally(Profile(args.a), args.reason, args.full)
    b = tally(Profile(args.b), args.reason, args.full)
    ops = sorted((o for o in set(a[0]) | set(b[0]) if re.search(args.match, o)),
                 key=lambda o: (-(a[0][o] + b[0][o]), o))
    column = "stall_" + args.reason
    print(f"A: {args.a}\nB: {args.b}")
    print(f"{'opcode':14s} {'A executed':>12s} {'B executed':>12s} {'A samples':>10s} "
          f"{'B samples':>10s} {'A ' + column:>16s} {'B ' + column:>16s}")
    print(f"{'(all)':14s} {sum(a[0].values()):12.0f} {sum(b[0].values()):12.0f} "
          f"{sum(a[1].values()):10.0f} {sum(b[1].values()):10.0f} {sum(a[2].values()):16.0f} "
          f"{sum(b[2].values()):16.0f}")
    for o in ops[:args.top]:
        print(f"{o:14s} {a[0][o]:12.0f} {b[0][o]:12.0f} {a[1][o]:10.0f} {b[1][o]:10.0f} "
              f"{a[2][o]:16.0f} {b[2][o]:16.0f}")


def trips(args):
    profile = Profile(args.csv)
    if args.opcodes is not None:
        ops = collections.Counter(opcode(sass) for sass, count, _, _ in profile.instructions
                                  if count == args.opcodes)
        print(f"{args.csv}: {sum(ops.values())} static instructions run {args.opcodes} times")
        print("  " + ", ".join(f"{op} {n}" for op, n in ops.most_common()))
        return
    static, samples = collections.Counter(), collections.Counter()
    for _, count, sampled, _ in profile.instructions:
        static[count] += 1
        samples[count] += sampled
    total = sum(count * n for count, n in static.items())
    print(f"{args.csv}: {total / 1e6:.2f}M instructions executed")
    print(f"{'trip count':>12s} {'static':>7s} {'executed':>10s} {'share':>6s} {'samples':>8s}")
    for count, n in sorted(static.items(), key=lambda kv: -kv[0] * kv[1])[:args.top]:
        print(f"{count:12d} {n:7d} {count * n / 1e6:9.2f}M {count * n / total:6.1%} "
              f"{samples[count]:8.0f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    commands = parser.add_subparsers(dest="command", required=True)
    m = commands.add_parser("mix", help="two kernels by opcode")
    m.add_argument("a")
    m.add_argument("b")
    m.add_argument("--reason", default="wait", help="stall reason (ncu's stall_ column)")
    m.add_argument("--top", type=int, default=30)
    m.add_argument("--full", action="store_true", help="opcodes with their modifiers")
    m.add_argument("--match", default="", help="only opcodes matching this regex")
    m.set_defaults(run=mix)
    t = commands.add_parser("trips", help="one kernel by trip count")
    t.add_argument("csv")
    t.add_argument("--top", type=int, default=10)
    t.add_argument("--opcodes", type=int, help="list this trip count's opcodes")
    t.set_defaults(run=trips)
    args = parser.parse_args(argv)
    try:
        args.run(args)
    except (OSError, ValueError) as error:  # a missing file, or not a source page
        parser.exit(2, f"ncu_opcodes.py: {error}\n")


if __name__ == "__main__":
    main()
