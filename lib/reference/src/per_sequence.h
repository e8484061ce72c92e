// Per-sequence key lengths (Problem::cache_seqlens) for the reference and the baseline: each
// batch entry is its own problem of batch 1 over its first cache_seqlens[b] keys, so the key
// mask and the causal diagonal follow its length with no change to the attention engine.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuflash/reference/attention_ref.h"

namespace cuflash::reference::engine {

// Throws std::invalid_argument unless the lengths are empty or one per batch entry in [1, seq_k].
inline void check_cache_seqlens(const Problem& p) {
  const std::vector<int64_t>& lengths = p.cache_seqlens;
  if (lengths.empty()) return;
  if (static_cast<int64_t>(lengths.size()) != p.shape.batch) {
    throw std::invalid_argument("cache_seqlens has " + std::to_string(lengths.size()) +
                                " lengths, expected one per batch entry (" +
                                std::to_string(p.shape.batch) + ")");
  }
  for (const int64_t length : lengths) {
    if (length < 1 || length > p.shape.seq_k) {
      throw std::invalid_argument("cache_seqlens: " + std::to_string(length) +
                                  " is outside [1, seq_k = " + std::to_string(p.shape.seq_k) +
                                  "]");
    }
  }
}

// forward(sub_problem, q, k, v, progress) for each batch entry b on its Q and its first
// cache_seqlens[b] keys, assembled into the whole problem's result. `blocks(sub_problem)` is the
// number of progress steps of one call, so that progress counts over the whole problem.
template <class Forward, class Blocks>
ForwardResult forward_per_sequence(const Problem& p, const std::vector<double>& q,
                                   const std::vector<double>& k, const std::vector<double>& v,
                                   const ProgressCallback& progress, Forward&& forward,
                                   Blocks&& blocks) {
  const AttentionShape& s = p.shape;
  const auto sub_problem = [&](int64_t b) {
    Problem sub = p;
    sub.shape.batch = 1;
    sub.shape.seq_k = p.cache_seqlens[b];
    sub.cache_seqlens.clear();
    // [batch, heads] ALiBi slopes: the entry's own row.
    if (static_cast<int64_t>(p.alibi_slopes.size()) == s.batch * s.heads && s.batch > 1) {
      const auto first = p.alibi_slopes.begin() + b * s.heads;
      sub.alibi_slopes.assign(first, first + s.heads);
    }
    return sub;
  };
  int64_t total = 0;
  for (int64_t b = 0; b < s.batch; ++b) total += blocks(sub_problem(b));

  ForwardResult result;
  result.out.resize(s.q_elements());
  result.lse.resize(s.lse_elements());
  const int64_t q_size = s.heads * s.seq_q * s.head_dim;  // Q, O of one batch entry
  const int64_t lse_size = s.heads * s.seq_q;
  int64_t done_before = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    const Problem sub = sub_problem(b);
    const int64_t keys = sub.shape.seq_k * s.head_dim;  // of one kv head, kept
    std::vector<double> k_b, v_b;
    for (int64_t h = 0; h < s.heads_kv; ++h) {
      const int64_t begin = (b * s.heads_kv + h) * s.seq_k * s.head_dim;
      k_b.insert(k_b.end(), k.begin() + begin, k.begin() + begin + keys);
      v_b.insert(v_b.end(), v.begin() + begin, v.begin() + begin + keys);
    }
    const std::vector<double> q_b(q.begin() + b * q_size, q.begin() + (b + 1) * q_size);
    ProgressCallback sub_progress;
    if (progress) {
      sub_progress = [&progress, done_before, total](int64_t done, int64_t) {
        return progress(done_before + done, total);
      };
    }
    const ForwardResult r = forward(sub, q_b, k_b, v_b, sub_progress);
    std::copy(r.out.begin(), r.out.end(), result.out.begin() + b * q_size);
    std::copy(r.lse.begin(), r.lse.end(), result.lse.begin() + b * lse_size);
    done_before += blocks(sub);
  }
  return result;
}

}  // namespace cuflash::reference::engine
