#!/usr/bin/env python3
"""Joins benchmark results of cuflash and PyTorch SDPA into one markdown report and charts.

Inputs are Google-Benchmark-style JSON files written by `cuflash bench` (results.json) and
share/tools/sdpa_bench.py (sdpa-<backend>.json), or result package folders holding them. Rows are
matched by sweep and benchmark name (e.g. fwd/bf16/b:1/h:8/sq:4096/sk:4096/d:64/causal:1).
One run of each backend and sweep: a second one is refused (its rows would replace the first's
unseen; compare runs with `cuflash bench --compare`). A run that did not complete (metadata
status "interrupted") is reported, with its count of finished cases, at the top and on stderr.

The markdown has, per sweep and per (pass, dtype), the median time and TFLOP/s of every backend
and the speed ratio of the baseline (cuflash by default) to each other backend X:
cuflash/X speed = X's time / cuflash's time, so above 1 means cuflash is faster.
A ratio marked ~ lies within the two runs' noise; one marked * compares different timing
methods (CUDA graph against direct calls). Results of different GPUs are never joined. Each
sweep's summary counts the cases at or above 1x and lists those where the baseline is slower.

The chart (one PNG per sweep: TFLOP/s against sequence length, one panel per pass, dtype,
head_dim and mask, one line per backend) needs matplotlib; without it the markdown is still
written.

  python3 share/tools/bench_report.py pkg/cuflash-seed pkg/sdpa-seed --output pkg/report.md \
      --png pkg/report.png
"""
import argparse
import glob
import json
import math
import os
import sys
from collections import OrderedDict, defaultdict

NOISE_MARK = "~"
UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}  # time_unit -> milliseconds
METHOD_MARK = "*"


class ReportError(Exception):
    pass


# --- Reading --------------------------------------------------------------------------------------


def json_files(inputs):
    """The JSON result files among `inputs` (files, or package folders)."""
    files = []
    for item in inputs:
        if os.path.isdir(item):
            found = sorted(
                glob.glob(os.path.join(item, "results.json"))
                + glob.glob(os.path.join(item, "sdpa-*.json"))
            )
            if not found:
                raise ReportError(f"{item}: no results.json or sdpa-*.json in this folder")
            files += found
        elif os.path.isfile(item):
            files.append(item)
        else:
            raise ReportError(f"{item}: no such file or folder")
    return files


def run_info(doc):
    """(sweep, gpu, status) of a results document, from the metadata in its context; status is
    None for a complete run, else e.g. "interrupted: 90 of 208 cases"."""
    context = doc.get("context", {})
    meta = context.get("cuflash_bench") or context.get("sdpa_bench") or {}
    sweep = meta.get("protocol", {}).get("sweep") or "unnamed"
    gpu = meta.get("device", {}).get("name") or "unknown GPU"
    status = meta.get("status", "complete")
    if status != "complete":
        cases = meta.get("cases", {})
        status += f": {cases.get('finished', '?')} of {cases.get('total', '?')} cases"
    else:
        status = None
    return os.path.basename(sweep).removesuffix(".txt"), gpu, status


def load(path):
    """Median rows and failures of one file: ([row], [failure], sweep, gpu, status)."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise ReportError(f"{path}: cannot read ({e})")
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise ReportError(f"{path}: not a benchmark results file (no 'benchmarks' list)")
    sweep, gpu, status = run_info(doc)
    rows = [
        median_row(r, f"{path}: benchmarks[{i}]")
        for i, r in enumerate(doc["benchmarks"])
        if isinstance(r, dict)
        and r.get("run_type") == "aggregate"
        and r.get("aggregate_name") == "median"
        and "tflops" in r
    ]
    failures = [dict(f, backend=f.get("backend", "cuflash")) for f in doc.get("failures", [])]
    return rows, failures, sweep, gpu, status


def median_row(row, where):
    """A median row with its backend and its time in ms; refused unless the time is a positive,
    finite number in a known unit (a ratio or a logarithm of it comes later)."""
    time, unit = row.get("real_time"), row.get("time_unit")
    if not isinstance(row.get("run_name"), str):
        raise ReportError(f"{where}: no run_name")
    if unit not in UNIT_MS:
        raise ReportError(f"{where}: time_unit {unit!r} is not one of {', '.join(UNIT_MS)}")
    if isinstance(time, bool) or not isinstance(time, (int, float)) or not 0 < time < math.inf:
        raise ReportError(f"{where}: real_time {time!r} is not a positive number")
    return dict(row, backend=row.get("backend", "cuflash"), ms=time * UNIT_MS[unit])


class Results:
    """Every median row, by sweep and benchmark name, then backend."""

    def __init__(self):
        self.rows = OrderedDict()  # sweep -> OrderedDict(run_name -> {backend: row})
        self.failures = defaultdict(list)  # sweep -> [failure]
        self.backends = []
        self.gpus = set()
        self.sources = {}  # (sweep, backend) -> the file its rows came from
        self.incomplete = []  # "PATH (interrupted: 90 of 208 cases)"

    def add(self, path):
        rows, failures, sweep, gpu, status = load(path)
        self.gpus.add(gpu)
        if status:
            self.incomplete.append(f"{path} ({status})")
        by_name = self.rows.setdefault(sweep, OrderedDict())
        for backend in dict.fromkeys(r["backend"] for r in rows):
            first = self.sources.setdefault((sweep, backend), path)
            if first != path:  # one run's rows would silently replace another's
                raise ReportError(
                    f"{path}: {backend} results of sweep {sweep} again (also in {first}); "
                    "give one run of each backend and sweep"
                )
        for r in rows:
            by_name.setdefault(r["run_name"], {})[r["backend"]] = r
            if r["backend"] not in self.backends:
                self.backends.append(r["backend"])
        self.failures[sweep] += failures

    def order_backends(self, baseline):
        """The baseline first, then the SDPA backends in a fixed order, then anything else."""
        known = [baseline] + [f"sdpa-{b}" for b in ("flash", "cudnn", "efficient", "math")]
        rank = lambda b: known.index(b) if b in known else len(known)
        self.backends.sort(key=rank)


# --- Numbers --------------------------------------------------------------------------------------


def ratio_cell(base, other):
    """other time / base time, with the marks described in the module docstring."""
    ratio = other["ms"] / base["ms"]
    noise = base.get("noise", 0) + other.get("noise", 0)
    mark = NOISE_MARK if abs(math.log(ratio)) < noise else ""
    mark += METHOD_MARK if base.get("timing") != other.get("timing") else ""
    return f"{mark}{ratio:.2f}"


def short_case(row):
    """The case without pass and dtype: b:1/h:8/sq:4096/sk:4096/d:64/causal:1."""
    return row["run_name"].split("/", 2)[2]


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


# --- Markdown -------------------------------------------------------------------------------------


def table(entries, backends, baseline):
    """A markdown table of one (pass, dtype) group; backends with no row in it are left out."""
    backends = [b for b in backends if any(b in e for e in entries)]
    others = [b for b in backends if b != baseline]
    header = ["case"] + [f"{b} ms" for b in backends] + [f"{b} TFLOP/s" for b in backends]
    header += [f"{baseline}/{b} speed" for b in others]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" + "---:|" * (len(header) - 1)]
    for by_backend in entries:
        any_row = next(iter(by_backend.values()))
        cells = [short_case(any_row)]
        cells += [f"{by_backend[b]['ms']:.4g}" if b in by_backend else "-" for b in backends]
        cells += [f"{by_backend[b]['tflops']:.1f}" if b in by_backend else "-" for b in backends]
        base = by_backend.get(baseline)
        cells += [
            ratio_cell(base, by_backend[b]) if base and b in by_backend else "-" for b in others
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def groups(by_name):
    """(pass, dtype) -> [ {backend: row} ] in file order."""
    out = OrderedDict()
    for by_backend in by_name.values():
        row = next(iter(by_backend.values()))
        out.setdefault((row["pass"], row["dtype"]), []).append(by_backend)
    return out


def summary_lines(sweep, by_name, backends, baseline):
    """One line per (pass, dtype): the geometric mean of the speed ratio against each backend."""
    lines = []
    for (pass_name, dtype), entries in groups(by_name).items():
        parts, counts = [], set()
        for other in backends:
            ratios = [
                e[other]["ms"] / e[baseline]["ms"] for e in entries if baseline in e and other in e
            ]
            if other != baseline and ratios:
                at_least_one = sum(r >= 1.0 for r in ratios)
                parts.append(
                    f"{baseline}/{other} {geomean(ratios):.2f}x (min {min(ratios):.2f}x, "
                    f"{at_least_one} at or above 1x)"
                )
                counts.add(len(ratios))
        if parts:
            cases = "/".join(str(n) for n in sorted(counts))
            lines.append(
                f"{sweep} {pass_name} {dtype}: speed {', '.join(parts)} "
                f"(geometric mean over {cases} cases)"
            )
    return lines


def memory_lines(by_name, backends, baseline):
    """Device memory of the backward pass (it holds the forward's buffers too: the fwd + bwd
    peak) against each backend: one line per backend with the largest and smallest ratio."""
    lines = []
    for other in backends:
        if other == baseline:
            continue
        ratios = []
        for by_backend in by_name.values():
            base, row = by_backend.get(baseline), by_backend.get(other)
            if base and row and base["pass"] == "bwd" and base.get("alloc_bytes") and row.get(
                "alloc_bytes"
            ):
                ratios.append((base["alloc_bytes"] / row["alloc_bytes"], short_case(base), base))
        if ratios:
            worst = max(ratios, key=lambda r: r[0])
            extra = worst[2]["alloc_bytes"] - by_name[worst[2]["run_name"]][other]["alloc_bytes"]
            lines.append(
                f"{baseline}/{other} fwd+bwd memory: at most {worst[0]:.4f}x "
                f"({worst[2]['dtype']} {worst[1]}: {worst[2]['alloc_bytes'] / 2**20:.2f} MiB, "
                f"{extra:+d} bytes), at least {min(r[0] for r in ratios):.4f}x over "
                f"{len(ratios)} cases"
            )
    return lines


def slower_lines(by_name, backends, baseline):
    """The cases where the baseline takes longer than another backend, slowest ratio first: the
    list a comparison is read for."""
    slower = []
    for by_backend in by_name.values():
        base = by_backend.get(baseline)
        for other in backends:
            row = by_backend.get(other)
            if other == baseline or base is None or row is None:
                continue
            ratio = row["ms"] / base["ms"]
            if ratio < 1.0:
                slower.append((ratio, other, base, row))
    slower.sort(key=lambda s: s[0])
    return [
        f"{base['pass']} {base['dtype']} {short_case(base)}: {baseline}/{other} "
        f"{ratio_cell(base, row)} ({base['ms']:.4g} ms against {row['ms']:.4g})"
        for _, other, base, row in slower
    ]


def failure_lines(failures):
    real = [f for f in failures if f.get("kind") != "unsupported"]
    unsupported = [f for f in failures if f.get("kind") == "unsupported"]
    lines = [
        f"- {f['backend']} {f['name']} ({f.get('pass', '?')}, {f['kind']}): {f['reason']}"
        for f in real
    ]
    per_backend = defaultdict(int)
    for f in unsupported:
        per_backend[f["backend"]] += 1
    lines += [
        f"- {b}: {n} cases unsupported (e.g. no kernel for the dtype)"
        for b, n in per_backend.items()
    ]
    return lines


def markdown(results, baseline):
    gpu = ", ".join(sorted(results.gpus))
    out = [
        f"# Benchmark report: {', '.join(results.backends)} on {gpu}\n",
        f"Median kernel time per call (ms) and TFLOP/s per case. `{baseline}/X speed` = time of "
        f"X / time of {baseline} (above 1: {baseline} is faster); `{NOISE_MARK}`: within the two "
        f"runs' noise; `{METHOD_MARK}`: different timing methods (CUDA graph, direct calls).\n",
    ]
    if results.incomplete:
        out.append(
            "**Incomplete runs** (their missing cases are absent from every table): "
            + "; ".join(results.incomplete)
            + "\n"
        )
    for sweep, by_name in results.rows.items():
        out.append(f"## Sweep {sweep}\n")
        summary = summary_lines(sweep, by_name, results.backends, baseline)
        if summary:
            out.append(
                "Summary (per pass and dtype only; never across GPUs, dtypes or versions):\n"
            )
            out.append("\n".join(f"- {line}" for line in summary) + "\n")
        memory = memory_lines(by_name, results.backends, baseline)
        if memory:
            out.append(
                "Device memory of forward + backward (`alloc_bytes` of the bwd pass: every buffer "
                "of both passes and the workspace; PyTorch's allocator peak for SDPA):\n"
            )
            out.append("\n".join(f"- {line}" for line in memory) + "\n")
        slower = slower_lines(by_name, results.backends, baseline)
        if len(results.backends) > 1:
            out.append(f"Cases where {baseline} is slower: {len(slower) or 'none'}\n")
            if slower:
                out.append("\n".join(f"- {line}" for line in slower) + "\n")
        for (pass_name, dtype), entries in groups(by_name).items():
            out.append(f"### {pass_name}, {dtype}\n")
            out.append(table(entries, results.backends, baseline))
        failures = failure_lines(results.failures.get(sweep, []))
        if failures:
            out.append(f"### Failures and unsupported cases ({sweep})\n")
            out.append("\n".join(failures) + "\n")
    return "\n".join(out)


# --- Chart ----------------------------------------------------------------------------------------


def panels(by_name):
    """(pass, dtype, head_dim, mask) -> {line label: [(seq_q, tflops)]}."""
    out = OrderedDict()
    for by_backend in by_name.values():
        for backend, r in by_backend.items():
            key = (r["pass"], r["dtype"], r["head_dim"], r["mask"])
            label = backend if r["heads_kv"] == r["heads"] else f"{backend} hkv={r['heads_kv']}"
            out.setdefault(key, OrderedDict()).setdefault(label, []).append(
                (r["seq_q"], r["tflops"])
            )
    return out


def seq_label(seq):
    return f"{seq // 1024}k" if seq % 1024 == 0 else str(seq)


def draw_panel(ax, title, lines, colors):
    seqs = sorted({p[0] for points in lines.values() for p in points})
    for label, points in lines.items():
        points.sort()
        ax.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            marker="o",
            label=label,
            color=colors[label],
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(seqs)
    ax.set_xticklabels([seq_label(s) for s in seqs])
    ax.minorticks_off()
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("sequence length")
    ax.set_ylabel("TFLOP/s")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)


def chart(sweep, by_name, path, plt, backends):
    """One figure: a panel per (pass, dtype, head_dim, mask), a line per backend."""
    groups_ = panels(by_name)
    labels = list(OrderedDict.fromkeys(l for lines in groups_.values() for l in lines))
    labels.sort(key=lambda l: backends.index(l.split()[0]) if l.split()[0] in backends else 99)
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {label: palette[i % len(palette)] for i, label in enumerate(labels)}  # fixed colours
    columns = min(4, len(groups_))
    rows = math.ceil(len(groups_) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.2 * rows + 1), squeeze=False)
    for ax, ((pass_name, dtype, d, mask), lines) in zip(axes.flat, groups_.items()):
        mask_text = "causal" if mask != "none" else "no mask"
        draw_panel(ax, f"{pass_name} {dtype} d={d} {mask_text}", lines, colors)
    for ax in list(axes.flat)[len(groups_) :]:
        ax.set_visible(False)
    top = 1 - 0.9 / fig.get_figheight()  # room for the title and the legend, in figure units
    fig.suptitle(
        f"Sweep {sweep}: TFLOP/s against sequence length", y=1 - 0.15 / fig.get_figheight()
    )
    handles = [plt.Line2D([], [], color=colors[l], marker="o") for l in labels]
    fig.legend(
        handles,
        labels,
        loc="upper center",
        ncol=min(len(labels), 6),
        bbox_to_anchor=(0.5, 1 - 0.4 / fig.get_figheight()),
        frameon=False,
    )
    fig.tight_layout(rect=(0, 0, 1, top))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def chart_path(png, sweep):
    stem, ext = os.path.splitext(png)
    return f"{stem}-{sweep}{ext or '.png'}"


def write_charts(results, png):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "note: matplotlib is not installed, so no chart was drawn (the markdown report is "
            "complete); "
            "install it with `pip install matplotlib` or `apt-get install python3-matplotlib`",
            file=sys.stderr,
        )
        return []
    paths = []
    for sweep, by_name in results.rows.items():
        if by_name:
            paths.append(chart_path(png, sweep))
            chart(sweep, by_name, paths[-1], plt, results.backends)
    return paths


# --- Main -----------------------------------------------------------------------------------------


def main(argv):
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    p.add_argument("inputs", nargs="+", help="results JSON files or result package folders")
    p.add_argument("--output", help="markdown file (default: stdout)")
    p.add_argument("--png", help="chart path; one PNG per sweep: STEM-<sweep>.png")
    p.add_argument(
        "--baseline", default="cuflash", help="the backend the ratios compare (default cuflash)"
    )
    p.add_argument(
        "--allow-mixed-gpus", action="store_true", help="join results of different GPUs anyway"
    )
    args = p.parse_args(argv)
    try:
        results = Results()
        files = json_files(args.inputs)
        seen = set()
        for path in files:  # one file twice would count its failures twice
            if os.path.realpath(path) in seen:
                raise ReportError(f"{path}: given twice")
            seen.add(os.path.realpath(path))
        for path in files:
            results.add(path)
        results.order_backends(args.baseline)
        if len(results.gpus) > 1 and not args.allow_mixed_gpus:
            raise ReportError(
                f"the inputs come from different GPUs ({', '.join(sorted(results.gpus))}); "
                "report them separately"
            )
        if args.baseline not in results.backends:
            raise ReportError(
                f"--baseline {args.baseline}: no such backend in the inputs "
                f"({', '.join(results.backends) or 'none'})"
            )
        if args.output and os.path.realpath(args.output) in map(os.path.realpath, files):
            raise ReportError(f"--output {args.output} is one of the inputs")
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for line in results.incomplete:
        print(f"warning: incomplete run: {line}", file=sys.stderr)
    text = markdown(results, args.baseline)
    if args.output:
        try:
            with open(args.output, "w") as f:
                f.write(text)
        except OSError as e:
            print(f"error: --output {args.output}: {e.strerror}", file=sys.stderr)
            return 2
    else:
        print(text)
    charts = write_charts(results, args.png) if args.png else []
    for sweep, by_name in results.rows.items():
        for line in summary_lines(sweep, by_name, results.backends, args.baseline):
            print(line, file=sys.stderr if not args.output else sys.stdout)
    for path in charts:
        print(f"chart: {path}", file=sys.stderr if not args.output else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
