// Vocabulary shared by the kernels, the CPU reference, the .npy reader and the CLI.
#pragma once

#include <cstdint>
#include <string_view>

namespace cuflash {

// Element type of Q, K, V, O, dO, dQ, dK, dV. LSE is always fp32 on the GPU.
enum class DType { fp16, bf16, fp32 };

// Which keys a query may attend to.
//   none:                every key.
//   causal_bottom_right: query i sees key j when j <= i + (seq_k - seq_q)   (FlashAttention)
//   causal_top_left:     query i sees key j when j <= i                      (PyTorch is_causal)
// Both causal forms are the usual lower triangle when seq_q == seq_k.
enum class Mask { none, causal_bottom_right, causal_top_left };

// Size in bytes of one element.
constexpr int dtype_size(DType t) { return t == DType::fp32 ? 4 : 2; }

constexpr std::string_view to_string(DType t) {
  switch (t) {
    case DType::fp16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::fp32: return "fp32";
  }
  return "?";
}

constexpr std::string_view to_string(Mask m) {
  switch (m) {
    case Mask::none: return "none";
    case Mask::causal_bottom_right: return "causal";
    case Mask::causal_top_left: return "causal-top-left";
  }
  return "?";
}

// The offset of the diagonal: query i is aligned with key i + diagonal_offset. A causal mask
// shows query i the keys j <= i + offset, a sliding window (problem.h) those within its bounds
// of i + offset, and ALiBi's bias grows with |i + offset - j|. Bottom-right (seq_k - seq_q) for
// Mask::none and causal_bottom_right, 0 for causal_top_left. Rows that see no key at all get
// O = 0 and zero gradients.
constexpr int64_t diagonal_offset(Mask m, int64_t seq_q, int64_t seq_k) {
  return m == Mask::causal_top_left ? 0 : seq_k - seq_q;
}

}  // namespace cuflash
