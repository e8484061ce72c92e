// One attention problem: sizes, element type, mask, scale and tensor layout. The one description
// that the GPU API, the CPU reference, the CLI and the tests share. No CUDA headers: the
// reference and the .npy tools build without a CUDA toolkit.
#pragma once

#include <algorithm>
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
  // [total_tokens, heads, head_dim]: the sequences of a variable-length batch packed along the
  // token axis (Problem::seqlens_q). Stored like bshd with batch 1.
  thd,
};

constexpr std::string_view to_string(Layout layout) {
  switch (layout) {
    case Layout::bhsd: return "bhsd";
    case Layout::bshd: return "bshd";
    case Layout::thd: return "thd";
  }
  return "?";
}

// A sliding window around the diagonal (types.h, diagonal_offset()): query i sees key j when
// i + offset - left <= j <= i + offset + right. -1 leaves that side unbounded; the default is
// no window. It combines with a causal mask by intersection, so under one `right` is 0
// whatever is given.
struct Window {
  int64_t left = -1;
  int64_t right = -1;

  bool bounded() const { return left >= 0 || right >= 0; }
  bool operator==(const Window& other) const {
    return left == other.left && right == other.right;
  }
};

// A side of the visible band that has no bound: farther than any sequence reaches, and small
// enough that index arithmetic with it never overflows.
inline constexpr int64_t kUnboundedBand = int64_t{1} << 40;

// The keys query i sees, as a band around the diagonal: i + offset - left <= j <=
// i + offset + right, intersected with [0, seq_k). The one statement of the mask and the window
// that the kernels, the reference and the FLOP counts share.
struct VisibleBand {
  int64_t offset;  // diagonal_offset()
  int64_t left;    // kUnboundedBand when unbounded
  int64_t right;   // 0 under a causal mask; kUnboundedBand when unbounded

  // Keys [begin, end) of query `row` (begin >= end when it sees none).
  int64_t begin(int64_t row) const { return std::max<int64_t>(row + offset - left, 0); }
  int64_t end(int64_t row, int64_t seq_k) const {
    return std::min<int64_t>(row + offset + right + 1, seq_k);
  }
};

inline VisibleBand visible_band(const AttentionShape& s, Mask mask, Window window) {
  const bool causal = mask != Mask::none;
  VisibleBand band;
  band.offset = diagonal_offset(mask, s.seq_q, s.seq_k);
  // Bounds beyond any sequence are all the same: unbounded (and safe from overflow).
  const auto bound = [](int64_t side) {
    return side < 0 ? kUnboundedBand : std::min(side, kUnboundedBand);
  };
  band.left = bound(window.left);
  band.right = causal ? 0 : bound(window.right);
  return band;
}

// The ALiBi paper's slopes for `heads` heads: 2^(-8 (h + 1) / n) for n a power of two; otherwise
// those of the largest power of two n' below n, then every other slope of 2 n' (the first,
// third, ...) until there are n.
inline std::vector<float> alibi_default_slopes(int64_t heads) {
  const auto power_of_two_slopes = [](int64_t n) {
    std::vector<float> slopes;
    for (int64_t h = 0; h < n; ++h) {
      slopes.push_back(float(std::exp2(-8.0 * double(h + 1) / double(n))));
    }
    return slopes;
  };
  int64_t below = 1;
  while (below * 2 <= heads) below *= 2;
  std::vector<float> slopes = power_of_two_slopes(below);
  const std::vector<float> finer = power_of_two_slopes(2 * below);
  for (int64_t i = 0; int64_t(slopes.size()) < heads; i += 2) slopes.push_back(finer[size_t(i)]);
  return slopes;
}

struct Problem {
  AttentionShape shape;
  DType dtype = DType::fp16;
  Mask mask = Mask::none;
  double scale = 0.0;  // softmax scale; 0 means 1/sqrt(head_dim)
  Layout layout = Layout::bhsd;
  Window window;          // none by default
  double softcap = 0.0;   // > 0: each score s becomes softcap * tanh(s / softcap); 0: off
  // ALiBi: empty for none; else fp32 slopes [heads] (shared by every batch) or [batch, heads].
  // Score s of query i, key j in head h becomes s - slope[h] * |i + offset - j|.
  std::vector<float> alibi_slopes;
  int64_t splits = 0;  // the GPU forward's key splits (ForwardArgs::splits; 0: automatic)
  // Forward only. Keys per page of a paged K/V cache on the GPU (ForwardArgs::paged; the host
  // runner stores K and V into pages in a shuffled order); 0: contiguous K/V.
  int64_t page_size = 0;
  // Keys of each batch entry, each in [1, seq_k] (ForwardArgs::cache_seqlens): keys past an
  // entry's length do not exist for it and its causal mask aligns to it. Empty: seq_k for all.
  std::vector<int64_t> cache_seqlens;
  bool deterministic = false;  // fixed-order dQ sums in the GPU backward (BackwardArgs)
  // The GPU's context-parallel ranks (cuflash/context_parallel/single_gpu.h): N >= 1 computes
  // the attention as N ranks of context parallelism would, their blocks one after another on
  // one GPU; 0 computes it in one piece. The same attention either way: the CPU reference
  // computes it in one piece. Dense problems only (no seqlens_q, page_size, cache_seqlens).
  int ranks = 0;
  // Context parallelism over GPUs 0 to gpus - 1 of the host (cuflash/context_parallel/ring.h,
  // NCCL): the same attention, computed by one rank per GPU; 0: one GPU. Dense problems only,
  // not with ranks.
  int gpus = 0;
  // A variable-length packed batch (layout thd): the query and key lengths of its sequences,
  // each >= 1, one pair per sequence. Sequence b is today's attention over its own queries
  // [sum of seqlens_q before b, + seqlens_q[b]) and keys (likewise in seqlens_k): its masks,
  // window and ALiBi distances align to (seqlens_q[b], seqlens_k[b]), and [sequences, heads]
  // ALiBi slopes give it row b. Then `shape` describes the packed tensors: batch 1, seq_q and
  // seq_k the token totals, so that Q is [1, total_q, heads, head_dim] in memory and LSE
  // [1, heads, total_q]. Empty: a dense problem.
  std::vector<int64_t> seqlens_q;
  std::vector<int64_t> seqlens_k;

  double effective_scale() const {
    return scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(shape.head_dim)) : scale;
  }
  VisibleBand band() const { return visible_band(shape, mask, window); }
  // Whether any key is hidden from any query: a causal mask or a window.
  bool masked() const { return mask != Mask::none || window.bounded(); }
  // Whether scores are changed before the softmax (softcap, ALiBi).
  bool modifies_scores() const { return softcap > 0.0 || !alibi_slopes.empty(); }
  // Elements between the slopes of two batches: 0 for [heads] slopes, heads for [batch, heads].
  int64_t alibi_batch_stride() const {
    return int64_t(alibi_slopes.size()) == shape.heads ? 0 : shape.heads;
  }
  bool varlen() const { return !seqlens_q.empty(); }
  // Batch entries with their own problem: the sequences of a varlen batch, else shape.batch.
  int64_t sequences() const { return varlen() ? int64_t(seqlens_q.size()) : shape.batch; }
  // The dense problem of sequence b of a varlen batch: batch 1, its own lengths, layout bhsd,
  // and its row of [sequences, heads] ALiBi slopes.
  Problem sequence(int64_t b) const {
    Problem sub = *this;
    sub.seqlens_q.clear();
    sub.seqlens_k.clear();
    sub.layout = Layout::bhsd;
    sub.shape.batch = 1;
    sub.shape.seq_q = seqlens_q[size_t(b)];
    sub.shape.seq_k = seqlens_k[size_t(b)];
    if (int64_t(alibi_slopes.size()) != shape.heads && !alibi_slopes.empty()) {
      const auto first = alibi_slopes.begin() + b * shape.heads;
      sub.alibi_slopes.assign(first, first + shape.heads);
    }
    return sub;
  }
};

// Prefix sums of sequence lengths: [0, l0, l0 + l1, ..., total], the cumulative offsets of a
// varlen batch (ForwardArgs::varlen).
inline std::vector<int64_t> cumulative_offsets(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> offsets(lengths.size() + 1, 0);
  for (size_t i = 0; i < lengths.size(); ++i) offsets[i + 1] = offsets[i] + lengths[i];
  return offsets;
}

}  // namespace cuflash
