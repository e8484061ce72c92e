#include "cuflash/reference/attention_ref.h"

#include <omp.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "attention_engine.h"
#include "per_sequence.h"

namespace cuflash::reference {

namespace {

std::string bracketed(std::initializer_list<int64_t> dims) {
  std::string text = "[";
  for (const int64_t dim : dims) {
    if (text.size() > 1) text += ",";
    text += std::to_string(dim);
  }
  return text + "]";
}

void check_positive(const char* field, int64_t value) {
  if (value <= 0) {
    throw std::invalid_argument(std::string(field) + " (" + std::to_string(value) +
                                ") must be positive");
  }
}

// e.g. "q has 10 elements, expected 12 for [B,H,Sq,D]=[1,2,3,2]"
void check_size(const char* name, const std::vector<double>& values, int64_t expected,
                const char* layout, const std::string& dims) {
  if (static_cast<int64_t>(values.size()) != expected) {
    throw std::invalid_argument(std::string(name) + " has " + std::to_string(values.size()) +
                                " elements, expected " + std::to_string(expected) + " for " +
                                layout + "=" + dims);
  }
}

std::string q_dims(const AttentionShape& s) {
  return bracketed({s.batch, s.heads, s.seq_q, s.head_dim});
}
std::string kv_dims(const AttentionShape& s) {
  return bracketed({s.batch, s.heads_kv, s.seq_k, s.head_dim});
}

}  // namespace

void validate(const Problem& problem) {
  const AttentionShape& p = problem.shape;
  check_positive("batch", p.batch);
  check_positive("heads", p.heads);
  check_positive("heads_kv", p.heads_kv);
  check_positive("seq_q", p.seq_q);
  check_positive("seq_k", p.seq_k);
  check_positive("head_dim", p.head_dim);
  if (p.heads % p.heads_kv != 0) {
    throw std::invalid_argument("heads (" + std::to_string(p.heads) +
                                ") must be a multiple of heads_kv (" +
                                std::to_string(p.heads_kv) + ")");
  }
  if (!std::isfinite(problem.scale)) {
    throw std::invalid_argument("scale (" + std::to_string(problem.scale) + ") must be finite");
  }
  if (problem.window.left < -1 || problem.window.right < -1) {
    throw std::invalid_argument("window bounds (" + std::to_string(problem.window.left) + "," +
                                std::to_string(problem.window.right) +
                                ") must be >= -1 (-1: unbounded)");
  }
  if (!std::isfinite(problem.softcap) || problem.softcap < 0) {
    throw std::invalid_argument("softcap (" + std::to_string(problem.softcap) +
                                ") must be finite and >= 0 (0: off)");
  }
  const auto slopes = int64_t(problem.alibi_slopes.size());
  const int64_t entries = problem.sequences();
  if (slopes != 0 && slopes != p.heads && slopes != entries * p.heads) {
    throw std::invalid_argument("alibi_slopes has " + std::to_string(slopes) +
                                " values, expected heads (" + std::to_string(p.heads) +
                                ") or batch * heads (" + std::to_string(entries * p.heads) + ")");
  }
  for (const float slope : problem.alibi_slopes) {
    if (!std::isfinite(slope)) throw std::invalid_argument("alibi_slopes must be finite");
  }
  // Every element count the reference forms must fit int64 (and the vectors it allocates).
  int64_t q = 1, kv = 1;
  bool overflow = false;
  for (const int64_t f : {p.batch, p.heads, p.seq_q, p.head_dim}) {
    overflow |= __builtin_mul_overflow(q, f, &q);
  }
  for (const int64_t f : {p.batch, p.heads_kv, p.seq_k, p.head_dim}) {
    overflow |= __builtin_mul_overflow(kv, f, &kv);
  }
  if (overflow) throw std::invalid_argument("shape is too large: element counts overflow int64");
  engine::check_cache_seqlens(problem);
  engine::check_varlen(problem);
}

namespace engine {

void check_forward_inputs(const Problem& p, const std::vector<double>& q,
                          const std::vector<double>& k, const std::vector<double>& v) {
  validate(p);
  const AttentionShape& s = p.shape;
  check_size("q", q, s.q_elements(), "[B,H,Sq,D]", q_dims(s));
  check_size("k", k, s.kv_elements(), "[B,Hkv,Sk,D]", kv_dims(s));
  check_size("v", v, s.kv_elements(), "[B,Hkv,Sk,D]", kv_dims(s));
}

void check_backward_inputs(const Problem& p, const std::vector<double>& q,
                           const std::vector<double>& k, const std::vector<double>& v,
                           const ForwardResult& fwd, const std::vector<double>& dout) {
  check_forward_inputs(p, q, k, v);
  if (!p.cache_seqlens.empty()) {
    throw std::invalid_argument("cache_seqlens: the backward pass takes none (forward only)");
  }
  const AttentionShape& s = p.shape;
  check_size("out", fwd.out, s.q_elements(), "[B,H,Sq,D]", q_dims(s));
  check_size("lse", fwd.lse, s.lse_elements(), "[B,H,Sq]",
             bracketed({s.batch, s.heads, s.seq_q}));
  check_size("dout", dout, s.q_elements(), "[B,H,Sq,D]", q_dims(s));
}

}  // namespace engine

int64_t scratch_bytes(const Problem& p, bool backward) {
  validate(p);
  if (p.varlen()) {  // one sequence at a time
    int64_t most = 0;
    for (int64_t b = 0; b < p.sequences(); ++b) {
      most = std::max(most, scratch_bytes(p.sequence(b), backward));
    }
    return most;
  }
  const AttentionShape& s = p.shape;
  // A query block's tile: up to query_block_rows() rows of seq_k scores; a key block's (backward
  // pass 2): up to kMaxTileElements / keys rows of kKeyBlockColumns keys. Forward keeps about two
  // such matrices per thread (the scores, a product's temporary); backward about four (P, dP, dS
  // and a temporary). Only as many threads work as there are blocks.
  const int64_t query_rows = std::min(engine::query_block_rows(s.seq_k), s.seq_q);
  const double query_tile = double(query_rows) * double(s.seq_k);
  const int64_t keys = std::min(engine::kKeyBlockColumns, s.seq_k);
  const double key_tile =
      double(std::min(std::max<int64_t>(engine::kMaxTileElements / keys, 1), s.seq_q)) *
      double(keys);
  const double per_thread =
      backward ? 4.0 * std::max(query_tile, key_tile) : 2.0 * query_tile;
  const engine::Geometry g(p);
  const double key_blocks = double(s.batch) * double(s.heads_kv) *
                            double(engine::ceil_div(s.seq_k, engine::kKeyBlockColumns));
  const double blocks = std::max(double(engine::query_block_count(g)), backward ? key_blocks : 0);
  const double threads = std::min(double(std::max(omp_get_max_threads(), 1)), blocks);
  const double bytes = threads * per_thread * sizeof(double);
  return bytes >= 9.0e18 ? int64_t(9.0e18) : int64_t(bytes);
}

namespace {

// The exact forward of one dense problem laid out by `g` (its own geometry, or a block's at a
// global diagonal offset), inputs already checked.
ForwardResult dense_forward(const engine::Geometry& g, const AttentionShape& shape,
                            const std::vector<double>& q, const std::vector<double>& k,
                            const std::vector<double>& v, const ProgressCallback* progress) {
  ForwardResult result;
  result.out.resize(shape.q_elements());
  result.lse.resize(shape.lse_elements());
  engine::Inputs<double> inputs;
  inputs.q = q.data();
  inputs.k = k.data();
  inputs.v = v.data();
  engine::run_forward(engine::Exact{}, g, inputs, result.out.data(), result.lse.data(), progress);
  return result;
}

}  // namespace

ForwardResult forward(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
                      const std::vector<double>& v, const ProgressCallback& progress) {
  engine::check_forward_inputs(p, q, k, v);
  if (p.varlen()) {
    return engine::forward_varlen(
        p, q, k, v, progress,
        [](const Problem& sub, const std::vector<double>& sq, const std::vector<double>& sk,
           const std::vector<double>& sv,
           const ProgressCallback& sub_progress) { return forward(sub, sq, sk, sv, sub_progress); },
        [](const Problem& sub) { return engine::query_block_count(engine::Geometry(sub)); });
  }
  if (!p.cache_seqlens.empty()) {
    return engine::forward_per_sequence(
        p, q, k, v, progress,
        [](const Problem& sub, const std::vector<double>& sq, const std::vector<double>& sk,
           const std::vector<double>& sv,
           const ProgressCallback& sub_progress) { return forward(sub, sq, sk, sv, sub_progress); },
        [](const Problem& sub) { return engine::query_block_count(engine::Geometry(sub)); });
  }
  return dense_forward(engine::Geometry(p), p.shape, q, k, v, &progress);
}

ForwardResult forward_block(const Problem& block, int64_t diagonal_offset,
                            const std::vector<double>& q, const std::vector<double>& k,
                            const std::vector<double>& v) {
  engine::check_forward_inputs(block, q, k, v);
  if (block.varlen() || !block.cache_seqlens.empty()) {
    throw std::invalid_argument(
        "forward_block: a block is one dense problem (no seqlens_q, no cache_seqlens)");
  }
  return dense_forward(engine::Geometry(block, diagonal_offset), block.shape, q, k, v, nullptr);
}

Gradients backward(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
                   const std::vector<double>& v, const ForwardResult& fwd,
                   const std::vector<double>& dout, const ProgressCallback& progress) {
  engine::check_backward_inputs(p, q, k, v, fwd, dout);
  if (p.varlen()) {
    return engine::backward_varlen(
        p, q, k, v, fwd, dout, progress,
        [](const Problem& sub, const std::vector<double>& sq, const std::vector<double>& sk,
           const std::vector<double>& sv, const ForwardResult& sub_fwd,
           const std::vector<double>& sub_dout, const ProgressCallback& sub_progress) {
          return backward(sub, sq, sk, sv, sub_fwd, sub_dout, sub_progress);
        },
        [](const Problem& sub) { return engine::backward_block_count(engine::Geometry(sub)); });
  }
  Gradients grads;
  grads.dq.resize(p.shape.q_elements());
  grads.dk.resize(p.shape.kv_elements());
  grads.dv.resize(p.shape.kv_elements());
  const engine::Inputs<double> inputs{q.data(),   k.data(),    v.data(),
                                      fwd.out.data(), dout.data(), fwd.lse.data()};
  engine::run_backward(engine::Exact{}, p, inputs, grads.dq.data(), grads.dk.data(),
                       grads.dv.data(), &progress);
  return grads;
}

}  // namespace cuflash::reference
