#!/usr/bin/env python3
"""Shows where a kernel's wgmma waits sit in its SASS, and what work lies between them.

The compiler (ptxas) schedules WARPGROUP.DEPBAR, the wait for committed wgmma groups, where it
sees fit within the rules of the registers that the groups own: a wait written after some work
in the source may run before it, and the work then no longer overlaps the products waited for
(the sm90 forward's wait for P_j V_j runs before the softmax of S_j+1 that the source places
ahead of it: share/docs/performance-log.md, 2026-12-04). This prints, for each kernel of a
`cuobjdump -sass` listing, the wgmma groups as they are committed, the waits, the barriers and
the counts of chosen instructions (MUFU.EX2, F2FP, STS by default) between them, and a line per
"DEPBAR.LE gsb0, 0x1" with the exponentials between it and the next full wait.

  cuobjdump -sass -fun KERNEL build/gpu/lib/.../fwd_bf16_d64.cu.o > fwd.sass
  python3 share/tools/sass_waits.py fwd.sass
  python3 share/tools/sass_waits.py fwd.sass --count 'MUFU.EX2|FMNMX' --kernel 'forward_kernel.*Li64'

A kernel whose groups the compiler serialized shows a full wait after every group.
"""
import argparse
import re
import sys

INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;?\s*/\*")
FUNCTION = re.compile(r"Function\s*:\s*(\S+)")
EVENTS = ("HGMMA", "WARPGROUP.DEPBAR", "BAR.SYNC", "BAR.ARV", "SYNCS.ARRIVE")
GUARD = re.compile(r"^@!?U?P[T0-9]+\s+")  # an instruction's predicate, as in "@!P0 BAR.ARV"


def kernels(path):
    """(name, [instruction text]) for each function of the listing."""
    name, body = None, []
    with open(path) as f:
        for line in f:
            found = FUNCTION.search(line)
            if found:
                if name is not None:
                    yield name, body
                name, body = found.group(1), []
                continue
            match = INSTRUCTION.search(line)
            if match and name is not None:
                body.append(match.group(1))
    if name is not None:
        yield name, body


def timeline(body, counted):
    """Events in order, with the counted instructions between consecutive events folded in."""
    rows, counts = [], {}

    def close_counts():
        if counts:
            rows.append("    " + ", ".join(f"{n} {k}" for k, n in counts.items()))
            counts.clear()

    for text in body:
        unguarded = GUARD.sub("", text)
        if unguarded.startswith(EVENTS):
            # One row per committed group rather than per wgmma instruction.
            if unguarded.startswith("HGMMA") and "gsb0" not in unguarded:
                continue
            close_counts()
            rows.append(("  group committed: " if "HGMMA" in text else "  ") + text)
            continue
        match = counted.search(text)
        if match:
            counts[match.group(0)] = counts.get(match.group(0), 0) + 1
    close_counts()
    return rows


def exponentials_between_waits(body):
    """MUFU.EX2 count between each 'DEPBAR.LE gsb0, 0x1' and the next full wait."""
    between, count = [], None
    for text in body:
        if "DEPBAR.LE gsb0, 0x1" in text:
            count = 0
        elif "DEPBAR.LE gsb0, 0x0" in text and count is not None:
            between.append(count)
            count = None
        elif "MUFU.EX2" in text and count is not None:
            count += 1
    return between


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sass", nargs="+", help="cuobjdump -sass output")
    parser.add_argument("--kernel", default=".", help="regular expression over kernel names")
    parser.add_argument("--count", default=r"MUFU\.EX2|F2FP|STS",
                        help="regular expression: instructions counted between the events")
    parser.add_argument("--summary", action="store_true",
                        help="one line per kernel (waits and exponentials between them) only")
    args = parser.parse_args()
    try:  # bad input is one line on stderr and exit 2
        counted = re.compile(args.count)
        chosen = re.compile(args.kernel)
    except re.error as error:
        print(f"sass_waits.py: --count or --kernel: {error}", file=sys.stderr)
        return 2
    listed = 0
    for path in args.sass:
        try:
            functions = list(kernels(path))
        except (OSError, UnicodeDecodeError) as error:
            print(f"sass_waits.py: {path}: {getattr(error, 'strerror', None) or error}",
                  file=sys.stderr)
            return 2
        for name, body in functions:
            if not chosen.search(name):
                continue
            waits = sum("WARPGROUP.DEPBAR" in text for text in body)
            print(f"{path}: {name}: {len(body)} instructions, {waits} wgmma waits, "
                  f"MUFU.EX2 between a wait for all but one group and the next full wait: "
                  f"{exponentials_between_waits(body)}")
            if not args.summary:
                print("\n".join(timeline(body, counted)))
            listed += 1
    if listed == 0:
        print("sass_waits.py: no kernel of the listing matches --kernel (is it cuobjdump -sass "
              "output?)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
