// CPU reference attention in float64, the ground truth every GPU result is checked against.
//
// Tensors are dense row-major double arrays: Q, O, dO, dQ are [batch, heads, seq_q, head_dim];
// K, V, dK, dV are [batch, heads_kv, seq_k, head_dim]; LSE is [batch, heads, seq_q].
// Memory stays bounded: scores are formed per (batch, head) and per block of queries, never for
// the whole B*H*Sq*Sk at once.
#pragma once

#include <cstdint>
#include <vector>

#include "cuflash/types.h"

namespace cuflash::reference {

struct Problem {
  int64_t batch = 1;
  int64_t heads = 1;
  int64_t heads_kv = 1;  // divides heads
  int64_t seq_q = 1;
  int64_t seq_k = 1;
  int64_t head_dim = 1;
  Mask mask = Mask::none;
  double scale = 0.0;  // 0 means 1/sqrt(head_dim)

  double effective_scale() const;
  int64_t q_elements() const { return batch * heads * seq_q * head_dim; }
  int64_t kv_elements() const { return batch * heads_kv * seq_k * head_dim; }
  int64_t lse_elements() const { return batch * heads * seq_q; }
};

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
// or input vectors of the wrong length.
ForwardResult forward(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
                      const std::vector<double>& v);

// Recomputes the probabilities from Q, K and the forward's LSE; `out` is used for the row sums
// D_i = dot(dO_i, O_i).
Gradients backward(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
                   const std::vector<double>& v, const ForwardResult& fwd,
                   const std::vector<double>& dout);

}  // namespace cuflash::reference
