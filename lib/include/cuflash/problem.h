// One attention problem: sizes, element type, mask, scale and tensor layout. The one description
// that the GPU API, the CPU reference, the CLI and the tests share. No CUDA headers: the
// reference and the .npy tools build without a CUDA toolkit.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuflash/types.h"

namespace cuflash {

// Sizes of one attention problem. Q, O, dO, dQ are [batch, heads, seq_q, head_dim]; K, V, dK,
// dV are [batch, heads_kv, seq_k, head_dim] (grouped-query attention: heads % heads_kv == 0;
// query head h reads key/value head h / (heads / heads_kv)); LSE is [batch, heads, seq_q].
struct AttentionShape {
  int64_t batch = 1;
  int64_t heads = 1;     // query heads
  int64_t heads_kv = 1;  // key/value heads; divides `heads`
  int64_t seq_q = 1;
  int64_t seq_k = 1;
  int64_t head_dim = 64;

  int64_t q_elements() const { return batch * heads * seq_q * head_dim; }    // Q, O, dO, dQ
  int64_t kv_elements() const { return batch * heads_kv * seq_k * head_dim; }  // K, V, dK, dV
  int64_t lse_elements() const { return batch * heads * seq_q; }
};

// Order of the dimensions of a densely packed tensor in memory.
enum class Layout {
  bhsd,  // [batch, heads, seq, head_dim]
  bshd,  // [batch, seq, heads, head_dim]
};

constexpr std::string_view to_string(Layout layout) {
  return layout == Layout::bhsd ? "bhsd" : "bshd";
}

struct Problem {
  AttentionShape shape;
  DType dtype = DType::fp16;
  Mask mask = Mask::none;
  double scale = 0.0;  // softmax scale; 0 means 1/sqrt(head_dim)
  Layout layout = Layout::bhsd;
  int64_t splits = 0;  // the GPU forward's key splits (ForwardArgs::splits; 0: automatic)
  // Forward only. Keys per page of a paged K/V cache on the GPU (ForwardArgs::paged; the host
  // runner stores K and V into pages in a shuffled order); 0: contiguous K/V.
  int64_t page_size = 0;
  // Keys of each batch entry, each in [1, seq_k] (ForwardArgs::cache_seqlens): keys past an
  // entry's length do not exist for it and its causal mask aligns to it. Empty: seq_k for all.
  std::vector<int64_t> cache_seqlens;
  bool deterministic = false;  // fixed-order dQ sums in the GPU backward (BackwardArgs)

  double effective_scale() const {
    return scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(shape.head_dim)) : scale;
  }
};

}  // namespace cuflash
