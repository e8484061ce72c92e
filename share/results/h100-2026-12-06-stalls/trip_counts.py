#!/usr/bin/env python3
"""How a kernel's executed instructions divide by trip count, from an ncu source page (CSV, SASS).

    trip_counts.py KERNEL.csv [--top 10] [--opcodes COUNT]

Every SASS instruction has an execution count (warp-level); instructions that run once per
tile, once per key block, in a retry loop, ... share one. For the --top counts by executed
instructions: the count, the static instructions that have it, their executed total and their
warp-stall samples. --opcodes COUNT: the static instructions of that count by opcode instead.
Input as for opcode_mix.py.
"""
import argparse
import collections

from opcode_mix import number, opcode, rows_of


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--opcodes", type=int, help="list this trip count's opcodes")
    args = parser.parse_args()
    if args.opcodes is not None:
        ops = collections.Counter(opcode(r["Source"], False) for r in rows_of(args.csv)
                                  if int(number(r["Instructions Executed"])) == args.opcodes)
        print(f"{args.csv}: {sum(ops.values())} static instructions run {args.opcodes} times")
        print("  " + ", ".join(f"{op} {n}" for op, n in ops.most_common()))
        return
    static, samples = collections.Counter(), collections.Counter()
    total = 0.0
    for r in rows_of(args.csv):
        count = int(number(r["Instructions Executed"]))
        static[count] += 1
        samples[count] += number(r["Warp Stall Sampling (All Samples)"])
        total += count
    print(f"{args.csv}: {total / 1e6:.2f}M instructions executed")
    print(f"{'trip count':>12s} {'static':>7s} {'executed':>10s} {'share':>6s} {'samples':>8s}")
    for count, n in sorted(static.items(), key=lambda kv: -kv[0] * kv[1])[:args.top]:
        print(f"{count:12d} {n:7d} {count * n / 1e6:9.2f}M {count * n / total:6.1%} "
              f"{samples[count]:8.0f}")


if __name__ == "__main__":
    main()
