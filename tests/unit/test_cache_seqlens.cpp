// Per-sequence key lengths (Problem::cache_seqlens) in the CPU reference and the baseline:
// checked against naive loops that apply the rule directly (batch entry b sees keys j <
// len_b, and under the causal masks the diagonal aligns to len_b), and the argument errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "cuflash/reference/attention_ref.h"
#include "cuflash/reference/baseline.h"
#include "unit_test_util.h"

namespace ref = cuflash::reference;
using cuflash::Mask;
using cuflash::Problem;
using cuflash::unit_test::random_values;
using Vec = std::vector<double>;

namespace {

Problem lengths_problem(Mask mask, std::vector<int64_t> lengths) {
  Problem p;
  p.shape.batch = static_cast<int64_t>(lengths.size());
  p.shape.heads = 4;
  p.shape.heads_kv = 2;
  p.shape.seq_q = 3;
  p.shape.seq_k = 9;
  p.shape.head_dim = 5;
  p.mask = mask;
  p.cache_seqlens = std::move(lengths);
  return p;
}

// Keys [0, end) that row i of batch entry b sees, written from the rule itself.
int64_t visible_end(const Problem& p, int64_t b, int64_t i) {
  const int64_t len = p.cache_seqlens[b];
  switch (p.mask) {
    case Mask::none: return len;
    case Mask::causal_bottom_right:
      return std::clamp<int64_t>(i + len - p.shape.seq_q + 1, 0, len);
    case Mask::causal_top_left: return std::clamp<int64_t>(i + 1, 0, len);
  }
  return 0;
}

ref::ForwardResult naive_forward(const Problem& p, const Vec& q, const Vec& k, const Vec& v) {
  const auto& s = p.shape;
  ref::ForwardResult r;
  r.out.assign(s.q_elements(), 0.0);
  r.lse.assign(s.lse_elements(), std::numeric_limits<double>::infinity());
  const double scale = p.effective_scale();
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < s.seq_q; ++i) {
        const int64_t hk = h / (s.heads / s.heads_kv);
        const int64_t end = visible_end(p, b, i);
        const double* qi = &q[((b * s.heads + h) * s.seq_q + i) * s.head_dim];
        Vec scores(static_cast<size_t>(end));
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < end; ++j) {
          const double* kj = &k[((b * s.heads_kv + hk) * s.seq_k + j) * s.head_dim];
          double dot = 0;
          for (int64_t d = 0; d < s.head_dim; ++d) dot += qi[d] * kj[d];
          scores[j] = scale * dot;
          max = std::max(max, scores[j]);
        }
        if (end == 0) continue;
        double sum = 0;
        for (double& x : scores) sum += (x = std::exp(x - max));
        double* o = &r.out[((b * s.heads + h) * s.seq_q + i) * s.head_dim];
        for (int64_t j = 0; j < end; ++j) {
          const double* vj = &v[((b * s.heads_kv + hk) * s.seq_k + j) * s.head_dim];
          for (int64_t d = 0; d < s.head_dim; ++d) o[d] += scores[j] / sum * vj[d];
        }
        r.lse[(b * s.heads + h) * s.seq_q + i] = max + std::log(sum);
      }
  return r;
}

}  // namespace

TEST_CASE("reference: each batch entry sees only its own keys, the diagonal aligned to them",
          "[reference][cache_seqlens]") {
  const Mask mask = GENERATE(Mask::none, Mask::causal_bottom_right, Mask::causal_top_left);
  // 1 key (bottom-right: rows 0 and 1 see nothing), an odd length, all of seq_k.
  const Problem p = lengths_problem(mask, {1, 5, 9});
  const Vec q = random_values(p.shape.q_elements(), 1);
  Vec k = random_values(p.shape.kv_elements(), 2);
  Vec v = random_values(p.shape.kv_elements(), 3);
  // Keys past a length must not matter: NaN there would spread into any row that read them.
  for (int64_t b = 0; b < p.shape.batch; ++b)
    for (int64_t h = 0; h < p.shape.heads_kv; ++h)
      for (int64_t j = p.cache_seqlens[b]; j < p.shape.seq_k; ++j)
        for (int64_t d = 0; d < p.shape.head_dim; ++d) {
          const size_t at = size_t(((b * p.shape.heads_kv + h) * p.shape.seq_k + j) *
                                   p.shape.head_dim + d);
          k[at] = v[at] = std::numeric_limits<double>::quiet_NaN();
        }
  const ref::ForwardResult expected = naive_forward(p, q, k, v);
  const ref::ForwardResult got = ref::forward(p, q, k, v);
  REQUIRE(got.out.size() == expected.out.size());
  for (size_t i = 0; i < got.out.size(); ++i) {
    INFO("out[" << i << "]");
    CHECK(got.out[i] == Approx(expected.out[i]).margin(1e-12));
  }
  for (size_t i = 0; i < got.lse.size(); ++i) {
    INFO("lse[" << i << "]");
    if (std::isinf(expected.lse[i])) {
      CHECK(got.lse[i] == expected.lse[i]);
    } else {
      CHECK(got.lse[i] == Approx(expected.lse[i]).margin(1e-12));
    }
  }
  // The baseline follows the same lengths: every element finite, none read past a length.
  const ref::ForwardResult base = ref::baseline::forward(p, q, k, v);
  for (size_t i = 0; i < base.out.size(); ++i) {
    INFO("baseline out[" << i << "]");
    CHECK(std::isfinite(base.out[i]));
    CHECK(base.out[i] == Approx(expected.out[i]).margin(1e-2));
  }
}

namespace {

// Lengths of seq_k for every entry are the problem without lengths: the forward results must
// agree to rounding.
void check_full_lengths_change_nothing(Problem p, unsigned seed) {
  const Vec q = random_values(p.shape.q_elements(), seed);
  const Vec k = random_values(p.shape.kv_elements(), seed + 1);
  const Vec v = random_values(p.shape.kv_elements(), seed + 2);
  const ref::ForwardResult with = ref::forward(p, q, k, v);
  p.cache_seqlens.clear();
  const ref::ForwardResult without = ref::forward(p, q, k, v);
  for (size_t i = 0; i < with.out.size(); ++i) {
    CHECK(with.out[i] == Approx(without.out[i]).margin(1e-14));
  }
  for (size_t i = 0; i < with.lse.size(); ++i) {
    CHECK(with.lse[i] == Approx(without.lse[i]).margin(1e-14));
  }
}

}  // namespace

TEST_CASE("reference: lengths of seq_k for every entry change nothing",
          "[reference][cache_seqlens]") {
  check_full_lengths_change_nothing(lengths_problem(Mask::causal_bottom_right, {9, 9}), 4);
}

TEST_CASE("reference: with [batch, heads] ALiBi slopes each entry keeps its own",
          "[reference][cache_seqlens]") {
  // The problem without lengths applies the per-batch slopes directly; batch 1's differ from
  // batch 0's.
  Problem p = lengths_problem(Mask::causal_bottom_right, {9, 9});
  p.alibi_slopes = {0.5f, 0.25f, 0.125f, 0.0625f, 2.f, 1.f, 0.75f, 0.3f};
  check_full_lengths_change_nothing(p, 7);
}

TEST_CASE("reference: bad cache lengths and the backward are refused, naming them",
          "[reference][cache_seqlens]") {
  const auto refused = [](const Problem& p) {
    try {
      ref::validate(p);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what()).find("cache_seqlens") != std::string::npos;
    }
    return false;
  };
  CHECK(refused(lengths_problem(Mask::none, {0, 3})));
  CHECK(refused(lengths_problem(Mask::none, {10, 3})));
  Problem wrong_count = lengths_problem(Mask::none, {3, 3});
  wrong_count.shape.batch = 3;
  CHECK(refused(wrong_count));

  const Problem p = lengths_problem(Mask::none, {2, 9});
  const Vec q = random_values(p.shape.q_elements(), 7);
  const Vec kv = random_values(p.shape.kv_elements(), 8);
  const ref::ForwardResult fwd = ref::forward(p, q, kv, kv);
  CHECK_THROWS_WITH(ref::backward(p, q, kv, kv, fwd, q), Catch::Contains("forward only"));
}
