# One SDPA (cuDNN backend) forward + backward per shape, twice; ncu times the kernels.
import sys, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
b, h, s, d, causal = (int(x) for x in sys.argv[1:6])
q, k, v = [torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]
g = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(2):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        o.backward(g)
torch.cuda.synchronize()
