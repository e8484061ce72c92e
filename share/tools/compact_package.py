#!/usr/bin/env python3
"""Rewrites benchmark result files in the compact form that `cuflash bench --out-dir` and
share/tools/sdpa_bench.py --out-dir write by default.

A results.json (cuflash) or sdpa-<backend>.json (PyTorch SDPA) in the full form holds Google
Benchmark's rows: one iteration row per sample and six aggregate rows (mean, median, stddev, cv,
min, max) per pass. The compact form keeps the median row of each pass alone, with every
statistic on it (median_ms, mean_ms and stddev_ms are added from the aggregate rows when the
file predates them), written one line per row: the same schema, so share/tools/bench_report.py
and Google Benchmark's compare.py -a read it as before. Context and failures are kept as they
are. A file that is already compact is left alone.

Arguments are files or folders; a folder is searched recursively for results.json and
sdpa-*.json. Each file is replaced through a temporary file and a rename.

  python3 share/tools/compact_package.py share/results/h200-2026-11-29-fp32-tf32
  python3 share/tools/compact_package.py --dry-run old-package/cuflash-seed/results.json
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_report import UNIT_MS  # noqa: E402  (time_unit -> milliseconds)
from sdpa_bench import json_lines  # noqa: E402  (the writer of the packages themselves)

ADDED = ("median_ms", "mean_ms", "stddev_ms")  # inserted after "noise", as the writers place them


class CompactError(Exception):
    pass


def result_files(inputs):
    files = []
    for item in inputs:
        if os.path.isdir(item):
            for folder, _, names in sorted(os.walk(item)):
                files += [
                    os.path.join(folder, n)
                    for n in sorted(names)
                    if n == "results.json" or (n.startswith("sdpa-") and n.endswith(".json"))
                ]
        elif os.path.isfile(item):
            files.append(item)
        else:
            raise CompactError(f"{item}: no such file or folder")
    return files


def ms(row):
    return row["real_time"] * UNIT_MS[row.get("time_unit", "ns")]


def with_statistics(median, aggregates):
    """The median row with median_ms, mean_ms, stddev_ms after its noise field."""
    if all(key in median for key in ADDED):
        return median
    values = {"median_ms": ms(median)}
    for name in ("mean", "stddev"):
        if name in aggregates:
            values[f"{name}_ms"] = ms(aggregates[name])
    row = {}
    for key, value in median.items():
        row[key] = value
        if key == "noise":
            row.update(values)
    for key, value in values.items():  # no noise field: at the end
        row.setdefault(key, value)
    return row


def compact_doc(doc, path):
    """(compact document, changed?) for a loaded results document."""
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise CompactError(f"{path}: not a benchmark results file (no 'benchmarks' list)")
    rows = doc["benchmarks"]
    aggregates = {}  # run_name -> {aggregate_name: row}
    for r in rows:
        if r.get("run_type") == "aggregate":
            aggregates.setdefault(r.get("run_name"), {})[r.get("aggregate_name")] = r
    medians = [
        with_statistics(r, aggregates.get(r.get("run_name"), {}))
        for r in rows
        if r.get("run_type") == "aggregate" and r.get("aggregate_name") == "median"
    ]
    runs = {r.get("run_name") for r in rows}
    if len({r.get("run_name") for r in medians}) != len(runs):
        raise CompactError(f"{path}: some benchmark has no median row; left as it is")
    out = {key: (medians if key == "benchmarks" else value) for key, value in doc.items()}
    return out, medians != rows


def main(argv):
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    p.add_argument("inputs", nargs="+", help="result files, or folders to search")
    p.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")
    args = p.parse_args(argv)
    status = 0
    try:
        files = result_files(args.inputs)
    except CompactError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not files:
        print("error: no results.json or sdpa-*.json found", file=sys.stderr)
        return 2
    for path in files:
        try:
            with open(path) as f:
                text = f.read()
            doc, changed = compact_doc(json.loads(text), path)
        except (OSError, ValueError, KeyError, CompactError) as e:
            print(f"error: {path}: {e}" if not isinstance(e, CompactError) else f"error: {e}",
                  file=sys.stderr)
            status = 1
            continue
        if not changed:  # the rows already compact: rewriting would only re-spell numbers
            print(f"{path}: already compact")
            continue
        new_text = json_lines(doc)
        print(
            f"{path}: {len(text):,} -> {len(new_text):,} bytes, "
            f"{len(doc['benchmarks'])} median rows"
        )
        if not args.dry_run:
            with open(path + ".tmp", "w") as f:
                f.write(new_text)
            os.replace(path + ".tmp", path)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
