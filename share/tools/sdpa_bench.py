#!/usr/bin/env python3
"""Times PyTorch's scaled_dot_product_attention the way `cuflash bench` times cuflash.

Same cases (the share/sweeps files, or the same shape options), same case names, same protocol
(share/docs/bench.md): --warmup untimed calls, one call timed alone to pick N, then --iters
samples of N calls replayed from a CUDA graph (launch overhead excluded; --no-graph times one
direct call per sample), kernel-only time from CUDA events, median. Forward and backward are
timed on their own; the forward that builds the backward's autograd graph runs outside the
timed region. Each available backend is timed: flash, cuDNN, efficient (memory-efficient);
math (which materialises the N x N scores) only when asked for and below --math-max-scores.
`--backends flex` adds PyTorch's FlexAttention (torch.compile'd flex_attention, not an SDPA
backend; its files are named sdpa-flex like the others'), the one baseline with cuflash's
sliding windows, softcap, ALiBi and packed variable-length batches: a block mask and a
score_mod that follow cuflash's definitions (README, "What is supported").

Output: a table on stdout; with --out-dir a result package like cuflash's: metadata.json,
sdpa-<backend>.json (Google-Benchmark-style JSON, one file per backend, so compare.py can diff
any of them against cuflash's results.json), results.md and failures.json. Like cuflash's
results.json, each sdpa-<backend>.json holds the median row of each pass (with every statistic),
one line per row; --samples adds every sample's row and the six aggregate rows, the layout that
--format json always writes.

  python3 share/tools/sdpa_bench.py --sweep seed --out-dir results/sdpa-seed
  python3 share/tools/sdpa_bench.py -s 1024,4096 -d 64,128 --dtype fp16,bf16 --mask none,causal
  python3 share/tools/sdpa_bench.py --sweep fa --list          # the case names; needs no GPU
"""
import argparse
import contextlib
import itertools
import json
import math
import os
import platform
import signal
import socket
import statistics
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
SWEEP_DIR = os.path.join(ROOT, "share", "sweeps")

TARGET_SAMPLE_MS = 1.0  # graph samples last about this long ...
MAX_CALLS_PER_SAMPLE = 100  # ... with at most this many calls (timing.h in cuflash)
BACKEND_NAMES = ("flash", "cudnn", "efficient", "math", "flex")
FP32_BACKENDS = ("efficient", "math", "flex")  # flash and cuDNN attention have no fp32 kernels
UNBOUNDED = 1 << 62  # a window side without a bound

# --- Sweeps: the same format and expansion order as app/bench/sweep.cpp ---------------------------

SWEEP_KEYS = (  # outermost first
    "dtype", "d", "mask", "b", "h", "hkv", "sq", "sk", "seqlens", "seqlens_k", "window",
    "softcap", "alibi", "layout", "splits", "page_size", "deterministic", "ranks"
)
SWEEP_DEFAULTS = {
    "dtype": "fp16",
    "d": "64",
    "mask": "none",
    "b": "1",
    "h": "8",
    "hkv": None,
    "sq": "1024",
    "sk": None,
    "window": "-1:-1",  # cuflash's sliding window, softcap and ALiBi: SDPA's fused kernels have
    "softcap": "0",  # none of them, so such cases are named as cuflash names them and skipped
    "alibi": "0",  # (FlexAttention, --backends flex, runs them)
    "layout": "bhsd",
    "splits": "0",  # cuflash's forced key splits: part of the name, no effect on SDPA
    "page_size": "0",  # cuflash's paged K/V cache: SDPA has none, so such cases are skipped
    "deterministic": "0",  # cuflash's deterministic backward: SDPA times its own default backward
    "ranks": "0",  # cuflash's context parallelism on one GPU: part of the name, SDPA runs one call
    "seqlens": "none",  # cuflash's variable-length packed batches (layout thd): skipped but by flex
    "seqlens_k": "none",
}  # hkv = h and sk = sq by default
CHOICES = {
    "dtype": ("fp16", "bf16", "fp32"),
    "mask": ("none", "causal", "causal-top-left"),
    "layout": ("bhsd", "bshd", "thd"),
    "deterministic": ("0", "1"),
    "alibi": ("0", "1"),
}


class SweepError(ValueError):
    pass


def parse_rule(line, where):
    """One sweep line -> {key: [values]}; raises SweepError naming `where` (file:line)."""
    rule = {}
    for token in line.split():
        key, eq, text = token.partition("=")
        if not eq or not key:
            raise SweepError(f"{where}: expected key=value, got '{token}'")
        if key not in SWEEP_KEYS:
            raise SweepError(
                f"{where}: unknown key '{key}' (expected one of {', '.join(SWEEP_KEYS)})"
            )
        if key in rule:
            raise SweepError(f"{where}: key '{key}' given twice")
        items = text.split(",")
        for item in items:
            check_item(key, item, where)
        rule[key] = items
    return rule


def check_item(key, item, where):
    if not item:
        raise SweepError(f"{where}: {key}: empty item")
    if key in CHOICES:
        if item not in CHOICES[key]:
            raise SweepError(
                f"{where}: {key}: unknown value '{item}' (expected {', '.join(CHOICES[key])})"
            )
    elif key in ("seqlens", "seqlens_k"):
        if item != "none" and not all(x.isdigit() and int(x) > 0 for x in item.split("+")):
            raise SweepError(f"{where}: {key}: '{item}' is not L0+L1+... of positive integers")
    elif key in ("splits", "page_size", "ranks"):
        if not item.isdigit():
            raise SweepError(f"{where}: {key}: '{item}' is not a non-negative integer")
    elif key == "window":
        bounds = item.replace(",", ":").split(":")
        if len(bounds) != 2 or not all(b.lstrip("-").isdigit() and int(b) >= -1 for b in bounds):
            raise SweepError(f"{where}: window: '{item}' is not LEFT:RIGHT, each an integer >= -1")
    elif key == "softcap":
        try:
            ok = math.isfinite(float(item)) and float(item) >= 0
        except ValueError:
            ok = False
        if not ok:
            raise SweepError(f"{where}: softcap: '{item}' is not a finite number >= 0 (0: off)")
    elif not (item.isdigit() and int(item) > 0):
        raise SweepError(f"{where}: {key}: '{item}' is not a positive integer")


def expand_rule(rule, where):
    """The product of a rule's lists in SWEEP_KEYS order, the last varying fastest."""
    if "seqlens" in rule:
        for key in ("b", "sq", "sk"):
            if key in rule:
                raise SweepError(f"{where}: seqlens gives the batch and the lengths: drop {key}")
        if rule.get("layout", ["thd"]) != ["thd"]:
            raise SweepError(f"{where}: seqlens packs the sequences in layout thd")
    cases = []
    for values in itertools.product(*(rule.get(key, [SWEEP_DEFAULTS[key]]) for key in SWEEP_KEYS)):
        c = dict(zip(SWEEP_KEYS, values))
        c["hkv"], c["sk"] = c["hkv"] or c["h"], c["sk"] or c["sq"]  # default: h and sq
        lengths = lambda text: [] if text == "none" else [int(x) for x in text.split("+")]
        c["seqlens"], c["seqlens_k"] = lengths(c["seqlens"]), lengths(c["seqlens_k"])
        if c["seqlens"]:  # the packed tensors of a varlen batch
            c["seqlens_k"] = c["seqlens_k"] or c["seqlens"]
            if len(c["seqlens_k"]) != len(c["seqlens"]):
                raise SweepError(f"{where}: seqlens_k needs one length per sequence of seqlens")
            c["b"], c["sq"], c["sk"] = 1, sum(c["seqlens"]), sum(c["seqlens_k"])
            c["layout"] = "thd"
        elif c["seqlens_k"] or c["layout"] == "thd":
            raise SweepError(f"{where}: seqlens_k and layout thd need seqlens")
        for key in ("d", "b", "h", "hkv", "sq", "sk", "splits", "page_size", "ranks"):
            c[key] = int(c[key])
        c["window"] = tuple(int(b) for b in c["window"].replace(",", ":").split(":"))
        c["softcap"] = float(c["softcap"])
        if c["h"] % c["hkv"]:
            raise SweepError(f"{where}: hkv {c['hkv']} does not divide h {c['h']}")
        cases.append(c)
    return cases


def parse_sweep(text, origin):
    cases = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0]
        if line.strip():
            where = f"{origin}:{number}"
            cases += expand_rule(parse_rule(line, where), where)
    if not cases:
        raise SweepError(f"{origin}: the file lists no cases")
    return cases


def resolve_sweep(name_or_path):
    """A value with '/' or '.' is a path; anything else a name in share/sweeps."""
    if "/" in name_or_path or "." in name_or_path:
        path = name_or_path
    else:
        path = os.path.join(SWEEP_DIR, name_or_path + ".txt")
    if not os.path.isfile(path):
        names = (
            sorted(f[:-4] for f in os.listdir(SWEEP_DIR) if f.endswith(".txt"))
            if os.path.isdir(SWEEP_DIR)
            else []
        )
        raise SweepError(
            f"--sweep {name_or_path}: no such sweep (available: {', '.join(names) or 'none'})"
        )
    return path


def case_name(c):
    """The name cuflash gives the case (app/bench/sweep.h)."""
    square = c["seqlens"] == c["seqlens_k"] if c.get("seqlens") else c["sq"] == c["sk"]
    causal = {"none": "0", "causal": "1", "causal-top-left": "1" if square else "tl"}[c["mask"]]
    name = f"{c['dtype']}/b:{c['b']}/h:{c['h']}"
    if c["hkv"] != c["h"]:
        name += f"/hkv:{c['hkv']}"
    name += f"/sq:{c['sq']}/sk:{c['sk']}/d:{c['d']}/causal:{causal}"
    left, right = c.get("window", (-1, -1))
    name += f"/win:{left}:{right}" if left >= 0 or right >= 0 else ""
    name += f"/softcap:{c['softcap']:g}" if c.get("softcap") else ""
    name += "/alibi:1" if c.get("alibi") == "1" else ""
    name += "/bshd" if c["layout"] == "bshd" else ""
    name += "/thd" if c["layout"] == "thd" else ""
    name += "/seqlens:" + "+".join(map(str, c["seqlens"])) if c.get("seqlens") else ""
    if c.get("seqlens") and c["seqlens_k"] != c["seqlens"]:
        name += "/seqlens-k:" + "+".join(map(str, c["seqlens_k"]))
    name += f"/splits:{c['splits']}" if c.get("splits") else ""
    name += f"/page:{c['page_size']}" if c.get("page_size") else ""
    name += "/cache:" + "+".join(map(str, c["cache"])) if c.get("cache") else ""
    name += "/deterministic" if c.get("deterministic") == "1" else ""
    return name + (f"/ranks:{c['ranks']}" if c.get("ranks") else "")


def select_cases(args):
    if args.sweep:
        path = resolve_sweep(args.sweep)
        with open(path) as f:
            cases = parse_sweep(f.read(), path)
    else:
        rule = {
            key: value.split(",")
            for key, value in [
                ("b", args.batch),
                ("h", args.heads),
                ("hkv", args.heads_kv),
                ("sq", args.seq),
                ("sk", args.seq_k),
                ("d", args.head_dim),
                ("dtype", args.dtype),
                ("mask", args.mask),
                ("layout", args.layout),
                ("window", ",".join(w.replace(",", ":") for w in args.window or [])),
                ("softcap", args.softcap),
                ("alibi", "1" if args.alibi else None),
            ]
            if value
        }
        for key, items in rule.items():
            for item in items:
                check_item(key, item, "command line")
        cases = expand_rule(rule, "command line")
        for c in cases:  # named like cuflash's cases, then skipped with the reason
            c["cache"] = [int(x) for x in (args.cache_seqlens or "").split(",") if x]
    if args.filter:
        import re

        total = len(cases)
        cases = [c for c in cases if re.search(args.filter, case_name(c))]
        if not cases:
            raise SweepError(f"--filter '{args.filter}' matches none of the {total} cases")
    return cases


# --- FLOPs and statistics (app/bench/stats.h) -----------------------------------------------------


def band(c, sq, sk):
    """The diagonal's offset and the window's two sides (problem.h's VisibleBand): query i sees
    key j when i + offset - left <= j <= i + offset + right; a causal mask makes right 0."""
    offset = 0 if c["mask"] == "causal-top-left" else sk - sq
    left, right = c.get("window", (-1, -1))
    left = UNBOUNDED if left < 0 else left
    right = 0 if c["mask"] != "none" else (UNBOUNDED if right < 0 else right)
    return offset, left, right


def masked(c):
    return c["mask"] != "none" or max(c.get("window", (-1, -1))) >= 0


def sequence_pairs(c, sq, sk):
    if not masked(c):
        return sq * sk
    offset, left, right = band(c, sq, sk)
    return sum(
        max(min(i + offset + right + 1, sk) - max(i + offset - left, 0), 0) for i in range(sq)
    )


def visible_pairs(c):
    """As app/bench/stats.cpp: the pairs inside the mask and window, summed over the sequences
    of a varlen batch."""
    if c.get("seqlens"):
        return sum(sequence_pairs(c, q, k) for q, k in zip(c["seqlens"], c["seqlens_k"]))
    return sequence_pairs(c, c["sq"], c["sk"])


def pass_flops(c, pass_name):
    fwd = 4.0 * c["b"] * c["h"] * c["d"] * visible_pairs(c)
    return 2.5 * fwd if pass_name == "bwd" else fwd


def pass_bytes(c, pass_name):
    """Bytes one call must move at least (app/bench/stats.cpp): Q and O, and the K and V rows
    some query sees, once forward; backward also dO, dQ and dK, dV written whole. A varlen
    batch: the sum over its sequences."""
    if c.get("seqlens"):
        return sum(
            pass_bytes(dict(c, b=1, sq=q, sk=k, seqlens=None, seqlens_k=None), pass_name)
            for q, k in zip(c["seqlens"], c["seqlens_k"])
        )
    element = 4 if c["dtype"] == "fp32" else 2
    q = c["b"] * c["h"] * c["sq"] * c["d"] * element
    offset, left, right = band(c, c["sq"], c["sk"])
    first_key = max(offset - left, 0)  # the first row's band start ...
    key_end = min(c["sq"] - 1 + offset + right + 1, c["sk"])  # ... to the last row's end
    keys = sum(c["cache"]) if c.get("cache") else c["b"] * max(key_end - first_key, 0)
    kv = keys * c["hkv"] * c["d"] * element
    if pass_name == "bwd":
        return 4 * q + 2 * kv + 2 * c["b"] * c["sk"] * c["hkv"] * c["d"] * element
    return 2 * (q + kv)


def summarize(samples):
    mean = statistics.fmean(samples)
    stddev = statistics.stdev(samples) if len(samples) > 1 else 0.0
    return dict(
        median=statistics.median(samples),
        mean=mean,
        min=min(samples),
        max=max(samples),
        stddev=stddev,
        noise=stddev / mean if mean > 0 else 0.0,
    )


def calls_per_sample(args, estimate_ms):
    if args.no_graph or args.cold:
        return 1
    if not estimate_ms > 0:
        return MAX_CALLS_PER_SAMPLE
    return int(min(max(math.ceil(TARGET_SAMPLE_MS / estimate_ms), 1), MAX_CALLS_PER_SAMPLE))


# --- Timing on the GPU ----------------------------------------------------------------------------


class Timer:
    """The protocol of app/bench/timing.h, on one side stream."""

    def __init__(self, torch, args):
        self.torch, self.args = torch, args
        self.stream = torch.cuda.Stream()
        self.flush_buffer = None
        if args.cold:  # twice the L2, written before every sample
            l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
            self.flush_buffer = torch.empty(2 * max(l2, 1 << 20), dtype=torch.uint8, device="cuda")
        self.warned = False

    def time_once(self, call):
        torch = self.torch
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(self.stream)
        call()
        stop.record(self.stream)
        stop.synchronize()
        return start.elapsed_time(stop)

    def capture(self, call, calls):
        torch = self.torch
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, stream=self.stream):
                for _ in range(calls):
                    call()
            return graph
        except Exception as e:  # a backend that cannot be captured: time direct calls instead
            if not self.warned:
                print(
                    f"warning: CUDA graph capture failed ({str(e).splitlines()[0][:120]}); "
                    "timing direct calls between events instead",
                    file=sys.stderr,
                )
                self.warned = True
            torch.cuda.synchronize()
            return None

    def time(self, call):
        """Samples (ms per call) and the timing fields of a pass; `call` runs on self.stream."""
        torch, args = self.torch, self.args
        with torch.cuda.stream(self.stream):
            for _ in range(args.warmup):
                call()
            calls = calls_per_sample(args, self.time_once(call))
            graph = None if args.no_graph else self.capture(call, calls)
            run = graph.replay if graph else (lambda: [call() for _ in range(calls)])
            run()  # untimed: uploads the graph, keeps the GPU busy while samples are enqueued
            began = time.time()  # when the samples ran, for a log of the GPU's clock
            events = [
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                for _ in range(args.iters)
            ]
            for start, stop in events:
                if self.flush_buffer is not None:
                    self.flush_buffer.zero_()
                start.record(self.stream)
                run()
                stop.record(self.stream)
            self.stream.synchronize()
            span = [began, time.time()]
        samples = [start.elapsed_time(stop) / calls for start, stop in events]
        timing = dict(
            method="graph" if graph is not None else "events",
            calls_per_sample=calls,
            cold=args.cold,
            warmup=args.warmup,
            span=span,
        )
        del graph
        return samples, timing


# --- One case on one backend ----------------------------------------------------------------------


class Unsupported(Exception):
    pass


def make_inputs(torch, c, seed, with_dout):
    """Seeded standard-normal leaves (requires_grad) and the bhsd views SDPA reads."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[c["dtype"]]
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def tensor(heads, seq, grad):
        shape = (
            (c["b"], heads, seq, c["d"]) if c["layout"] == "bhsd" else (c["b"], seq, heads, c["d"])
        )
        leaf = torch.randn(shape, device="cuda", dtype=dtype, generator=gen).requires_grad_(grad)
        return leaf, (leaf if c["layout"] == "bhsd" else leaf.transpose(1, 2))

    q, k, v = (
        tensor(c["h"], c["sq"], True),
        tensor(c["hkv"], c["sk"], True),
        tensor(c["hkv"], c["sk"], True),
    )
    dout = tensor(c["h"], c["sq"], False)[1] if with_dout else None
    return q, k, v, dout


def sdpa_call(torch, c, args, views):
    """A function running SDPA forward on the case, with the mask and GQA settings it needs."""
    F = torch.nn.functional
    kwargs = {}
    if c["mask"] == "causal-top-left" or (c["mask"] == "causal" and c["sq"] == c["sk"]):
        kwargs["is_causal"] = True
    elif c["mask"] == "causal":  # bottom-right with sq != sk: PyTorch's lower-right causal bias
        try:
            from torch.nn.attention.bias import causal_lower_right
        except ImportError:
            raise Unsupported("bottom-right causal mask with seq_q != seq_k needs torch >= 2.3")
        kwargs["attn_mask"] = causal_lower_right(c["sq"], c["sk"])
    if c["hkv"] != c["h"]:
        kwargs["enable_gqa"] = True
    if args.scale is not None:
        kwargs["scale"] = args.scale
    q, k, v = views
    return lambda: F.scaled_dot_product_attention(q, k, v, **kwargs)


def alibi_slopes(heads):
    """The ALiBi paper's slopes, as problem.h's alibi_default_slopes()."""

    def power_of_two(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    below = 1 << (heads.bit_length() - 1)
    return (power_of_two(below) + power_of_two(2 * below)[0::2])[:heads]


_compiled_flex = None


def flex_call(torch, c, args, views):
    """A function running FlexAttention forward on the case: the mask and the window as a block
    mask, softcap and ALiBi as a score_mod (softcap first, as cuflash), a varlen batch as
    documents of the packed tokens with each sequence's own diagonal."""
    global _compiled_flex
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if _compiled_flex is None:
        # A fallback of torch.compile to the eager flex_attention (which materialises the
        # scores) must fail, not be timed.
        for flag in ("fail_on_recompile_limit_hit", "fail_on_cache_limit_hit"):
            if hasattr(torch._dynamo.config, flag):
                setattr(torch._dynamo.config, flag, True)
        _compiled_flex = torch.compile(flex_attention, dynamic=False, fullgraph=True)
    # Every case's masks and score_mods are closures of their own: start each from an empty
    # cache, so that a sweep never reaches the recompile limit.
    torch._dynamo.reset()
    q, k, v = views
    device = q.device
    lengths_q = c.get("seqlens") or [c["sq"]]
    lengths_k = c.get("seqlens_k") or [c["sk"]]
    as_index = lambda values: torch.tensor(list(values), device=device, dtype=torch.int32)
    offsets = [band(c, sq, sk)[0] for sq, sk in zip(lengths_q, lengths_k)]
    _, left, right = band(c, lengths_q[0], lengths_k[0])  # the sides do not depend on lengths
    varlen = bool(c.get("seqlens"))
    # i + offset - j in a sequence's own positions is qi - ki + shift, shift = offset -
    # (first query token) + (first key token) of the query's sequence: one lookup, none when
    # every shift is the same (a dense batch, or sequences of equal query and key lengths).
    starts_q = [0] + list(itertools.accumulate(lengths_q))[:-1]
    starts_k = [0] + list(itertools.accumulate(lengths_k))[:-1]
    shifts = [o - a + b for o, a, b in zip(offsets, starts_q, starts_k)]
    if varlen:
        doc_q = torch.repeat_interleave(as_index(range(len(lengths_q))), as_index(lengths_q))
        doc_k = torch.repeat_interleave(as_index(range(len(lengths_k))), as_index(lengths_k))
        shift_q = torch.repeat_interleave(as_index(shifts), as_index(lengths_q))

    def distance(qi, ki):
        if len(set(shifts)) == 1:
            return qi - ki + shifts[0]
        return qi - ki + shift_q[qi]

    def mask_mod(b, h, qi, ki):
        visible = doc_q[qi] == doc_k[ki] if varlen else qi >= 0
        if right < UNBOUNDED:
            visible = visible & (distance(qi, ki) >= -right)
        if left < UNBOUNDED:
            visible = visible & (distance(qi, ki) <= left)
        return visible

    block_mask = None
    if masked(c) or varlen:
        block_mask = create_block_mask(mask_mod, None, None, sum(lengths_q), sum(lengths_k), device)
        torch.cuda.empty_cache()  # the dense mask it went through is not the kernel's memory
    cap = float(c.get("softcap") or 0.0)
    slopes = None
    if c.get("alibi") == "1":
        slopes = torch.tensor(alibi_slopes(c["h"]), device=device, dtype=torch.float32)

    def score_mod(score, b, h, qi, ki):
        if cap > 0:
            score = cap * torch.tanh(score / cap)
        if c.get("alibi") == "1":
            score = score - slopes[h] * torch.abs(distance(qi, ki)).to(score.dtype)
        return score

    kwargs = dict(block_mask=block_mask, enable_gqa=c["hkv"] != c["h"])
    if cap > 0 or c.get("alibi") == "1":
        kwargs["score_mod"] = score_mod
    if args.scale is not None:
        kwargs["scale"] = args.scale
    return lambda: _compiled_flex(q, k, v, **kwargs)


def check_backend_fits(c, backend, args):
    if c.get("page_size"):
        raise Unsupported(f"{backend} has no paged K/V cache (page_size {c['page_size']})")
    if c.get("cache"):
        raise Unsupported(f"{backend} has no per-sequence key lengths (--cache-seqlens)")
    if backend == "flex":
        return
    if max(c.get("window", (-1, -1))) >= 0 or c.get("softcap") or c.get("alibi") == "1":
        raise Unsupported("SDPA's fused kernels have no sliding window, softcap or ALiBi")
    if c.get("seqlens"):
        raise Unsupported("SDPA has no variable-length packed batches (seqlens)")
    if c["dtype"] == "fp32" and backend not in FP32_BACKENDS:
        raise Unsupported(f"sdpa-{backend} has no fp32 kernel")
    scores = c["b"] * c["h"] * c["sq"] * c["sk"]
    if backend == "math" and scores > args.math_max_scores:
        raise Unsupported(
            f"math materialises {scores} scores, above --math-max-scores {args.math_max_scores}"
        )


def first_call(torch, fn):
    """Runs fn once; a backend that cannot serve the case raises Unsupported with its reason."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return fn()
        except (RuntimeError, ValueError, NotImplementedError) as e:
            text = str(e).lower()
            if "no available kernel" in text or "not supported" in text or "nyi" in text:
                why = "; ".join(str(w.message).splitlines()[0] for w in caught[:2])
                raise Unsupported(f"{str(e).splitlines()[0]} {why}".strip()[:300])
            raise


def measure_memory(torch, fn):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()


def kernel_names(torch, fn):
    """The CUDA kernels one call of fn launches, in launch order, each once, as the PyTorch
    profiler names them (cuflash bench's `kernels`); None where the profiler records none."""
    try:
        from torch.profiler import ProfilerActivity, profile, supported_activities

        if ProfilerActivity.CUDA not in supported_activities():
            return None
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        names = []
        for e in sorted(kernels, key=lambda e: e.time_range.start):
            if e.name not in names:
                names.append(e.name)
        return names or None
    except Exception:  # the timings stand without the names
        return None


class BackendRun:
    """What one backend did on one case: the passes timed so far and the stage it is in."""

    def __init__(self):
        self.passes, self.stage = [], "setup"


def run_backend(torch, timer, c, backend, args, seed, result):
    """Times the passes of one case on one backend into `result` (a BackendRun)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    check_backend_fits(c, backend, args)
    kind = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
        "flex": None,  # not through SDPA: no backend to pin
    }[backend]
    call = flex_call if backend == "flex" else sdpa_call
    pinned = contextlib.nullcontext() if kind is None else sdpa_kernel([kind])
    torch.cuda.empty_cache()
    free_before = torch.cuda.mem_get_info()[0]
    q, k, v, dout = make_inputs(torch, c, seed, args.pass_ != "fwd")
    torch.cuda.synchronize()  # the inputs were made on the default stream; the timer uses its own
    leaves = (q[0], k[0], v[0])
    with pinned, torch.cuda.stream(timer.stream):
        forward = call(torch, c, args, (q[1], k[1], v[1]))
        out = first_call(torch, forward)  # on the timer's stream: autograd runs backward there too
        grad = lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True)
        if backend == "flex" and args.pass_ != "fwd":
            grad()  # compiles flex's backward before its memory is measured
        work = [("fwd", forward)] if args.pass_ != "bwd" else []
        work += [("bwd", grad)] if args.pass_ != "fwd" else []
        memory = {name: measure_memory(torch, fn) for name, fn in work}
        memgetinfo = max(0, free_before - torch.cuda.mem_get_info()[0])
        for name, fn in work:
            result.stage = name
            samples, timing = timer.time(fn)
            result.passes.append(
                dict(
                    pass_=name,
                    samples=samples,
                    timing=timing,
                    flops=pass_flops(c, name),
                    alloc_bytes=memory[name],
                    memgetinfo_bytes=memgetinfo,
                )
            )
        # After the timing, which the profiler's start-up must not touch.
        if args.kernels:
            for timed, (_, fn) in zip(result.passes, work):
                timed["kernels"] = kernel_names(torch, fn)


def classify(torch, error):
    if isinstance(error, Unsupported):
        return "unsupported"
    if isinstance(error, torch.cuda.OutOfMemoryError):
        return "out_of_memory"
    return "cuda_error" if "CUDA error" in str(error) else "error"


# --- Outputs: the schema of app/bench/formats.cpp -------------------------------------------------


def run_name(pass_name, c):
    return f"{pass_name}/{case_name(c)}"


def benchmark_rows(record, p, label, family, peak, samples=True):
    """Google Benchmark's rows of one pass: a row per sample and six aggregates, or with
    samples=False the median row alone (it carries every statistic)."""
    c, run = record["case"], run_name(p["pass_"], record["case"])
    s = summarize(p["samples"])
    base = dict(
        family_index=family,
        per_family_instance_index=0,
        run_name=run,
        repetitions=len(p["samples"]),
        threads=1,
        backend=label,
    )
    if not samples:
        rows, aggregates = [], ("median",)
    else:
        rows = [
            dict(
                name=run,
                **base,
                run_type="iteration",
                repetition_index=i,
                iterations=p["timing"]["calls_per_sample"],
                real_time=1e3 * t,
                cpu_time=1e3 * t,
                time_unit="us",
            )
            for i, t in enumerate(p["samples"])
        ]
        aggregates = ("mean", "median", "stddev", "cv", "min", "max")
    for agg in aggregates:
        value = s["noise"] if agg == "cv" else 1e3 * s[agg]  # us; cv is a fraction
        row = dict(
            name=f"{run}_{agg}",
            **base,
            run_type="aggregate",
            aggregate_name=agg,
            aggregate_unit="percentage" if agg == "cv" else "time",
            iterations=len(p["samples"]),
            real_time=value,
            cpu_time=value,
            time_unit="us",
        )
        if agg == "median":
            row.update(case_fields(c, p, s, peak))
        rows.append(row)
    return rows


def case_fields(c, p, s, peak):
    """Our fields on the median row, as cuflash writes them (share/docs/bench.md)."""
    tflops = p["flops"] / (s["median"] * 1e-3) / 1e12
    moved = pass_bytes(c, p["pass_"])
    gbps = moved / (s["median"] * 1e-3) / 1e9
    return {
        "pass": p["pass_"],
        "dtype": c["dtype"],
        "batch": c["b"],
        "heads": c["h"],
        "heads_kv": c["hkv"],
        "seq_q": c["sq"],
        "seq_k": c["sk"],
        "head_dim": c["d"],
        "mask": c["mask"],
        "window": list(c["window"]) if max(c.get("window", (-1, -1))) >= 0 else None,
        "softcap": c.get("softcap") or 0,
        "alibi": c.get("alibi") == "1",
        "layout": c["layout"],
        "deterministic": False,  # SDPA times its own default backward
        "flops": p["flops"],
        "tflops": tflops,
        "pct_of_peak": 100 * tflops / peak[c["dtype"]] if c["dtype"] in peak else None,
        "bytes": moved,
        "gbps": gbps,
        "pct_of_peak_gbps": 100 * gbps / peak["gbps"] if "gbps" in peak else None,
        "noise": s["noise"],
        "median_ms": s["median"],
        "mean_ms": s["mean"],
        "stddev_ms": s["stddev"],
        "min_ms": s["min"],
        "max_ms": s["max"],
        "rounds": 1,  # every sample of a case in one visit (cuflash bench --rounds 1)
        "round_spread": 0.0,
        "sample_spans": [p["timing"]["span"]],  # [[begin, end]] in Unix seconds, as cuflash's
        "alloc_bytes": p["alloc_bytes"],
        "workspace_bytes": None,
        "memgetinfo_bytes": p["memgetinfo_bytes"],
        "calls_per_sample": p["timing"]["calls_per_sample"],
        "warmup": p["timing"]["warmup"],
        "timing": p["timing"]["method"],
        "cold": p["timing"]["cold"],
        "verify": "off",
        "kernels": p.get("kernels"),
    }


def failure_entries(records, backend):
    return [
        dict(name=case_name(r["case"]), backend=f"sdpa-{backend}", **r["failures"][backend])
        for r in records
        if backend in r["failures"]
    ]


def benchmark_doc(records, backends, metadata, peak, samples=True):
    """Google-Benchmark-style JSON of the given backends (one backend per file in a package);
    samples=False keeps the median row of each pass alone."""
    rows, failures, family = [], [], 0
    for backend in backends:
        for r in records:
            for p in r["passes"].get(backend, []):
                rows += benchmark_rows(r, p, f"sdpa-{backend}", family, peak, samples)
                family += 1
        failures += failure_entries(records, backend)
    context = dict(
        date=metadata["started_utc"],
        host_name=metadata["host_name"],
        executable=metadata["executable"],
        num_cpus=metadata["num_cpus"],
        library_build_type="release",
        json_schema_version=1,
        sdpa_bench=metadata,
    )
    return dict(context=context, benchmarks=rows, failures=failures)


TABLE_HEADER = tuple(
    "backend pass case median_ms min_ms max_ms noise TFLOP/s alloc_MiB timing status".split()
)


def pass_row(backend, c, p):
    s, t = summarize(p["samples"]), p["timing"]
    tflops = p["flops"] / (s["median"] * 1e-3) / 1e12
    timing = f"{t['method']} x{t['calls_per_sample']}" + (" cold" if t["cold"] else "")
    numbers = (s["median"], s["min"], s["max"])
    return (
        (f"sdpa-{backend}", p["pass_"], case_name(c))
        + tuple(f"{x:.4g}" for x in numbers)
        + (
            f"{100 * s['noise']:.1f}%",
            f"{tflops:.1f}",
            f"{p['alloc_bytes'] / 2**20:.1f}",
            timing,
            "ok",
        )
    )


def failure_row(backend, c, f):
    status = "n/a" if f["kind"] == "unsupported" else f"FAILED {f['pass']} ({f['kind']})"
    return (f"sdpa-{backend}", f["pass"], case_name(c)) + ("-",) * 7 + (f"{status}: {f['reason']}",)


def table_rows(records, backends):
    rows = [TABLE_HEADER]
    for r in records:
        for backend in backends:
            rows += [pass_row(backend, r["case"], p) for p in r["passes"].get(backend, [])]
            if backend in r["failures"]:
                rows.append(failure_row(backend, r["case"], r["failures"][backend]))
    return rows


def format_table(rows):
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return "".join(
        "  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip() + "\n"
        for row in rows
    )


def format_markdown(rows):
    line = lambda cells: "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |\n"
    return line(rows[0]) + line(["---"] * len(rows[0])) + "".join(line(r) for r in rows[1:])


def write_atomically(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def json_lines(doc):
    """`doc` with each top-level member on a line and an array member one element a line, as
    cuflash writes results.json (json_lines_text in app/bench/formats.h)."""
    compact = lambda value: json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    members = []
    for key, value in doc.items():
        if isinstance(value, list) and value:
            text = "[\n" + ",\n".join(compact(item) for item in value) + "\n]"
        else:
            text = compact(value)
        members.append(f"{compact(key)}:{text}")
    return "{\n" + ",\n".join(members) + "\n}\n"


def write_package(out_dir, records, backends, metadata, peak, samples=False):
    """Each file through a temporary and a rename; metadata.json last (as cuflash's package.h).
    sdpa-<backend>.json: the median rows, or with `samples` every sample's row too."""
    for backend in backends:
        doc = benchmark_doc(records, [backend], metadata, peak, samples)
        write_atomically(os.path.join(out_dir, f"sdpa-{backend}.json"), json_lines(doc))
    failures = [f for b in backends for f in failure_entries(records, b)]
    write_atomically(os.path.join(out_dir, "failures.json"), json.dumps(failures, indent=2) + "\n")
    torch_info = metadata["torch"]
    header = (
        f"# PyTorch SDPA: {metadata['protocol']['sweep']}\n\n"
        f"- GPU: {metadata['device'].get('name')} ({metadata['device'].get('uuid')})\n"
        f"- torch {torch_info['version']}, CUDA {torch_info['cuda']}, "
        f"cuDNN {torch_info['cudnn']}\n- command: `{' '.join(metadata['command_line'])}`\n"
        f"- started {metadata['started_utc']}, status {metadata['status']}\n\n"
    )
    write_atomically(
        os.path.join(out_dir, "results.md"), header + format_markdown(table_rows(records, backends))
    )
    write_atomically(os.path.join(out_dir, "metadata.json"), json.dumps(metadata, indent=2) + "\n")


# --- Metadata -------------------------------------------------------------------------------------


def utc_now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def device_metadata(torch):
    p = torch.cuda.get_device_properties(0)
    uuid = getattr(p, "uuid", None)
    return dict(
        index=0,
        name=p.name,
        uuid=f"GPU-{uuid}" if uuid is not None else None,
        compute_capability=f"{p.major}.{p.minor}",
        sm_count=p.multi_processor_count,
        memory_bytes=p.total_memory,
        l2_cache_bytes=getattr(p, "L2_cache_size", None),
    )


def run_metadata(torch, args, cases, backends):
    return {
        "schema": "cuflash-sdpa-package/1",
        "status": "running",
        "started_utc": utc_now(),
        "finished_utc": None,
        "host_name": socket.gethostname(),
        "num_cpus": os.cpu_count(),
        "executable": sys.executable,
        "working_directory": os.getcwd(),
        "command_line": [sys.executable] + sys.argv,
        "python": platform.python_version(),
        "torch": dict(
            version=torch.__version__,
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32,
            cudnn_allow_tf32=torch.backends.cudnn.allow_tf32,
        ),
        "device": device_metadata(torch),
        "protocol": dict(
            backends=[f"sdpa-{b}" for b in backends],
            sweep=args.sweep or "command line",
            filter=args.filter,
            **{"pass": args.pass_},
            warmup=args.warmup,
            iters=args.iters,
            graph=not args.no_graph,
            cold=args.cold,
            target_sample_ms=TARGET_SAMPLE_MS,
            max_calls_per_sample=MAX_CALLS_PER_SAMPLE,
            seed=args.seed,
            math_max_scores=args.math_max_scores,
            samples=args.samples,
            cases=[case_name(c) for c in cases],
        ),
        "cases": dict(total=len(cases), finished=0, failed=0, not_run=len(cases)),
    }


# --- Main -----------------------------------------------------------------------------------------


class Interrupt:
    """First Ctrl-C: stop after the current case; the second one ends the process."""

    requested = False

    @classmethod
    def install(cls):
        def handler(signum, frame):
            cls.requested = True
            print(
                "\ninterrupted: stopping after the current case (Ctrl-C again to quit at once)",
                file=sys.stderr,
            )
            signal.signal(signal.SIGINT, signal.default_int_handler)

        signal.signal(signal.SIGINT, handler)


def run_case(torch, timer, c, index, backends, args):
    """{case, passes: {backend: [pass]}, failures: {backend: failure}} for one case."""
    record = dict(case=c, passes={}, failures={})
    for backend in backends:
        result = BackendRun()
        try:
            run_backend(torch, timer, c, backend, args, args.seed + index, result)
        except Exception as e:  # recorded; the sweep goes on
            record["failures"][backend] = {
                "pass": result.stage,
                "kind": classify(torch, e),
                "reason": str(e).splitlines()[0][:300] if str(e) else type(e).__name__,
            }
            if record["failures"][backend]["kind"] != "unsupported":
                print(
                    f"warning: {case_name(c)} sdpa-{backend}: "
                    f"{record['failures'][backend]['reason']}",
                    file=sys.stderr,
                )
        record["passes"][backend] = result.passes
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception:  # a sticky CUDA error: the next cases will say so
            pass
    return record


def progress(i, total, start, label):
    if not sys.stderr.isatty():
        return
    elapsed = time.time() - start
    eta = f", ETA {elapsed / i * (total - i):.0f} s" if i else ""
    print(
        f"\r\033[K[{i + 1}/{total}] {elapsed:.0f} s elapsed{eta}  {label}",
        end="",
        file=sys.stderr,
        flush=True,
    )


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    p.add_argument(
        "--sweep",
        help="a sweep of share/sweeps (its name without .txt, as cuflash bench --sweep) or a "
        "sweep file path",
    )
    p.add_argument("--filter", help="only cases whose name matches this regular expression")
    p.add_argument(
        "--list",
        action="store_true",
        help='print the case names and exit (with --format json, one {"case": NAME} a line)',
    )
    p.add_argument("-b", "--batch")
    p.add_argument("--heads")
    p.add_argument("--heads-kv")
    p.add_argument("-s", "--seq")
    p.add_argument("--seq-k")
    p.add_argument("-d", "--head-dim")
    p.add_argument("--dtype")
    p.add_argument(
        "--mask", help="none, causal (bottom-right), causal-top-left (PyTorch is_causal)"
    )
    p.add_argument("--causal", action="store_true", help="shorthand for --mask causal")
    p.add_argument(
        "--window",
        action="append",
        help="LEFT,RIGHT (-1: unbounded); repeat for several, as cuflash bench takes them",
    )
    p.add_argument("--softcap", help="comma list of softcaps (0: off)")
    p.add_argument("--alibi", action="store_true", help="ALiBi bias with the paper's slopes")
    p.add_argument("--layout")
    p.add_argument(
        "--cache-seqlens", help="per-sequence key lengths: named as cuflash does, then skipped"
    )
    p.add_argument("--scale", type=float)
    p.add_argument(
        "--backends",
        default="flash,cudnn,efficient",
        help="comma list of flash, cudnn, efficient, math, flex (math and flex are opt-in; flex: "
        "FlexAttention, the baseline for windows, softcap, ALiBi and varlen batches)",
    )
    p.add_argument(
        "--math-max-scores",
        type=int,
        default=1 << 27,
        help="math backend only when B*H*Sq*Sk is at most this (default 2^27)",
    )
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--pass", dest="pass_", default="all", choices=["fwd", "bwd", "all"])
    p.add_argument("--no-graph", action="store_true", help="time one direct call per sample")
    p.add_argument("--cold", action="store_true", help="flush L2 before every sample")
    p.add_argument(
        "--kernels",
        action="store_true",
        help="name each pass's CUDA kernels (its `kernels`) by profiling one more call after its "
        "samples; off by default: the profiler's hooks may stay in the process and weigh on "
        "the launches timed after them",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peak-tflops", help="a number, or fp16=989,bf16=989,fp32=67")
    p.add_argument("--peak-gbps", type=float, help="peak memory bandwidth, GB/s (e.g. 4800)")
    p.add_argument("--out-dir", help="write a result package into this new folder")
    p.add_argument(
        "--samples",
        action="store_true",
        help="with --out-dir: sdpa-<backend>.json also holds every sample (a row per sample and "
        "six aggregate rows per pass, as --format json writes them); by default the median row "
        "of each pass, which carries every statistic",
    )
    p.add_argument(
        "--format",
        default="table",
        choices=["table", "markdown", "json"],
        help="stdout: a table, markdown, or one JSON document with every backend",
    )
    # "--window -1,-1" as cuflash takes it (argparse reads a value that starts with "-" as an
    # option): joined into "--window=-1,-1".
    joined, rest = [], list(sys.argv[1:] if argv is None else argv)
    while rest:
        word = rest.pop(0)
        if word == "--window" and rest and rest[0][:2].lstrip("-")[:1].isdigit():
            word = f"--window={rest.pop(0)}"
        joined.append(word)
    args = p.parse_args(joined)
    if args.causal:
        if args.mask not in (None, "causal"):
            p.error(f"--causal and --mask {args.mask} contradict each other")
        args.mask = "causal"
    if args.sweep and any(
        [
            args.batch,
            args.heads,
            args.heads_kv,
            args.seq,
            args.seq_k,
            args.head_dim,
            args.dtype,
            args.mask,
            args.layout,
            args.cache_seqlens,
            args.window,
            args.softcap,
            args.alibi,
        ]
    ):
        p.error("--sweep replaces the shape options")
    if args.samples and not args.out_dir:
        p.error("--samples needs --out-dir")
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")
    return args


def parse_peak(text):
    if not text:
        return {}
    if "=" not in text:
        return {d: float(text) for d in ("fp16", "bf16", "fp32")}
    return {k: float(v) for k, v in (item.split("=") for item in text.split(","))}


def main(argv):
    args = parse_args(argv)
    try:
        cases = select_cases(args)
    except SweepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.list:  # as `cuflash bench --list`: names, or one {"case": NAME} object a line
        if args.format == "json":
            print("\n".join(json.dumps({"case": case_name(c)}) for c in cases))
        else:
            print("\n".join(case_name(c) for c in cases))
        return 0
    backends = [b for b in args.backends.split(",") if b]
    unknown = [b for b in backends if b not in BACKEND_NAMES]
    if unknown:
        print(
            f"error: --backends: unknown {', '.join(unknown)} "
            f"(expected {', '.join(BACKEND_NAMES)})",
            file=sys.stderr,
        )
        return 2
    if args.out_dir:  # a new folder, or one without any file a package has: none is replaced
        taken = [
            n
            for n in (os.listdir(args.out_dir) if os.path.isdir(args.out_dir) else [])
            if n in ("metadata.json", "failures.json", "results.md")
            or (n.startswith("sdpa-") and n.endswith(".json"))
        ]
        if os.path.exists(args.out_dir) and not os.path.isdir(args.out_dir):
            print(f"error: --out-dir {args.out_dir}: not a folder", file=sys.stderr)
            return 2
        if taken:
            print(
                f"error: --out-dir {args.out_dir}: already holds {', '.join(sorted(taken))} "
                "(a result package is never overwritten)",
                file=sys.stderr,
            )
            return 2
    try:
        import torch  # only now: --list and --help work without PyTorch
    except ImportError as e:
        print(f"error: sdpa_bench.py needs PyTorch ({e})", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("error: sdpa_bench.py needs a CUDA GPU; none was found", file=sys.stderr)
        return 3
    return run(torch, args, cases, backends)


def run(torch, args, cases, backends):
    peak = parse_peak(args.peak_tflops)  # per dtype, and "gbps" for the bandwidth
    if args.peak_gbps:
        peak["gbps"] = args.peak_gbps
    metadata = run_metadata(torch, args, cases, backends)
    if args.out_dir:
        os.makedirs(args.out_dir, exist_ok=True)
    timer, records, start = Timer(torch, args), [], time.time()
    Interrupt.install()
    for i, c in enumerate(cases):
        progress(i, len(cases), start, case_name(c))
        records.append(run_case(torch, timer, c, i, backends, args))
        failed = sum(
            1 for r in records for f in r["failures"].values() if f["kind"] != "unsupported"
        )
        metadata["cases"] = dict(
            total=len(cases),
            finished=len(records),
            failed=failed,
            not_run=len(cases) - len(records),
        )
        if args.out_dir:
            write_package(args.out_dir, records, backends, metadata, peak, args.samples)
        if Interrupt.requested:
            break
    if sys.stderr.isatty():
        print("\r\033[K", end="", file=sys.stderr)
    metadata["status"] = "interrupted" if Interrupt.requested else "complete"
    metadata["finished_utc"] = utc_now()
    if args.out_dir:
        write_package(args.out_dir, records, backends, metadata, peak, args.samples)
    emit(args.format, records, backends, metadata, peak)
    if Interrupt.requested:
        return 130
    return 3 if metadata["cases"]["failed"] else 0


def emit(fmt, records, backends, metadata, peak):
    if fmt == "json":
        print(json.dumps(benchmark_doc(records, backends, metadata, peak), indent=2))
    else:
        rows = table_rows(records, backends)
        print(format_table(rows) if fmt == "table" else format_markdown(rows), end="")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
