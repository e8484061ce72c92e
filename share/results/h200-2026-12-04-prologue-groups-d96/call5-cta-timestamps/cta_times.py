#!/usr/bin/env python3
"""Per-CTA timing of the default sm90 backward kernel from the probe's stamps.

    cta_times.py NAME ...   (reads NAME.bin in this folder)

Each .bin holds, per CTA in launch order, eight little-endian uint64: global-timer stamps (ns)
of 0 entry, 1 K and V landed, 2 the first Q and dO landed, 3 the loop done, 4 dK and dV stored
(consumer thread 0), 5 the reducer's last reduce read (producer), 6 unused, 7 the SM. Written by
a build with cta-timestamps.patch and CUFLASH_PROBE=FILE, from the last backward call of
`cuflash bench --no-graph` (warm).
"""
import statistics
import struct
import sys


def load(path):
    data = open(path, "rb").read()
    return [struct.unpack_from("<8Q", data, 64 * i) for i in range(len(data) // 64)]


def report(name):
    rows = load(f"{name}.bin")
    us = lambda ns: ns / 1000.0
    end = lambda r: max(r[4], r[5])
    t0 = min(r[0] for r in rows)
    span = us(max(end(r) for r in rows) - t0)
    median = statistics.median
    p90 = lambda values: sorted(values)[9 * len(values) // 10]
    by_sm = {}
    for r in rows:
        by_sm.setdefault(r[7], []).append(r)
    gaps, busy = [], 0.0
    for ctas in by_sm.values():
        ctas.sort(key=lambda r: r[0])
        gaps += [us(b[0] - end(a)) for a, b in zip(ctas, ctas[1:])]
        busy += sum(us(end(r) - r[0]) for r in ctas)
    finish = [us(max(end(r) for r in ctas) - t0) for ctas in by_sm.values()]
    first_qdo = [us(r[2] - r[0]) for r in rows]
    print(f"{name}: {len(rows)} CTAs on {len(by_sm)} SMs, kernel span {span:.1f} us, "
          f"SMs busy {100 * busy / (len(by_sm) * span):.1f} % of it")
    print(f"  per CTA (median, us): total {median([us(end(r) - r[0]) for r in rows]):.2f}, "
          f"K/V landed {median([us(r[1] - r[0]) for r in rows]):.2f}, "
          f"first Q/dO landed {median(first_qdo):.2f} (p90 {p90(first_qdo):.2f}), "
          f"loop {median([us(r[3] - r[2]) for r in rows]):.2f}, "
          f"epilogue {median([us(r[4] - r[3]) for r in rows]):.2f}")
    print(f"  between CTAs on an SM: median {median(gaps):.2f} us, p90 {p90(gaps):.2f}; "
          f"{len(rows) / len(by_sm):.1f} CTAs an SM; SMs finish at {min(finish):.1f}-{max(finish):.1f} us")
    first_wave = [r for r in rows if r[0] - t0 < 2000]
    later = [r for r in rows if r[0] - t0 >= 2000]
    print(f"  first Q/dO landed: first wave ({len(first_wave)} CTAs) "
          f"{median([us(r[2] - r[0]) for r in first_wave]):.2f} us, later CTAs "
          f"{median([us(r[2] - r[0]) for r in later]):.2f}")


for name in sys.argv[1:]:
    report(name)
