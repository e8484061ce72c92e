// "Plain attention computed in the same low precision": the yardstick of the pass rule in
// compare.h. A fused kernel may be at most about twice as far from the float64 reference as a
// straightforward, non-fused implementation in the same dtype would be.
//
// What is emulated (the way a framework's unfused attention runs on a GPU: one GEMM or
// element-wise step after another, each result written to memory in the tensor dtype):
//   - inputs: rounded to the problem's dtype (a no-op when the caller already rounded them, as
//     it should, so that the reference sees the same values);
//   - every GEMM accumulates in float32, applies its scalar factor (the softmax scale) in float32
//     and rounds its result to the dtype;
//   - the softmax runs in float32 on the rounded scores and its result P is rounded to the dtype;
//     LSE = max + log(sum) stays float32 (as the GPU's LSE does);
// Forward:   S = rd(scale * Q K^T),  P = rd(softmax(S)),  O = rd(P V)
// Backward:  P = rd(exp(S - LSE)) (a non-fused backward would reload the stored P: the same
//            values up to one float32 rounding before the rd),
//            dV = rd(P^T dO),  dP = rd(dO V^T),  D = rd(rowsum(dO * O)),
//            dS = rd(P * (dP - D)),  dQ = rd(scale * dS K),  dK = rd(scale * dS^T Q)
// where rd() rounds each element to the dtype (nothing for fp32). With grouped-query attention
// the dK/dV contributions of the query heads of a group are summed in float32 and rounded once.
//
// Masks, grouped-query attention, empty rows (O = 0, LSE = +inf, zero gradients) and the result
// structs are those of the float64 reference (attention_ref.h), as are the bounded memory use
// (tiles per batch, head and block of rows or keys) and the OpenMP parallelism. The results are
// returned as double holding the low-precision values exactly.
#pragma once

#include <vector>

#include "cuflash/reference/attention_ref.h"
#include "cuflash/types.h"

namespace cuflash::reference::baseline {

// The problem's dtype is the precision emulated; its layout is ignored (float64 values in
// [batch, heads, seq, head_dim] order, as for the reference). Throws std::invalid_argument like
// reference::forward().
ForwardResult forward(const Problem& p, const std::vector<double>& q,
                      const std::vector<double>& k, const std::vector<double>& v);

// `fwd` should be this baseline's own forward result (a non-fused implementation backpropagates
// through its own O and softmax statistics). Throws like reference::backward().
Gradients backward(const Problem& p, const std::vector<double>& q,
                   const std::vector<double>& k, const std::vector<double>& v,
                   const ForwardResult& fwd, const std::vector<double>& dout);

}  // namespace cuflash::reference::baseline
