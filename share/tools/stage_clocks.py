#!/usr/bin/env python3
"""The GPU's SM clock and power during each stage of a benchmark run.

    stage_clocks.py STAGES CLOCKS.csv [CLOCKS.csv ...]

STAGES: lines "TIMESTAMP start NAME" and "TIMESTAMP end NAME" in the machine's local time, as
`date '+%Y/%m/%d %H:%M:%S.%3N'` writes them. CLOCKS: `nvidia-smi --query-gpu=timestamp,
clocks.sm,power.draw[,temperature.gpu] --format=csv -lms N`, whose timestamps are local time in
the same format. Printed per stage: the samples inside it, the SM clock's minimum / median /
maximum (MHz), the median power (W) and the highest temperature (C). Under sustained load the
clock falls within seconds (the power cap), so two stages' timings compare fairly only where
their clocks do.
"""
import statistics
import sys
from datetime import datetime

TIME_FORMAT = "%Y/%m/%d %H:%M:%S.%f"


def number(text):
    """The leading number of a field such as " 1980 MHz"; None for "[N/A]" and the like."""
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return None


def read_clocks(paths):
    samples = []
    for path in paths:
        for line in open(path, errors="replace"):
            fields = line.split(",") + [""]  # the temperature may be missing
            if len(fields) < 4:
                continue
            try:
                when = datetime.strptime(fields[0].strip(), TIME_FORMAT)
            except ValueError:
                continue  # the header, or an error message
            samples.append((when, number(fields[1]), number(fields[2]), number(fields[3])))
    return sorted(samples, key=lambda s: s[0])


def read_stages(path):
    """[(name, start, end)] in order of their start; a stage without an end is left out."""
    starts, stages = {}, []
    for line in open(path):
        parts = line.split(maxsplit=3)
        if len(parts) < 4:
            continue
        when = datetime.strptime(f"{parts[0]} {parts[1]}", TIME_FORMAT)
        if parts[2] == "start":
            starts[parts[3].strip()] = when
        elif parts[2] == "end" and parts[3].strip() in starts:
            name = parts[3].strip()
            stages.append((name, starts.pop(name), when))
    return sorted(stages, key=lambda s: s[1])


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    samples = read_clocks(sys.argv[2:])
    for name, start, end in read_stages(sys.argv[1]):
        inside = [s for s in samples if start <= s[0] <= end]
        clocks = [s[1] for s in inside if s[1] is not None]
        power = [s[2] for s in inside if s[2] is not None]
        heat = [s[3] for s in inside if s[3] is not None]
        if not clocks:
            print(f"  {name:34s} no clock samples")
            continue
        watts = f"{statistics.median(power):.0f}" if power else "-"
        degrees = f"{max(heat):.0f}" if heat else "-"
        print(f"  {name:34s} {len(inside):4d} samples, SM {min(clocks):.0f} / "
              f"{statistics.median(clocks):.0f} / {max(clocks):.0f} MHz, {watts} W, {degrees} C")


if __name__ == "__main__":
    main()
