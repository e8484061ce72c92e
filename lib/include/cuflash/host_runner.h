// Convenience layer over attention.h for host data: uploads inputs, poisons the outputs (so an
// element a kernel forgot to write shows up as NaN), runs the kernels, downloads the results and
// frees everything. Used by the CLI, the GPU tests and the examples; not for hot paths.
#pragma once

#include <cstdint>
#include <vector>

#include "cuflash/attention.h"

namespace cuflash {

// Host tensors hold raw elements of the problem's dtype (2 or 4 bytes each) densely packed in
// its layout: bhsd = [batch, heads, seq, head_dim], bshd = [batch, seq, heads, head_dim]. The
// kernels take the problem's scale as float (0 means 1/sqrt(head_dim)).
using HostBytes = std::vector<unsigned char>;

struct HostForwardResult {
  HostBytes out;           // like q
  std::vector<float> lse;  // [batch, heads, seq_q]
};

struct HostBackwardResult {
  HostBytes dq, dk, dv;  // like q, k, v
};

// Throws cuflash::Error (invalid_argument when a buffer's size does not match the problem).
HostForwardResult run_forward(const Problem& problem, const HostBytes& q, const HostBytes& k,
                              const HostBytes& v);

// Runs forward (for O and LSE) and then backward.
struct HostForwardBackwardResult {
  HostForwardResult forward;
  HostBackwardResult backward;
};
HostForwardBackwardResult run_forward_backward(const Problem& problem, const HostBytes& q,
                                               const HostBytes& k, const HostBytes& v,
                                               const HostBytes& dout);

}  // namespace cuflash
