// CPU reference attention in float64, the ground truth every GPU result is checked against.
//
// The problem is cuflash::Problem (problem.h): its shape, mask, window, scale, softcap and ALiBi
// slopes; the reference ignores
// its dtype and layout, since it works on float64 values in [batch, heads, seq, head_dim] order.
// Tensors are dense row-major double arrays: Q, O, dO, dQ are [batch, heads, seq_q, head_dim];
// K, V, dK, dV are [batch, heads_kv, seq_k, head_dim]; LSE is [batch, heads, seq_q].
//
// Semantics (the same as the GPU kernels):
//   S = scale * Q K^T; with a softcap C, S = C tanh(S / C); with ALiBi, S -= slope[h] |i + off - j|
//   (off = diagonal_offset(), types.h); masked as described for cuflash::Mask (types.h) and
//   cuflash::Window (problem.h); P = softmax(S) per row, O = P V, LSE = log(sum_j exp(S_ij)) in
//   natural log. The backward differentiates through the softcap (factor 1 - tanh^2).
//   Grouped-query attention: query head h reads key/value head h / (heads / heads_kv); dK and dV
//   of a key/value head are the sums over the query heads of its group.
//   A row that sees no key (causal_bottom_right with seq_q > seq_k, or a window) has O = 0 and
//   LSE = +inf: +inf makes the backward's recomputation exp(S - LSE) give exactly zero
//   probabilities, so such a row gets dQ = 0 and adds nothing to dK and dV. Nothing in it is
//   ever NaN.
//   Per-sequence key lengths (Problem::cache_seqlens, forward only): batch entry b sees only its
//   keys [0, cache_seqlens[b]), and the causal masks align to that length as if it were seq_k.
//   NaN or Inf in the inputs are not sanitized: they reach exactly the outputs that depend on them
//   (a masked key never affects a row that cannot see it).
//
// Every dot product and sum is accumulated in float64. Memory stays bounded: scores are formed
// per (batch, head) and per block of queries (or of keys, for dK and dV), never for the whole
// B*H*Sq*Sk at once. Work is spread over the cores with OpenMP.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <vector>

#include "cuflash/problem.h"

namespace cuflash::reference {

struct ForwardResult {
  std::vector<double> out;  // [B, H, Sq, D]
  std::vector<double> lse;  // [B, H, Sq]; +inf for a row that sees no key
};

struct Gradients {
  std::vector<double> dq;  // [B, H, Sq, D]
  std::vector<double> dk;  // [B, Hkv, Sk, D]
  std::vector<double> dv;  // [B, Hkv, Sk, D]
};

// Throws std::invalid_argument (naming the field) for non-positive sizes, heads % heads_kv != 0,
// a non-finite scale, window bounds below -1, a negative or non-finite softcap, ALiBi slopes
// that are not [heads] or [batch, heads] or not finite, cache_seqlens of the wrong count or
// outside [1, seq_k] (and for backward() with any), or element counts that overflow int64;
// forward() and backward() also for input vectors of the wrong length.
void validate(const Problem& p);

// Progress of a long forward() or backward(): called with done = 0 before the work starts and
// after each block of work (one block of query rows of one (batch, head), or one block of keys
// of one (batch, kv head)) with the blocks finished so far and the total. It is called from the
// worker threads, possibly at the same time, so it must be thread-safe, cheap and must not
// throw. Returning false asks the computation to stop: the blocks not yet started are skipped
// and the function throws Cancelled. The results do not depend on whether a callback is given.
using ProgressCallback = std::function<bool(int64_t done, int64_t total)>;

class Cancelled : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bytes forward() (and, with `backward`, backward()) allocate besides their inputs and results,
// at most: the score tiles of every worker thread (a few rows x seq_k scores each). An estimate
// for a memory check before a large computation; Eigen's small GEMM buffers are left out.
int64_t scratch_bytes(const Problem& p, bool backward);

ForwardResult forward(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
                      const std::vector<double>& v, const ProgressCallback& progress = {});

// The forward of one block of a larger problem, whose queries and keys are contiguous ranges
// of the whole problem's (a chunk of context-parallel attention). `block` gives the block's own
// sizes (seq_q, seq_k: the ranges' lengths) and the whole problem's mask, window, scale, softcap
// and ALiBi slopes; `diagonal_offset` replaces diagonal_offset(mask, seq_q, seq_k) (types.h):
// the whole problem's offset plus the first query's position minus the first key's, so that the
// causal diagonal, the window and ALiBi's distances are those of the global positions. Rows that
// see no key of the block get O = 0 and LSE = +inf, as in forward(). Throws like forward(), and
// std::invalid_argument for a varlen batch or cache_seqlens (a block is one dense problem).
ForwardResult forward_block(const Problem& block, int64_t diagonal_offset,
                            const std::vector<double>& q, const std::vector<double>& k,
                            const std::vector<double>& v);

// Recomputes the probabilities from Q, K and the forward's LSE; `fwd.out` is used for the row
// sums D_i = dot(dO_i, O_i). Throws std::invalid_argument like forward(), also for `fwd` or
// `dout` of the wrong length.
Gradients backward(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
                   const std::vector<double>& v, const ForwardResult& fwd,
                   const std::vector<double>& dout, const ProgressCallback& progress = {});

}  // namespace cuflash::reference
