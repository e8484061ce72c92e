#!/usr/bin/env python3
"""Times PyTorch's scaled_dot_product_attention the way `cuflash bench` times cuflash.

Same protocol: kernel-only time with CUDA events, --warmup untimed runs, then --iters samples,
median; forward alone, and backward alone (the forward that produces its graph runs outside the
timed region). Prints one JSON object a line with the keys of `cuflash bench --format json`, plus
"backend".

  python3 examples/sdpa_bench.py -b 1 --heads 8 -s 4096 -d 64 --dtype fp16 --backends flash,cudnn
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def int_list(text):
    return [int(x) for x in text.split(",")]


def time_ms(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(iters):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop))
    return samples


def summary(samples):
    mean = statistics.fmean(samples)
    noise = statistics.stdev(samples) / mean if len(samples) > 1 else 0.0
    return dict(median_ms=statistics.median(samples), min_ms=min(samples), max_ms=max(samples),
                noise=noise)


def forward_flops(b, h, s, d, causal):
    pairs = s * (s + 1) / 2 if causal else s * s  # square case: causal sees the lower triangle
    return 4.0 * b * h * pairs * d


def bench_case(args, backend, b, h, s, d, dtype, causal):
    name = f"{dtype}/b:{b}/h:{h}/hkv:{h}/sq:{s}/sk:{s}/d:{d}/mask:{'causal' if causal else 'none'}/bhsd"
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    make = lambda: torch.randn(b, h, s, d, device="cuda", dtype=DTYPES[dtype], generator=gen)
    q, k, v = (make().requires_grad_() for _ in range(3))
    dout = make()
    rows = []
    with sdpa_kernel([BACKENDS[backend]]):
        fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        flops = forward_flops(b, h, s, d, causal)
        for pass_name, work, scale in (("fwd", fwd, 1.0), ("bwd", None, 2.5)):
            if args.pass_ not in ("all", pass_name):
                continue
            if pass_name == "bwd":
                out = fwd()
                work = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
            stats = summary(time_ms(work, args.warmup, args.iters))
            rows.append(dict(pass_=pass_name, case=name, **stats,
                             tflops=scale * flops / (stats["median_ms"] * 1e-3) / 1e12,
                             backend=f"sdpa-{backend}"))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-b", "--batch", type=int_list, default=[1])
    p.add_argument("--heads", type=int_list, default=[8])
    p.add_argument("-s", "--seq", type=int_list, default=[1024])
    p.add_argument("-d", "--head-dim", type=int_list, default=[64])
    p.add_argument("--dtype", default="fp16")
    p.add_argument("--mask", default="none", help="none,causal (causal: PyTorch is_causal)")
    p.add_argument("--backends", default="flash,cudnn,efficient")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--pass", dest="pass_", default="all", choices=["fwd", "bwd", "all"])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    for dtype in args.dtype.split(","):
        for mask in args.mask.split(","):
            for d in args.head_dim:
                for b in args.batch:
                    for h in args.heads:
                        for s in args.seq:
                            for backend in args.backends.split(","):
                                try:
                                    rows = bench_case(args, backend, b, h, s, d, dtype,
                                                      mask == "causal")
                                except RuntimeError as e:
                                    rows = [dict(case=f"{dtype}/b:{b}/h:{h}/s:{s}/d:{d}",
                                                 backend=f"sdpa-{backend}",
                                                 error=str(e).splitlines()[0][:200])]
                                for r in rows:
                                    if "pass_" in r:
                                        r["pass"] = r.pop("pass_")
                                    print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
