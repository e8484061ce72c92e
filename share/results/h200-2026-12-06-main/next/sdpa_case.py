#!/usr/bin/env python3
"""One call of PyTorch SDPA's cuDNN backend on random bhsd tensors, for a profiler to catch.

    sdpa_case.py fwd|bwd BATCH HEADS SEQ HEAD_DIM none|causal [fp16|bf16]
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def main():
    pass_, b, h, s, d, mask = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6]
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[sys.argv[7] if len(sys.argv) > 7
                                                            else "fp16"]
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype, requires_grad=pass_ == "bwd")
               for _ in range(3))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=mask == "causal")
        if pass_ == "bwd":
            out.backward(torch.randn_like(out))
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
