#!/usr/bin/env python3
"""Kernel times from an `ncu --metrics gpu__time_duration.sum --csv` listing, in launch order.

  python3 kernel_times.py LISTING.csv [--last-half]

--last-half keeps the second half of the launches (cudnn_backward.py runs its forward and
backward twice; the second pass is the one to read).
"""
import csv
import sys

UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def launches(path):
    rows = [r for r in csv.reader(open(path)) if len(r) > 10]
    header, rows = rows[0], rows[1:]
    name, grid = header.index("Kernel Name"), header.index("Grid Size")
    unit, value = header.index("Metric Unit"), header.index("Metric Value")
    for r in rows:
        yield r[name], r[grid], float(r[value].replace(",", "")) * UNITS[r[unit]]


def main():
    found = list(launches(sys.argv[1]))
    if "--last-half" in sys.argv[2:]:
        found = found[len(found) // 2:]
    total = sum(us for _, _, us in found)
    for name, grid, us in found:
        print(f"{us:9.1f} us {100 * us / total:5.1f} %  grid {grid:<16} {name[:100]}")
    print(f"{total:9.1f} us in all")


if __name__ == "__main__":
    main()
