// The float64 CPU reference, the low-precision baseline and the error comparison.
//
// The reference is checked against independent naive loops (forward and backward), and its
// gradients against central finite differences, so the loops themselves are checked too.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuflash/numeric.h"
#include "cuflash/reference/attention_ref.h"
#include "cuflash/reference/baseline.h"
#include "cuflash/reference/compare.h"

namespace ref = cuflash::reference;
using cuflash::DType;
using cuflash::Mask;
using cuflash::Problem;
using Vec = std::vector<double>;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Problem make_problem(int64_t batch, int64_t heads, int64_t heads_kv, int64_t seq_q,
                     int64_t seq_k, int64_t head_dim, Mask mask, double scale = 0.0) {
  Problem p;
  p.shape.batch = batch;
  p.shape.heads = heads;
  p.shape.heads_kv = heads_kv;
  p.shape.seq_q = seq_q;
  p.shape.seq_k = seq_k;
  p.shape.head_dim = head_dim;
  p.mask = mask;
  p.scale = scale;
  return p;
}

// The problem for the baseline in `dtype` (the reference ignores the dtype).
Problem in_dtype(Problem p, DType dtype) {
  p.dtype = dtype;
  return p;
}

std::string describe(const Problem& p) {
  return "B=" + std::to_string(p.shape.batch) + " H=" + std::to_string(p.shape.heads) +
         " Hkv=" + std::to_string(p.shape.heads_kv) + " Sq=" + std::to_string(p.shape.seq_q) +
         " Sk=" + std::to_string(p.shape.seq_k) + " D=" + std::to_string(p.shape.head_dim) +
         " mask=" + std::string(cuflash::to_string(p.mask));
}

Vec random_vector(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Vec values(static_cast<size_t>(n));
  for (double& x : values) x = normal(rng);
  return values;
}

struct Inputs {
  Vec q, k, v, dout;
};

Inputs random_inputs(const Problem& p, uint64_t seed) {
  const cuflash::AttentionShape& sz = p.shape;
  return {random_vector(sz.q_elements(), seed), random_vector(sz.kv_elements(), seed + 1),
          random_vector(sz.kv_elements(), seed + 2), random_vector(sz.q_elements(), seed + 3)};
}

// Largest |a - b|, where the same infinity on both sides counts as equal and any other
// non-finite value as an infinite difference.
double max_difference(const Vec& a, const Vec& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) && a[i] == b[i]) continue;
    const double diff = std::abs(a[i] - b[i]);
    worst = std::isnan(diff) ? kInf : std::max(worst, diff);
  }
  return worst;
}

bool all_finite(const Vec& values) {
  return std::all_of(values.begin(), values.end(), [](double x) { return std::isfinite(x); });
}

// Whether values[first, first + count) are all NaN (nan == true) or all finite (nan == false).
bool row_is(bool nan, const Vec& values, int64_t first, int64_t count) {
  return std::all_of(values.begin() + first, values.begin() + first + count,
                     [nan](double x) { return nan ? std::isnan(x) : std::isfinite(x); });
}

// --- Naive loops, written straight from the definitions ------------------------------------

// The diagonal: bottom-right, unless the mask is causal top-left.
int64_t naive_offset(const Problem& p) {
  return p.mask == Mask::causal_top_left ? 0 : p.shape.seq_k - p.shape.seq_q;
}

bool naive_visible(const Problem& p, int64_t i, int64_t j) {
  const int64_t diagonal = i + naive_offset(p);
  if (p.mask != Mask::none && j > diagonal) return false;
  if (p.window.left >= 0 && j < diagonal - p.window.left) return false;
  if (p.window.right >= 0 && j > diagonal + p.window.right) return false;
  return true;
}

int64_t at(int64_t b, int64_t h, int64_t s, int64_t heads, int64_t seq, int64_t dim) {
  return ((b * heads + h) * seq + s) * dim;
}

// The score of (b, h, i, j): scaled, capped, biased. `softcap_slope` gets d(capped)/d(scaled).
double naive_score(const Problem& p, const Inputs& in, int64_t b, int64_t h, int64_t i,
                   int64_t j, double* softcap_slope = nullptr) {
  const cuflash::AttentionShape& sz = p.shape;
  const int64_t hkv = h / (sz.heads / sz.heads_kv);
  const double scale = p.scale == 0.0 ? 1.0 / std::sqrt(double(sz.head_dim)) : p.scale;
  double dot = 0.0;
  for (int64_t d = 0; d < sz.head_dim; ++d) {
    dot += in.q[at(b, h, i, sz.heads, sz.seq_q, sz.head_dim) + d] *
           in.k[at(b, hkv, j, sz.heads_kv, sz.seq_k, sz.head_dim) + d];
  }
  double score = scale * dot;
  if (softcap_slope != nullptr) *softcap_slope = 1.0;
  if (p.softcap > 0) {
    const double t = std::tanh(score / p.softcap);
    score = p.softcap * t;
    if (softcap_slope != nullptr) *softcap_slope = 1.0 - t * t;
  }
  if (!p.alibi_slopes.empty()) {
    const size_t per_batch = p.alibi_slopes.size() == size_t(sz.heads) ? 0 : size_t(sz.heads);
    const double slope = p.alibi_slopes[size_t(b) * per_batch + size_t(h)];
    score -= slope * double(std::abs(i + naive_offset(p) - j));
  }
  return score;
}

// Probabilities of query row i of (b, h) over all keys (0 where masked); empty when no key is
// visible. Also returns the row's LSE.
Vec naive_probabilities(const Problem& p, const Inputs& in, int64_t b, int64_t h, int64_t i,
                        double* lse) {
  const cuflash::AttentionShape& sz = p.shape;
  Vec scores(sz.seq_k, -kInf);
  double max = -kInf;
  for (int64_t j = 0; j < sz.seq_k; ++j) {
    if (!naive_visible(p, i, j)) continue;
    scores[j] = naive_score(p, in, b, h, i, j);
    max = std::max(max, scores[j]);
  }
  if (max == -kInf) {
    *lse = kInf;
    return {};
  }
  double sum = 0.0;
  for (double s : scores) sum += std::exp(s - max);
  for (double& s : scores) s = std::exp(s - max) / sum;
  *lse = max + std::log(sum);
  return scores;
}

ref::ForwardResult naive_forward(const Problem& p, const Inputs& in) {
  const cuflash::AttentionShape& sz = p.shape;
  ref::ForwardResult r{Vec(sz.q_elements(), 0.0), Vec(sz.lse_elements(), 0.0)};
  for (int64_t b = 0; b < sz.batch; ++b) {
    for (int64_t h = 0; h < sz.heads; ++h) {
      const int64_t hkv = h / (sz.heads / sz.heads_kv);
      for (int64_t i = 0; i < sz.seq_q; ++i) {
        double* lse = &r.lse[(b * sz.heads + h) * sz.seq_q + i];
        const Vec probs = naive_probabilities(p, in, b, h, i, lse);
        for (size_t j = 0; j < probs.size(); ++j) {
          for (int64_t d = 0; d < sz.head_dim; ++d) {
            r.out[at(b, h, i, sz.heads, sz.seq_q, sz.head_dim) + d] +=
                probs[j] * in.v[at(b, hkv, int64_t(j), sz.heads_kv, sz.seq_k, sz.head_dim) + d];
          }
        }
      }
    }
  }
  return r;
}

ref::Gradients naive_backward(const Problem& p, const Inputs& in) {
  const cuflash::AttentionShape& sz = p.shape;
  const double scale = p.scale == 0.0 ? 1.0 / std::sqrt(double(sz.head_dim)) : p.scale;
  ref::Gradients g{Vec(sz.q_elements(), 0.0), Vec(sz.kv_elements(), 0.0),
                   Vec(sz.kv_elements(), 0.0)};
  const int64_t dim = sz.head_dim;
  for (int64_t b = 0; b < sz.batch; ++b) {
    for (int64_t h = 0; h < sz.heads; ++h) {
      const int64_t hkv = h / (sz.heads / sz.heads_kv);
      for (int64_t i = 0; i < sz.seq_q; ++i) {
        double lse = 0.0;
        const Vec probs = naive_probabilities(p, in, b, h, i, &lse);
        const int64_t qi = at(b, h, i, sz.heads, sz.seq_q, dim);
        Vec dprobs(probs.size(), 0.0);
        double row_dot = 0.0;  // sum_j P_ij dP_ij, equal to dot(dO_i, O_i)
        for (size_t j = 0; j < probs.size(); ++j) {
          const int64_t kj = at(b, hkv, int64_t(j), sz.heads_kv, sz.seq_k, dim);
          for (int64_t d = 0; d < dim; ++d) dprobs[j] += in.dout[qi + d] * in.v[kj + d];
          row_dot += probs[j] * dprobs[j];
        }
        for (size_t j = 0; j < probs.size(); ++j) {
          const int64_t kj = at(b, hkv, int64_t(j), sz.heads_kv, sz.seq_k, dim);
          double softcap_slope = 1.0;
          naive_score(p, in, b, h, i, int64_t(j), &softcap_slope);
          const double dscore = probs[j] * (dprobs[j] - row_dot) * softcap_slope;
          for (int64_t d = 0; d < dim; ++d) {
            g.dq[qi + d] += scale * dscore * in.k[kj + d];
            g.dk[kj + d] += scale * dscore * in.q[qi + d];
            g.dv[kj + d] += probs[j] * in.dout[qi + d];
          }
        }
      }
    }
  }
  return g;
}

void check_matches_naive(const Problem& p, const Inputs& in, double tolerance) {
  INFO(describe(p));
  const ref::ForwardResult fwd = ref::forward(p, in.q, in.k, in.v);
  const ref::ForwardResult expected = naive_forward(p, in);
  CHECK(max_difference(fwd.out, expected.out) < tolerance);
  CHECK(max_difference(fwd.lse, expected.lse) < tolerance);
  const ref::Gradients grads = ref::backward(p, in.q, in.k, in.v, fwd, in.dout);
  const ref::Gradients expected_grads = naive_backward(p, in);
  CHECK(max_difference(grads.dq, expected_grads.dq) < tolerance);
  CHECK(max_difference(grads.dk, expected_grads.dk) < tolerance);
  CHECK(max_difference(grads.dv, expected_grads.dv) < tolerance);
}

const Mask kMasks[] = {Mask::none, Mask::causal_bottom_right, Mask::causal_top_left};

// Rounds every value to the dtype, as a caller does before handing inputs to both the
// reference and the baseline.
Vec rounded_to(DType dtype, const Vec& values) {
  Vec rounded(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const float x = static_cast<float>(values[i]);
    rounded[i] = dtype == DType::fp16   ? cuflash::numeric::round_to_half(x)
                 : dtype == DType::bf16 ? cuflash::numeric::round_to_bf16(x)
                                        : x;
  }
  return rounded;
}

// L = sum(O * dO) for a fixed random dO, so dL/dX is what backward() returns for that dO:
// checks every element of dQ, dK, dV against central finite differences of L.
void check_finite_differences(const Problem& p, uint64_t seed) {
  INFO(describe(p));
  Inputs in = random_inputs(p, seed);
  const ref::ForwardResult fwd = ref::forward(p, in.q, in.k, in.v);
  const ref::Gradients grads = ref::backward(p, in.q, in.k, in.v, fwd, in.dout);
  const auto loss = [&] {
    const Vec out = ref::forward(p, in.q, in.k, in.v).out;
    double sum = 0.0;
    for (size_t i = 0; i < out.size(); ++i) sum += out[i] * in.dout[i];
    return sum;
  };
  const auto check_gradient = [&](Vec& input, const Vec& analytic, const char* name) {
    INFO(name);
    constexpr double kStep = 1e-5;
    for (size_t i = 0; i < input.size(); ++i) {
      const double saved = input[i];
      input[i] = saved + kStep;
      const double above = loss();
      input[i] = saved - kStep;
      const double below = loss();
      input[i] = saved;
      const double numeric = (above - below) / (2 * kStep);
      INFO("element " << i << ": numeric " << numeric << ", analytic " << analytic[i]);
      CHECK(std::abs(numeric - analytic[i]) < 1e-7 * (1.0 + std::abs(analytic[i])));
    }
  };
  check_gradient(in.q, grads.dq, "dq");
  check_gradient(in.k, grads.dk, "dk");
  check_gradient(in.v, grads.dv, "dv");
}

}  // namespace

// --- Reference ---------------------------------------------------------------------------------

TEST_CASE("reference matches naive loops on tiny shapes", "[reference]") {
  // {batch, heads, heads_kv, seq_q, seq_k, head_dim}: Sq < Sk, Sq > Sk, GQA, D = 1, odd D.
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 1, 1, 1, 1, 1}, {2, 2, 1, 3, 5, 1}, {1, 3, 3, 5, 3, 7},
      {1, 4, 2, 4, 4, 5}, {2, 2, 2, 7, 2, 3}, {1, 6, 3, 2, 9, 4}};
  uint64_t seed = 100;
  for (const auto& s : shapes) {
    for (const Mask mask : kMasks) {
      const Problem p = make_problem(s[0], s[1], s[2], s[3], s[4], s[5], mask);
      check_matches_naive(p, random_inputs(p, seed += 10), 1e-12);
    }
  }
}

TEST_CASE("reference matches naive loops across several query and key blocks", "[reference]") {
  // More than 256 queries and keys, so rows and keys span several tiles, with empty rows in the
  // second shape (bottom-right causal, Sq > Sk).
  for (const Mask mask : kMasks) {
    const Problem wide = make_problem(1, 2, 1, 300, 520, 8, mask);
    check_matches_naive(wide, random_inputs(wide, 7), 1e-10);
    const Problem tall = make_problem(1, 1, 1, 520, 300, 8, mask);
    check_matches_naive(tall, random_inputs(tall, 8), 1e-10);
  }
}

TEST_CASE("reference gradients match central finite differences", "[reference]") {
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 2, 1, 3, 4, 3}, {1, 2, 2, 4, 3, 2}, {2, 1, 1, 2, 2, 1}};
  uint64_t seed = 500;
  for (const auto& s : shapes) {
    for (const Mask mask : kMasks) {
      check_finite_differences(make_problem(s[0], s[1], s[2], s[3], s[4], s[5], mask),
                               seed += 10);
    }
  }
}

TEST_CASE("rows that see no key give zeros and +inf, never NaN", "[reference]") {
  // Bottom-right causal with Sq = 5 > Sk = 3: rows 0 and 1 see nothing, rows 2..4 see 1..3 keys.
  const Problem p = make_problem(1, 2, 1, 5, 3, 4, Mask::causal_bottom_right);
  const Inputs in = random_inputs(p, 21);
  const ref::ForwardResult fwd = ref::forward(p, in.q, in.k, in.v);
  const ref::Gradients grads = ref::backward(p, in.q, in.k, in.v, fwd, in.dout);
  CHECK(all_finite(fwd.out));
  CHECK(all_finite(grads.dq));
  CHECK(all_finite(grads.dk));
  CHECK(all_finite(grads.dv));
  for (int64_t h = 0; h < p.shape.heads; ++h) {
    for (int64_t i = 0; i < p.shape.seq_q; ++i) {
      const bool empty = i < 2;
      CHECK((fwd.lse[h * p.shape.seq_q + i] == kInf) == empty);
      for (int64_t d = 0; d < p.shape.head_dim; ++d) {
        const int64_t idx = (h * p.shape.seq_q + i) * p.shape.head_dim + d;
        if (empty) {
          CHECK(fwd.out[idx] == 0.0);
          CHECK(grads.dq[idx] == 0.0);
        } else {
          CHECK(fwd.out[idx] != 0.0);
        }
      }
    }
  }

  // The empty rows add nothing to dK and dV: dropping them (leaving Sq = Sk = 3, where both
  // causal forms agree) gives the same dK and dV.
  const Problem kept = make_problem(1, 2, 1, 3, 3, 4, Mask::causal_top_left);
  Inputs kept_in{{}, in.k, in.v, {}};
  for (int64_t h = 0; h < p.shape.heads; ++h) {
    const auto first = (h * p.shape.seq_q + 2) * p.shape.head_dim;
    const auto last = (h * p.shape.seq_q + p.shape.seq_q) * p.shape.head_dim;
    kept_in.q.insert(kept_in.q.end(), in.q.begin() + first, in.q.begin() + last);
    kept_in.dout.insert(kept_in.dout.end(), in.dout.begin() + first, in.dout.begin() + last);
  }
  const ref::ForwardResult kept_fwd = ref::forward(kept, kept_in.q, kept_in.k, kept_in.v);
  const ref::Gradients kept_grads =
      ref::backward(kept, kept_in.q, kept_in.k, kept_in.v, kept_fwd, kept_in.dout);
  CHECK(max_difference(grads.dk, kept_grads.dk) < 1e-14);
  CHECK(max_difference(grads.dv, kept_grads.dv) < 1e-14);

  SECTION("top-left causal with Sq > Sk leaves no row empty") {
    Problem top_left = p;
    top_left.mask = Mask::causal_top_left;
    CHECK(all_finite(ref::forward(top_left, in.q, in.k, in.v).lse));
  }
  SECTION("a whole block of query rows that sees no key") {
    // Sq - Sk = 280 empty rows: the first 256-row block has no visible key at all.
    const Problem tall = make_problem(1, 2, 1, 300, 20, 2, Mask::causal_bottom_right);
    check_matches_naive(tall, random_inputs(tall, 22), 1e-12);
    const Inputs t = random_inputs(tall, 23);
    const ref::ForwardResult tall_fwd = ref::forward(tall, t.q, t.k, t.v);
    CHECK(tall_fwd.lse[279] == kInf);
    CHECK(std::isfinite(tall_fwd.lse[280]));
  }
}

TEST_CASE("one query or one key", "[reference]") {
  for (const Mask mask : kMasks) {
    INFO(cuflash::to_string(mask));
    // Sq = Sk = 1: O = V, LSE = the single score, dQ = dK = 0, dV = dO.
    const Problem single = make_problem(1, 1, 1, 1, 1, 3, mask);
    const Inputs in = random_inputs(single, 31);
    const ref::ForwardResult fwd = ref::forward(single, in.q, in.k, in.v);
    double dot = 0.0;
    for (int d = 0; d < 3; ++d) dot += in.q[d] * in.k[d];
    CHECK(max_difference(fwd.out, in.v) == 0.0);
    CHECK(fwd.lse[0] == Approx(dot / std::sqrt(3.0)).epsilon(1e-14));
    const ref::Gradients grads = ref::backward(single, in.q, in.k, in.v, fwd, in.dout);
    CHECK(max_difference(grads.dq, Vec(3, 0.0)) < 1e-15);
    CHECK(max_difference(grads.dk, Vec(3, 0.0)) < 1e-15);
    CHECK(max_difference(grads.dv, in.dout) < 1e-15);
  }
  // Sq = 1 against 4 keys: bottom-right sees every key, top-left only the first.
  const Problem bottom_right = make_problem(1, 1, 1, 1, 4, 2, Mask::causal_bottom_right);
  Problem unmasked = bottom_right;
  unmasked.mask = Mask::none;
  Problem top_left = bottom_right;
  top_left.mask = Mask::causal_top_left;
  const Inputs in = random_inputs(bottom_right, 32);
  CHECK(max_difference(ref::forward(bottom_right, in.q, in.k, in.v).out,
                       ref::forward(unmasked, in.q, in.k, in.v).out) == 0.0);
  const Vec first_value(in.v.begin(), in.v.begin() + 2);
  CHECK(max_difference(ref::forward(top_left, in.q, in.k, in.v).out, first_value) == 0.0);
}

TEST_CASE("grouped-query attention equals repeated key/value heads", "[reference]") {
  for (const Mask mask : kMasks) {
    INFO(cuflash::to_string(mask));
    const Problem grouped = make_problem(2, 6, 2, 5, 7, 4, mask);
    Problem repeated = grouped;
    repeated.shape.heads_kv = grouped.shape.heads;
    const Inputs in = random_inputs(grouped, 41);
    const int64_t group = grouped.shape.heads / grouped.shape.heads_kv;
    const int64_t head_size = grouped.shape.seq_k * grouped.shape.head_dim;
    Inputs rep{in.q, {}, {}, in.dout};
    for (int64_t b = 0; b < grouped.shape.batch; ++b) {
      for (int64_t h = 0; h < grouped.shape.heads; ++h) {
        const int64_t first = (b * grouped.shape.heads_kv + h / group) * head_size;
        rep.k.insert(rep.k.end(), in.k.begin() + first, in.k.begin() + first + head_size);
        rep.v.insert(rep.v.end(), in.v.begin() + first, in.v.begin() + first + head_size);
      }
    }
    const ref::ForwardResult fwd = ref::forward(grouped, in.q, in.k, in.v);
    const ref::ForwardResult rep_fwd = ref::forward(repeated, rep.q, rep.k, rep.v);
    CHECK(max_difference(fwd.out, rep_fwd.out) < 1e-14);
    CHECK(max_difference(fwd.lse, rep_fwd.lse) < 1e-14);
    const ref::Gradients grads = ref::backward(grouped, in.q, in.k, in.v, fwd, in.dout);
    const ref::Gradients rep_grads =
        ref::backward(repeated, rep.q, rep.k, rep.v, rep_fwd, rep.dout);
    CHECK(max_difference(grads.dq, rep_grads.dq) < 1e-14);
    // dK, dV of a shared head are the sums over the heads of its group.
    Vec dk_sums(in.k.size(), 0.0), dv_sums(in.v.size(), 0.0);
    for (int64_t b = 0; b < grouped.shape.batch; ++b) {
      for (int64_t h = 0; h < grouped.shape.heads; ++h) {
        const int64_t to = (b * grouped.shape.heads_kv + h / group) * head_size;
        const int64_t from = (b * grouped.shape.heads + h) * head_size;
        for (int64_t e = 0; e < head_size; ++e) {
          dk_sums[to + e] += rep_grads.dk[from + e];
          dv_sums[to + e] += rep_grads.dv[from + e];
        }
      }
    }
    CHECK(max_difference(grads.dk, dk_sums) < 1e-13);
    CHECK(max_difference(grads.dv, dv_sums) < 1e-13);
  }
}

TEST_CASE("softmax scale", "[reference]") {
  const Problem defaulted = make_problem(1, 2, 1, 4, 6, 5, Mask::causal_bottom_right);
  Problem explicit_scale = defaulted;
  explicit_scale.scale = 1.0 / std::sqrt(5.0);
  CHECK(defaulted.effective_scale() == explicit_scale.scale);
  const Inputs in = random_inputs(defaulted, 51);
  CHECK(max_difference(ref::forward(defaulted, in.q, in.k, in.v).out,
                       ref::forward(explicit_scale, in.q, in.k, in.v).out) == 0.0);

  // Scale s on Q equals scale 1 on s * Q; then dK agrees and dQ differs by the factor s.
  constexpr double s = 0.37;
  Problem scaled = defaulted;
  scaled.scale = s;
  Problem unit = defaulted;
  unit.scale = 1.0;
  Vec scaled_q = in.q;
  for (double& x : scaled_q) x *= s;
  const ref::ForwardResult a = ref::forward(scaled, in.q, in.k, in.v);
  const ref::ForwardResult b = ref::forward(unit, scaled_q, in.k, in.v);
  CHECK(max_difference(a.out, b.out) < 1e-14);
  CHECK(max_difference(a.lse, b.lse) < 1e-14);
  const ref::Gradients ga = ref::backward(scaled, in.q, in.k, in.v, a, in.dout);
  const ref::Gradients gb = ref::backward(unit, scaled_q, in.k, in.v, b, in.dout);
  Vec gb_dq_scaled = gb.dq;
  for (double& x : gb_dq_scaled) x *= s;
  CHECK(max_difference(ga.dq, gb_dq_scaled) < 1e-13);
  CHECK(max_difference(ga.dk, gb.dk) < 1e-13);
  CHECK(max_difference(ga.dv, gb.dv) < 1e-13);
}

TEST_CASE("the reference ignores the problem's dtype and layout", "[reference]") {
  const Problem p = make_problem(1, 4, 2, 9, 7, 8, Mask::causal_bottom_right);
  Problem other = in_dtype(p, DType::bf16);
  other.layout = cuflash::Layout::bshd;
  const Inputs in = random_inputs(p, 55);
  const ref::ForwardResult a = ref::forward(p, in.q, in.k, in.v);
  const ref::ForwardResult b = ref::forward(other, in.q, in.k, in.v);
  CHECK(a.out == b.out);
  CHECK(a.lse == b.lse);
  const ref::Gradients ga = ref::backward(p, in.q, in.k, in.v, a, in.dout);
  const ref::Gradients gb = ref::backward(other, in.q, in.k, in.v, b, in.dout);
  CHECK(ga.dq == gb.dq);
  CHECK(ga.dk == gb.dk);
  CHECK(ga.dv == gb.dv);
}

TEST_CASE("a progress callback sees every block, changes no result, and can stop the work",
          "[reference]") {
  // seq_k 3000: query blocks of 349 rows, so several blocks per (batch, head).
  const Problem p = make_problem(2, 2, 1, 700, 3000, 4, Mask::causal_bottom_right);
  const Inputs in = random_inputs(p, 71);
  std::atomic<int64_t> calls{0}, last_total{0}, max_done{0};
  const ref::ProgressCallback count = [&](int64_t done, int64_t total) {
    ++calls;
    last_total = total;
    int64_t seen = max_done.load();
    while (done > seen && !max_done.compare_exchange_weak(seen, done)) {
    }
    return true;
  };
  const ref::ForwardResult plain = ref::forward(p, in.q, in.k, in.v);
  const ref::ForwardResult watched = ref::forward(p, in.q, in.k, in.v, count);
  CHECK(watched.out == plain.out);
  CHECK(watched.lse == plain.lse);
  CHECK(last_total.load() == 2 * 2 * 3);  // (batch, head) pairs x query blocks of 349 rows
  CHECK(calls.load() == last_total.load() + 1);  // done = 0 first, then one call a block
  CHECK(max_done.load() == last_total.load());

  calls = 0;
  max_done = 0;
  const ref::Gradients g_plain = ref::backward(p, in.q, in.k, in.v, plain, in.dout);
  const ref::Gradients g_watched = ref::backward(p, in.q, in.k, in.v, plain, in.dout, count);
  CHECK(g_watched.dq == g_plain.dq);
  CHECK(g_watched.dk == g_plain.dk);
  CHECK(g_watched.dv == g_plain.dv);
  CHECK(last_total.load() == 2 * 2 * 3 + 2 * 1 * 12);  // query blocks + blocks of 256 keys
  CHECK(max_done.load() == last_total.load());

  // Stopped after two blocks of 8 * 8 * 3: the blocks already running may finish, no other
  // starts (so far fewer than all run, with any number of threads below 100).
  const Problem many = make_problem(8, 8, 1, 700, 3000, 4, Mask::none);
  const Inputs many_in = random_inputs(many, 72);
  std::atomic<int64_t> finished{0};
  const ref::ProgressCallback stop = [&](int64_t done, int64_t) {
    if (done > 0) ++finished;
    return done < 2;
  };
  CHECK_THROWS_AS(ref::forward(many, many_in.q, many_in.k, many_in.v, stop), ref::Cancelled);
  CHECK(finished.load() < 2 + 100);
  CHECK_THROWS_AS(ref::forward(p, in.q, in.k, in.v, [](int64_t, int64_t) { return false; }),
                  ref::Cancelled);
  CHECK_THROWS_AS(
      ref::backward(p, in.q, in.k, in.v, plain, in.dout, [](int64_t, int64_t) { return false; }),
      ref::Cancelled);
}

TEST_CASE("scratch_bytes grows with seq_k and with the backward pass", "[reference]") {
  const Problem small = make_problem(1, 1, 1, 8, 8, 8, Mask::none);
  const Problem long_keys = make_problem(1, 1, 1, 8, 100000000, 1, Mask::none);
  CHECK(ref::scratch_bytes(small, false) > 0);
  CHECK(ref::scratch_bytes(small, true) >= ref::scratch_bytes(small, false));
  // One row of 10^8 float64 scores per tile: at least 800 MB a thread.
  CHECK(ref::scratch_bytes(long_keys, false) >= int64_t(800000000));
}

TEST_CASE("invalid arguments name the field", "[reference]") {
  using Catch::Matchers::Contains;
  const Problem p = make_problem(1, 2, 1, 3, 4, 2, Mask::none);
  const Inputs in = random_inputs(p, 61);

  Problem bad_heads = make_problem(1, 6, 4, 3, 4, 2, Mask::none);
  CHECK_THROWS_AS(ref::validate(bad_heads), std::invalid_argument);
  CHECK_THROWS_WITH(ref::validate(bad_heads),
                    Contains("heads (6) must be a multiple of heads_kv (4)"));
  Problem no_keys = p;
  no_keys.shape.seq_k = 0;
  CHECK_THROWS_WITH(ref::forward(no_keys, in.q, {}, {}), Contains("seq_k (0) must be positive"));
  Problem nan_scale = p;
  nan_scale.scale = kNaN;
  CHECK_THROWS_WITH(ref::forward(nan_scale, in.q, in.k, in.v), Contains("scale"));

  const Vec short_q(10, 1.0);
  CHECK_THROWS_AS(ref::forward(p, short_q, in.k, in.v), std::invalid_argument);
  CHECK_THROWS_WITH(ref::forward(p, short_q, in.k, in.v),
                    Contains("q has 10 elements, expected 12 for [B,H,Sq,D]=[1,2,3,2]"));
  CHECK_THROWS_WITH(ref::forward(p, in.q, in.k, Vec(7, 1.0)),
                    Contains("v has 7 elements, expected 8 for [B,Hkv,Sk,D]=[1,1,4,2]"));
  const ref::ForwardResult fwd = ref::forward(p, in.q, in.k, in.v);
  CHECK_THROWS_WITH(ref::backward(p, in.q, in.k, in.v, fwd, Vec(3, 1.0)),
                    Contains("dout has 3 elements"));
  ref::ForwardResult short_lse = fwd;
  short_lse.lse.pop_back();
  CHECK_THROWS_WITH(ref::backward(p, in.q, in.k, in.v, short_lse, in.dout),
                    Contains("lse has 5 elements, expected 6 for [B,H,Sq]=[1,2,3]"));
  CHECK_THROWS_WITH(ref::baseline::forward(in_dtype(bad_heads, DType::fp16), in.q, in.k, in.v),
                    Contains("heads (6) must be a multiple of heads_kv (4)"));
}

TEST_CASE("NaN inputs reach only the outputs that depend on them", "[reference]") {
  const Problem p = make_problem(1, 2, 1, 6, 6, 3, Mask::causal_top_left);
  const int64_t dim = p.shape.head_dim;

  SECTION("NaN in one query row") {
    Inputs in = random_inputs(p, 71);
    const int64_t head = 1, row = 2;
    in.q[(head * p.shape.seq_q + row) * dim + 1] = kNaN;
    const ref::ForwardResult fwd = ref::forward(p, in.q, in.k, in.v);
    const ref::Gradients grads = ref::backward(p, in.q, in.k, in.v, fwd, in.dout);
    for (int64_t h = 0; h < p.shape.heads; ++h) {
      for (int64_t i = 0; i < p.shape.seq_q; ++i) {
        INFO("head " << h << " row " << i);
        const int64_t first = (h * p.shape.seq_q + i) * dim;
        const bool poisoned = h == head && i == row;
        CHECK(row_is(poisoned, fwd.out, first, dim));
        CHECK(std::isnan(fwd.lse[h * p.shape.seq_q + i]) == poisoned);
        CHECK(row_is(poisoned, grads.dq, first, dim));
      }
    }
    // The poisoned row sees keys 0..2 only: their dK/dV are NaN, later keys' stay finite.
    for (int64_t j = 0; j < p.shape.seq_k; ++j) {
      INFO("key " << j);
      CHECK(row_is(j <= row, grads.dk, j * dim, dim));
      CHECK(row_is(j <= row, grads.dv, j * dim, dim));
    }
  }
  SECTION("NaN in one value row reaches only the rows that see it") {
    Inputs in = random_inputs(p, 72);
    const int64_t key = 4;
    in.v[key * dim] = kNaN;
    const ref::ForwardResult fwd = ref::forward(p, in.q, in.k, in.v);
    for (int64_t h = 0; h < p.shape.heads; ++h) {
      for (int64_t i = 0; i < p.shape.seq_q; ++i) {
        INFO("head " << h << " row " << i);
        const int64_t first = (h * p.shape.seq_q + i) * dim;
        CHECK(std::isnan(fwd.out[first]) == (i >= key));
        CHECK(std::isfinite(fwd.lse[h * p.shape.seq_q + i]));
      }
    }
  }
}

// --- compare() and the pass rule ------------------------------------------------------------

// --- Variants: window, softcap, ALiBi ------------------------------------------------------------

namespace {

const cuflash::Window kWindows[] = {{0, 0}, {1, 0}, {2, 1}, {-1, 1}, {1, -1}, {100, 100}};

Problem with_variants(Problem p, cuflash::Window window, double softcap, bool alibi) {
  p.window = window;
  p.softcap = softcap;
  if (alibi) p.alibi_slopes = cuflash::alibi_default_slopes(p.shape.heads);
  return p;
}

std::string describe_variants(const Problem& p) {
  return describe(p) + " window=" + std::to_string(p.window.left) + "," +
         std::to_string(p.window.right) + " softcap=" + std::to_string(p.softcap) +
         " alibi=" + std::to_string(p.alibi_slopes.size());
}

}  // namespace

TEST_CASE("windows, softcap and ALiBi match naive loops", "[reference][variants]") {
  // {batch, heads, heads_kv, seq_q, seq_k, head_dim}: square, Sq < Sk, Sq > Sk with GQA.
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 2, 1, 5, 5, 3}, {2, 2, 2, 3, 7, 2}, {1, 4, 2, 7, 3, 4}};
  uint64_t seed = 900;
  for (const auto& s : shapes) {
    for (const Mask mask : kMasks) {
      for (const cuflash::Window& window : kWindows) {
        for (const double softcap : {0.0, 0.7}) {
          for (const bool alibi : {false, true}) {
            const Problem p = with_variants(make_problem(s[0], s[1], s[2], s[3], s[4], s[5], mask),
                                            window, softcap, alibi);
            INFO(describe_variants(p));
            check_matches_naive(p, random_inputs(p, seed += 10), 1e-12);
          }
        }
      }
    }
  }
}

TEST_CASE("variants across several query and key blocks, per-batch slopes",
          "[reference][variants]") {
  Problem p = with_variants(make_problem(2, 3, 1, 300, 520, 8, Mask::none), {37, 5}, 2.0, false);
  p.alibi_slopes = {0.5f, 0.25f, 0.125f, 0.01f, 0.02f, 0.03f};  // [batch, heads]
  check_matches_naive(p, random_inputs(p, 11), 1e-10);
  const Problem causal =
      with_variants(make_problem(1, 2, 2, 520, 300, 8, Mask::causal_bottom_right), {260, -1},
                    0.0, true);
  check_matches_naive(causal, random_inputs(causal, 12), 1e-10);
}

TEST_CASE("a window equals the mask built by hand", "[reference][variants]") {
  // Sq = 4, Sk = 6, bottom-right (offset 2), window 1,0: row i sees keys i+1 .. i+2.
  Problem p = make_problem(1, 1, 1, 4, 6, 2, Mask::none);
  p.window = {1, 0};
  const Inputs in = random_inputs(p, 31);
  const ref::ForwardResult fwd = ref::forward(p, in.q, in.k, in.v);
  for (int64_t i = 0; i < 4; ++i) {
    // Softmax over the two visible keys only.
    double scores[2];
    for (int64_t n = 0; n < 2; ++n) {
      const int64_t j = i + 1 + n;
      scores[n] = (in.q[2 * i] * in.k[2 * j] + in.q[2 * i + 1] * in.k[2 * j + 1]) / std::sqrt(2.0);
    }
    const double max = std::max(scores[0], scores[1]);
    const double lse = max + std::log(std::exp(scores[0] - max) + std::exp(scores[1] - max));
    CHECK(std::abs(fwd.lse[i] - lse) < 1e-12);
    for (int64_t d = 0; d < 2; ++d) {
      const double o = std::exp(scores[0] - lse) * in.v[2 * (i + 1) + d] +
                       std::exp(scores[1] - lse) * in.v[2 * (i + 2) + d];
      CHECK(std::abs(fwd.out[2 * i + d] - o) < 1e-12);
    }
  }
  // A window wider than both sequences changes nothing.
  Problem wide = p;
  wide.window = {1000, 1000};
  Problem none = p;
  none.window = {};
  const ref::ForwardResult wide_fwd = ref::forward(wide, in.q, in.k, in.v);
  const ref::ForwardResult none_fwd = ref::forward(none, in.q, in.k, in.v);
  CHECK(max_difference(wide_fwd.out, none_fwd.out) == 0.0);
  CHECK(max_difference(wide_fwd.lse, none_fwd.lse) == 0.0);
}

TEST_CASE("rows outside every window see nothing: O = 0, LSE = +inf", "[reference][variants]") {
  // Sq = 6 > Sk = 3 bottom-right (offset -3) with window 0,0: rows 0..2 see nothing.
  Problem p = make_problem(1, 1, 1, 6, 3, 2, Mask::none);
  p.window = {0, 0};
  const Inputs in = random_inputs(p, 41);
  const ref::ForwardResult fwd = ref::forward(p, in.q, in.k, in.v);
  const ref::Gradients grads = ref::backward(p, in.q, in.k, in.v, fwd, in.dout);
  for (int64_t i = 0; i < 3; ++i) {
    CHECK(fwd.lse[i] == kInf);
    CHECK(fwd.out[2 * i] == 0.0);
    CHECK(grads.dq[2 * i] == 0.0);
  }
  CHECK(std::isfinite(fwd.lse[3]));
  CHECK(all_finite(grads.dk));
}

TEST_CASE("a huge softcap changes nothing measurable", "[reference][variants]") {
  const Problem plain = make_problem(1, 2, 1, 9, 11, 4, Mask::causal_bottom_right);
  Problem capped = plain;
  capped.softcap = 1e7;
  const Inputs in = random_inputs(plain, 51);
  const ref::ForwardResult a = ref::forward(plain, in.q, in.k, in.v);
  const ref::ForwardResult b = ref::forward(capped, in.q, in.k, in.v);
  CHECK(max_difference(a.out, b.out) < 1e-12);
  const ref::Gradients ga = ref::backward(plain, in.q, in.k, in.v, a, in.dout);
  const ref::Gradients gb = ref::backward(capped, in.q, in.k, in.v, b, in.dout);
  CHECK(max_difference(ga.dq, gb.dq) < 1e-12);
  CHECK(max_difference(ga.dk, gb.dk) < 1e-12);
}

TEST_CASE("ALiBi slopes are the paper's", "[reference][variants]") {
  const std::vector<float> eight = cuflash::alibi_default_slopes(8);
  REQUIRE(eight.size() == 8);
  for (int h = 0; h < 8; ++h) CHECK(eight[size_t(h)] == std::exp2f(-float(h + 1)));
  // 6 heads: those of 4 (2^-2, 2^-4, 2^-6, 2^-8), then every other of 8's (2^-1, 2^-3).
  const std::vector<float> six = cuflash::alibi_default_slopes(6);
  const std::vector<float> expected{0.25f, 0.0625f, 0.015625f, 0.00390625f, 0.5f, 0.125f};
  CHECK(six == expected);
  CHECK(cuflash::alibi_default_slopes(1) == std::vector<float>{0.00390625f});
  CHECK(cuflash::alibi_default_slopes(12).size() == 12);
}

TEST_CASE("gradients through window, softcap and ALiBi match finite differences",
          "[reference][variants]") {
  uint64_t seed = 1500;
  for (const Mask mask : kMasks) {
    for (const cuflash::Window& window : {cuflash::Window{1, 0}, cuflash::Window{0, 1}}) {
      check_finite_differences(
          with_variants(make_problem(1, 2, 1, 4, 5, 3, mask), window, 0.8, true), seed += 10);
    }
  }
}

TEST_CASE("invalid variants name the field", "[reference][variants]") {
  Problem p = make_problem(2, 4, 2, 3, 3, 2, Mask::none);
  const auto message = [](const Problem& bad) {
    try {
      ref::validate(bad);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  Problem bad = p;
  bad.window = {-2, 0};
  CHECK(message(bad).find("window") != std::string::npos);
  bad = p;
  bad.softcap = -1;
  CHECK(message(bad).find("softcap") != std::string::npos);
  bad.softcap = std::numeric_limits<double>::infinity();
  CHECK(message(bad).find("softcap") != std::string::npos);
  bad = p;
  bad.alibi_slopes = {1.f, 2.f, 3.f};
  CHECK(message(bad).find("alibi_slopes") != std::string::npos);
  bad.alibi_slopes = {1.f, 2.f, 3.f, std::numeric_limits<float>::quiet_NaN()};
  CHECK(message(bad).find("finite") != std::string::npos);
  bad.alibi_slopes = std::vector<float>(8, 0.5f);  // [batch, heads]
  CHECK(message(bad).empty());
}

TEST_CASE("the baseline follows the variants", "[baseline][variants]") {
  const Problem p = with_variants(make_problem(1, 2, 1, 40, 50, 8, Mask::causal_top_left),
                                  {7, -1}, 1.5, true);
  const Inputs in = random_inputs(p, 61);
  const Vec q = rounded_to(DType::fp32, in.q), k = rounded_to(DType::fp32, in.k),
            v = rounded_to(DType::fp32, in.v);
  const Vec dout = rounded_to(DType::fp32, in.dout);
  const ref::ForwardResult exact = ref::forward(p, q, k, v);
  const ref::ForwardResult low = ref::baseline::forward(in_dtype(p, DType::fp32), q, k, v);
  CHECK(max_difference(exact.out, low.out) < 1e-5);
  CHECK(max_difference(exact.lse, low.lse) < 1e-5);
  // The backward too: the GPU tests of the variants' gradients take their tolerance from it.
  const ref::Gradients exact_grads = ref::backward(p, q, k, v, exact, dout);
  const ref::Gradients low_grads =
      ref::baseline::backward(in_dtype(p, DType::fp32), q, k, v, low, dout);
  CHECK(max_difference(exact_grads.dq, low_grads.dq) < 1e-5);
  CHECK(max_difference(exact_grads.dk, low_grads.dk) < 1e-5);
  CHECK(max_difference(exact_grads.dv, low_grads.dv) < 1e-5);
}

TEST_CASE("compare statistics", "[compare]") {
  const Vec ref_values = {1.0, -2.0, 2.0, 0.5};
  SECTION("identical") {
    const ref::ErrorStats s = ref::compare(ref_values, ref_values);
    CHECK(s.max_abs == 0.0);
    CHECK(s.rel_l2 == 0.0);
    CHECK(s.nonfinite == 0);
    CHECK(s.count == 4);
  }
  SECTION("errors") {
    const ref::ErrorStats s = ref::compare({1.0, -2.0, 2.3, 0.1}, ref_values);
    CHECK(s.max_abs == Approx(0.4));
    // ||(0, 0, 0.3, -0.4)|| = 0.5, ||ref|| = sqrt(1 + 4 + 4 + 0.25) = sqrt(9.25)
    CHECK(s.rel_l2 == Approx(0.5 / std::sqrt(9.25)));
    CHECK(s.nonfinite == 0);
  }
  SECTION("NaN in got is counted and fails") {
    const ref::ErrorStats s = ref::compare({1.0, kNaN, 2.0, 0.5}, ref_values);
    CHECK(s.nonfinite == 1);
    CHECK(s.max_abs == 0.0);
    CHECK_FALSE(ref::within_tolerance(s, s, 1.0));
  }
  SECTION("NaN in both never matches") {
    CHECK(ref::compare({kNaN}, {kNaN}).nonfinite == 1);
  }
  SECTION("matching infinities are equal, mismatched ones are not") {
    const ref::ErrorStats same = ref::compare({kInf, 1.0, -kInf}, {kInf, 1.5, -kInf});
    CHECK(same.nonfinite == 0);
    CHECK(same.max_abs == 0.5);
    CHECK(same.rel_l2 == Approx(0.5 / 1.5));
    CHECK(ref::compare({kInf}, {-kInf}).nonfinite == 1);
    CHECK(ref::compare({2.0}, {kInf}).nonfinite == 1);
    CHECK(ref::compare({kInf}, {2.0}).nonfinite == 1);
  }
  SECTION("an all-zero reference gives the absolute norm") {
    const ref::ErrorStats s = ref::compare({3.0, 4.0}, {0.0, 0.0});
    CHECK(s.rel_l2 == Approx(5.0));
    CHECK(ref::compare({0.0, 0.0}, {0.0, 0.0}).rel_l2 == 0.0);
  }
  SECTION("sizes must agree") {
    CHECK_THROWS_WITH(ref::compare({1.0}, ref_values),
                      Catch::Matchers::Contains("got has 1 elements, ref has 4"));
  }
}

TEST_CASE("pass rule and floors", "[compare]") {
  ref::ErrorStats baseline;
  baseline.max_abs = 1e-3;
  ref::ErrorStats ours;
  ours.max_abs = 2e-3 + 1e-4;
  CHECK(ref::within_tolerance(ours, baseline, 1e-4));
  ours.max_abs = 2.2e-3;
  CHECK_FALSE(ref::within_tolerance(ours, baseline, 1e-4));
  ours.max_abs = 0.0;
  ours.nonfinite = 1;
  CHECK_FALSE(ref::within_tolerance(ours, baseline, 1e-4));

  // The floor is relative to max(1, largest |ref|): larger values earn a larger floor, smaller
  // ones never a smaller floor than the absolute one.
  ours.nonfinite = 0;
  ours.ref_max_abs = 100.0;
  ours.max_abs = 2e-3 + 5e-3;
  CHECK(ref::within_tolerance(ours, baseline, 1e-4));
  CHECK(ref::tolerance(ours, baseline, 1e-4) == Approx(2e-3 + 1e-2));
  ours.ref_max_abs = 0.5;
  ours.max_abs = 2e-3 + 1.5e-4;
  CHECK_FALSE(ref::within_tolerance(ours, baseline, 1e-4));

  static_assert(ref::default_floor(DType::fp32) > 0.0, "usable in constant expressions");
  CHECK(ref::default_floor(DType::bf16) > ref::default_floor(DType::fp16));
  CHECK(ref::default_floor(DType::fp16) > ref::default_floor(DType::fp32));
  // Below one rounding step at 1 of each dtype.
  CHECK(ref::default_floor(DType::fp16) < std::ldexp(1.0, -10));
  CHECK(ref::default_floor(DType::bf16) < std::ldexp(1.0, -7));
}

// --- Low-precision baseline --------------------------------------------------------------------

TEST_CASE("baseline error is small, nonzero and grows as the dtype narrows", "[baseline]") {
  const Problem p = make_problem(1, 4, 2, 64, 80, 32, Mask::causal_bottom_right);
  const Inputs raw = random_inputs(p, 81);
  struct Errors {
    double out, lse, dq, dk, dv;
  };
  const auto errors_for = [&](DType dtype) {
    const Inputs in{rounded_to(dtype, raw.q), rounded_to(dtype, raw.k), rounded_to(dtype, raw.v),
                    rounded_to(dtype, raw.dout)};
    const ref::ForwardResult exact = ref::forward(p, in.q, in.k, in.v);
    const ref::Gradients exact_grads = ref::backward(p, in.q, in.k, in.v, exact, in.dout);
    const ref::ForwardResult low = ref::baseline::forward(in_dtype(p, dtype), in.q, in.k, in.v);
    const ref::Gradients low_grads =
        ref::baseline::backward(in_dtype(p, dtype), in.q, in.k, in.v, low, in.dout);
    const ref::ErrorStats out = ref::compare(low.out, exact.out);
    const ref::ErrorStats dq = ref::compare(low_grads.dq, exact_grads.dq);
    CHECK(out.nonfinite == 0);
    CHECK(dq.nonfinite == 0);
    return Errors{out.max_abs, ref::compare(low.lse, exact.lse).max_abs, dq.max_abs,
                  ref::compare(low_grads.dk, exact_grads.dk).max_abs,
                  ref::compare(low_grads.dv, exact_grads.dv).max_abs};
  };
  const Errors fp32 = errors_for(DType::fp32);
  const Errors fp16 = errors_for(DType::fp16);
  const Errors bf16 = errors_for(DType::bf16);
  INFO("O max error fp32 " << fp32.out << ", fp16 " << fp16.out << ", bf16 " << bf16.out);
  INFO("dQ max error fp32 " << fp32.dq << ", fp16 " << fp16.dq << ", bf16 " << bf16.dq);

  CHECK(fp32.out < 1e-5);
  CHECK(fp16.out > 0.0);
  CHECK(fp16.out < 1e-2);
  CHECK(bf16.out < 5e-2);
  for (const auto& [name, narrow, wide] :
       {std::tuple{"out", bf16.out, fp16.out}, std::tuple{"lse", bf16.lse, fp16.lse},
        std::tuple{"dq", bf16.dq, fp16.dq}, std::tuple{"dk", bf16.dk, fp16.dk},
        std::tuple{"dv", bf16.dv, fp16.dv}}) {
    INFO(name);
    CHECK(narrow > wide);
  }
  for (const auto& [name, narrow, wide] :
       {std::tuple{"out", fp16.out, fp32.out}, std::tuple{"lse", fp16.lse, fp32.lse},
        std::tuple{"dq", fp16.dq, fp32.dq}, std::tuple{"dk", fp16.dk, fp32.dk},
        std::tuple{"dv", fp16.dv, fp32.dv}}) {
    INFO(name);
    CHECK(narrow > wide);
  }
}

TEST_CASE("baseline keeps the mask, grouping and empty-row semantics", "[baseline]") {
  for (const Mask mask : kMasks) {
    const Problem p = make_problem(1, 4, 2, 7, 4, 8, mask);
    INFO(describe(p));
    const Inputs raw = random_inputs(p, 91);
    const Inputs in{rounded_to(DType::fp32, raw.q), rounded_to(DType::fp32, raw.k),
                    rounded_to(DType::fp32, raw.v), rounded_to(DType::fp32, raw.dout)};
    // In fp32 the baseline is the reference up to float rounding, empty rows included.
    const ref::ForwardResult exact = ref::forward(p, in.q, in.k, in.v);
    const ref::ForwardResult low =
        ref::baseline::forward(in_dtype(p, DType::fp32), in.q, in.k, in.v);
    const ref::ErrorStats out = ref::compare(low.out, exact.out);
    const ref::ErrorStats lse = ref::compare(low.lse, exact.lse);
    CHECK(out.nonfinite == 0);
    CHECK(lse.nonfinite == 0);
    CHECK(out.max_abs < 1e-5);
    CHECK(lse.max_abs < 1e-5);
    const ref::Gradients exact_grads = ref::backward(p, in.q, in.k, in.v, exact, in.dout);
    const ref::Gradients low_grads =
        ref::baseline::backward(in_dtype(p, DType::fp32), in.q, in.k, in.v, low, in.dout);
    for (const auto& [got, want] : {std::pair{&low_grads.dq, &exact_grads.dq},
                                    std::pair{&low_grads.dk, &exact_grads.dk},
                                    std::pair{&low_grads.dv, &exact_grads.dv}}) {
      const ref::ErrorStats s = ref::compare(*got, *want);
      CHECK(s.nonfinite == 0);
      CHECK(s.max_abs < 1e-5);
    }
  }
  // fp16 with empty rows: exact zeros and +inf, nothing NaN.
  const Problem p = make_problem(1, 2, 1, 5, 3, 4, Mask::causal_bottom_right);
  const Inputs in = random_inputs(p, 92);
  const Inputs half{rounded_to(DType::fp16, in.q), rounded_to(DType::fp16, in.k),
                    rounded_to(DType::fp16, in.v), rounded_to(DType::fp16, in.dout)};
  const ref::ForwardResult fwd =
      ref::baseline::forward(in_dtype(p, DType::fp16), half.q, half.k, half.v);
  const ref::Gradients grads =
      ref::baseline::backward(in_dtype(p, DType::fp16), half.q, half.k, half.v, fwd, half.dout);
  CHECK(fwd.lse[0] == kInf);
  CHECK(fwd.lse[1] == kInf);
  CHECK(std::isfinite(fwd.lse[2]));
  const auto is_zero = [](double x) { return x == 0.0; };
  CHECK(std::all_of(fwd.out.begin(), fwd.out.begin() + 2 * p.shape.head_dim, is_zero));
  CHECK(std::all_of(grads.dq.begin(), grads.dq.begin() + 2 * p.shape.head_dim, is_zero));
  CHECK(all_finite(fwd.out));
  CHECK(all_finite(grads.dq));
  CHECK(all_finite(grads.dk));
  CHECK(all_finite(grads.dv));
}
