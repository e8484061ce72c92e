// Per-sequence problems for the reference and the baseline, with no change to the attention
// engine: with key lengths (Problem::cache_seqlens) each batch entry is its own problem of batch 1
// over its first cache_seqlens[b] keys; in a variable-length packed batch (Problem::seqlens_q)
// each sequence is its own dense problem (Problem::sequence()). Either way the masks, the window
// and ALiBi's distances follow the entry's own lengths.
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

// Throws std::invalid_argument unless a varlen problem is consistent: layout thd, batch 1, one
// key length per query length, every length >= 1, the totals equal to seq_q and seq_k, and no
// cache lengths or pages alongside.
inline void check_varlen(const Problem& p) {
  if (!p.varlen()) {
    if (!p.seqlens_k.empty()) {
      throw std::invalid_argument("seqlens_k needs seqlens_q (a variable-length batch)");
    }
    if (p.layout == Layout::thd) {
      throw std::invalid_argument("layout thd needs sequence lengths (seqlens_q)");
    }
    return;
  }
  if (p.layout != Layout::thd) {
    throw std::invalid_argument("sequence lengths (seqlens_q) need layout thd, not " +
                                std::string(to_string(p.layout)));
  }
  if (p.shape.batch != 1) {
    throw std::invalid_argument("a variable-length batch has shape.batch 1 (the packed tensors), "
                                "got " + std::to_string(p.shape.batch));
  }
  if (p.seqlens_k.size() != p.seqlens_q.size()) {
    throw std::invalid_argument("seqlens_k has " + std::to_string(p.seqlens_k.size()) +
                                " lengths, expected one per sequence (" +
                                std::to_string(p.seqlens_q.size()) + ")");
  }
  const auto check = [](const std::vector<int64_t>& lengths, const char* name, int64_t total) {
    int64_t sum = 0;
    for (const int64_t length : lengths) {
      if (length < 1) {
        throw std::invalid_argument(std::string(name) + ": " + std::to_string(length) +
                                    " is not a positive length");
      }
      if (__builtin_add_overflow(sum, length, &sum)) {
        throw std::invalid_argument(std::string(name) + " sum past 2^63 tokens");
      }
    }
    if (sum != total) {
      throw std::invalid_argument(std::string(name) + " sum to " + std::to_string(sum) +
                                  " tokens, but the packed tensors hold " +
                                  std::to_string(total));
    }
  };
  check(p.seqlens_q, "seqlens_q", p.shape.seq_q);
  check(p.seqlens_k, "seqlens_k", p.shape.seq_k);
  if (!p.cache_seqlens.empty() || p.page_size != 0) {
    throw std::invalid_argument("a variable-length batch takes neither cache_seqlens nor pages");
  }
}

// Rows [begin, begin + count) of every head of a packed [heads, total, width] array, as a dense
// [heads, count, width] one; scatter_rows() writes such a part back.
inline std::vector<double> gather_rows(const std::vector<double>& packed, int64_t heads,
                                       int64_t total, int64_t begin, int64_t count,
                                       int64_t width) {
  std::vector<double> part;
  part.reserve(size_t(heads * count * width));
  for (int64_t h = 0; h < heads; ++h) {
    const auto first = packed.begin() + (h * total + begin) * width;
    part.insert(part.end(), first, first + count * width);
  }
  return part;
}

inline void scatter_rows(std::vector<double>& packed, const std::vector<double>& part,
                         int64_t heads, int64_t total, int64_t begin, int64_t count,
                         int64_t width) {
  for (int64_t h = 0; h < heads; ++h) {
    std::copy(part.begin() + h * count * width, part.begin() + (h + 1) * count * width,
              packed.begin() + (h * total + begin) * width);
  }
}

// Calls visit(sub, q_begin, k_begin, sub_progress) for each sequence of a varlen problem:
// `sub` its dense problem (Problem::sequence()), q_begin / k_begin its first query and key
// token, and a progress callback that counts over the whole batch (`blocks(sub)` is the number
// of progress steps of one call on `sub`).
template <class Blocks, class Visit>
void for_each_sequence(const Problem& p, const ProgressCallback& progress, Blocks&& blocks,
                       Visit&& visit) {
  const int64_t n = p.sequences();
  int64_t total_blocks = 0;
  for (int64_t b = 0; b < n; ++b) total_blocks += blocks(p.sequence(b));
  int64_t q_begin = 0, k_begin = 0, done_before = 0;
  for (int64_t b = 0; b < n; ++b) {
    const Problem sub = p.sequence(b);
    ProgressCallback sub_progress;
    if (progress) {
      sub_progress = [&progress, done_before, total_blocks](int64_t done, int64_t) {
        return progress(done_before + done, total_blocks);
      };
    }
    visit(sub, q_begin, k_begin, sub_progress);
    done_before += blocks(sub);
    q_begin += sub.shape.seq_q;
    k_begin += sub.shape.seq_k;
  }
}

// A varlen problem's forward and backward, one sequence at a time: `forward(sub, q, k, v,
// progress)` and `backward(sub, q, k, v, fwd, dout, progress)` run the dense problem of each
// sequence (Problem::sequence()) on its rows, and `blocks(sub)` counts one call's progress
// steps, so that progress counts over the whole batch. The packed values are in
// [1, heads, total, head_dim] order (the bhsd order of the packed shape), LSE [1, heads, total_q].
template <class Forward, class Blocks>
ForwardResult forward_varlen(const Problem& p, const std::vector<double>& q,
                             const std::vector<double>& k, const std::vector<double>& v,
                             const ProgressCallback& progress, Forward&& forward,
                             Blocks&& blocks) {
  const AttentionShape& s = p.shape;
  const int64_t d = s.head_dim;
  ForwardResult result;
  result.out.resize(size_t(s.q_elements()));
  result.lse.resize(size_t(s.lse_elements()));
  for_each_sequence(p, progress, blocks, [&](const Problem& sub, int64_t q_begin, int64_t k_begin,
                                             const ProgressCallback& sub_progress) {
    const int64_t len_q = sub.shape.seq_q, len_k = sub.shape.seq_k;
    const ForwardResult r =
        forward(sub, gather_rows(q, s.heads, s.seq_q, q_begin, len_q, d),
                gather_rows(k, s.heads_kv, s.seq_k, k_begin, len_k, d),
                gather_rows(v, s.heads_kv, s.seq_k, k_begin, len_k, d), sub_progress);
    scatter_rows(result.out, r.out, s.heads, s.seq_q, q_begin, len_q, d);
    scatter_rows(result.lse, r.lse, s.heads, s.seq_q, q_begin, len_q, 1);
  });
  return result;
}

template <class Backward, class Blocks>
Gradients backward_varlen(const Problem& p, const std::vector<double>& q,
                          const std::vector<double>& k, const std::vector<double>& v,
                          const ForwardResult& fwd, const std::vector<double>& dout,
                          const ProgressCallback& progress, Backward&& backward,
                          Blocks&& blocks) {
  const AttentionShape& s = p.shape;
  const int64_t d = s.head_dim;
  Gradients grads;
  grads.dq.resize(size_t(s.q_elements()));
  grads.dk.resize(size_t(s.kv_elements()));
  grads.dv.resize(size_t(s.kv_elements()));
  for_each_sequence(p, progress, blocks, [&](const Problem& sub, int64_t q_begin, int64_t k_begin,
                                             const ProgressCallback& sub_progress) {
    const int64_t len_q = sub.shape.seq_q, len_k = sub.shape.seq_k;
    const auto rows_q = [&](const std::vector<double>& t, int64_t width) {
      return gather_rows(t, s.heads, s.seq_q, q_begin, len_q, width);
    };
    const auto rows_k = [&](const std::vector<double>& t) {
      return gather_rows(t, s.heads_kv, s.seq_k, k_begin, len_k, d);
    };
    const ForwardResult sub_fwd{rows_q(fwd.out, d), rows_q(fwd.lse, 1)};
    const Gradients g = backward(sub, rows_q(q, d), rows_k(k), rows_k(v), sub_fwd,
                                 rows_q(dout, d), sub_progress);
    scatter_rows(grads.dq, g.dq, s.heads, s.seq_q, q_begin, len_q, d);
    scatter_rows(grads.dk, g.dk, s.heads_kv, s.seq_k, k_begin, len_k, d);
    scatter_rows(grads.dv, g.dv, s.heads_kv, s.seq_k, k_begin, len_k, d);
  });
  return grads;
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
