// Variable-length packed batches (Problem::seqlens_q / seqlens_k) in the CPU reference and the
// baseline: a packed run equals dense runs of each sequence on its own, assembled by hand here
// (so a wrong offset, head stride or per-sequence diagonal shows), with every variant and GQA;
// and the argument errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "cuflash/reference/attention_ref.h"
#include "cuflash/reference/baseline.h"
#include "unit_test_util.h"

namespace ref = cuflash::reference;
using cuflash::Layout;
using cuflash::Mask;
using cuflash::Problem;
using cuflash::unit_test::random_values;
using Vec = std::vector<double>;

namespace {

Problem packed_problem(std::vector<int64_t> lengths_q, std::vector<int64_t> lengths_k) {
  Problem p;
  p.layout = Layout::thd;
  p.shape.batch = 1;
  p.shape.heads = 4;
  p.shape.heads_kv = 2;
  p.shape.head_dim = 8;
  p.shape.seq_q = 0;
  p.shape.seq_k = 0;
  for (const int64_t l : lengths_q) p.shape.seq_q += l;
  for (const int64_t l : lengths_k) p.shape.seq_k += l;
  p.seqlens_q = std::move(lengths_q);
  p.seqlens_k = std::move(lengths_k);
  return p;
}

// The dense problem of sequence b, written out rather than taken from Problem::sequence().
Problem dense_problem(const Problem& packed, int64_t b) {
  Problem d = packed;
  d.layout = Layout::bhsd;
  d.seqlens_q.clear();
  d.seqlens_k.clear();
  d.shape.seq_q = packed.seqlens_q[b];
  d.shape.seq_k = packed.seqlens_k[b];
  if (packed.alibi_slopes.size() > size_t(packed.shape.heads)) {
    d.alibi_slopes.assign(packed.alibi_slopes.begin() + b * packed.shape.heads,
                          packed.alibi_slopes.begin() + (b + 1) * packed.shape.heads);
  }
  return d;
}

// Per-sequence dense [1, heads, len, width] tensors packed into [1, heads, total, width].
Vec pack(const std::vector<Vec>& parts, const std::vector<int64_t>& lengths, int64_t heads,
         int64_t width) {
  int64_t total = 0;
  for (const int64_t l : lengths) total += l;
  Vec packed(size_t(heads * total * width));
  int64_t begin = 0;
  for (size_t b = 0; b < parts.size(); ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < lengths[b]; ++i) {
        for (int64_t x = 0; x < width; ++x) {
          packed[size_t(((h * total) + begin + i) * width + x)] =
              parts[b][size_t((h * lengths[b] + i) * width + x)];
        }
      }
    }
    begin += lengths[b];
  }
  return packed;
}

void check_equal(const Vec& a, const Vec& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      REQUIRE(a[i] == b[i]);
    } else {
      REQUIRE(a[i] == Approx(b[i]).margin(1e-12));
    }
  }
}

struct Variant {
  const char* name;
  Mask mask;
  cuflash::Window window;
  double softcap;
  bool alibi_per_sequence;
};

}  // namespace

TEST_CASE("varlen reference: a packed batch equals dense runs of each sequence",
          "[reference][varlen]") {
  const std::vector<Variant> variants{
      {"none", Mask::none, {}, 0.0, false},
      {"causal bottom-right", Mask::causal_bottom_right, {}, 0.0, false},
      {"causal top-left", Mask::causal_top_left, {}, 0.0, false},
      {"window", Mask::none, {3, 2}, 0.0, false},
      {"causal + window + softcap + [sequences, heads] ALiBi", Mask::causal_bottom_right,
       {4, -1}, 2.0, true},
  };
  // Keys shorter, longer and as long as the queries; a one-token sequence.
  const std::vector<int64_t> lengths_q{1, 13, 7, 20};
  const std::vector<int64_t> lengths_k{1, 5, 16, 20};
  for (const Variant& variant : variants) {
    for (const bool same_lengths : {true, false}) {
      DYNAMIC_SECTION(variant.name << (same_lengths ? ", keys as long" : ", other key lengths")) {
        Problem p = packed_problem(lengths_q, same_lengths ? lengths_q : lengths_k);
        p.mask = variant.mask;
        p.window = variant.window;
        p.softcap = variant.softcap;
        if (variant.alibi_per_sequence) {
          for (int64_t i = 0; i < 4 * p.shape.heads; ++i) p.alibi_slopes.push_back(0.1f * (i + 1));
        }
        const int64_t d = p.shape.head_dim;
        std::vector<Vec> q, k, v, dout, out, lse, dq, dk, dv;
        std::vector<Vec> base_out, base_lse, base_dq, base_dk, base_dv;  // the baseline's
        for (int64_t b = 0; b < 4; ++b) {
          const Problem dense = dense_problem(p, b);
          const auto& s = dense.shape;
          q.push_back(random_values(s.q_elements(), unsigned(10 + b)));
          k.push_back(random_values(s.kv_elements(), unsigned(20 + b)));
          v.push_back(random_values(s.kv_elements(), unsigned(30 + b)));
          dout.push_back(random_values(s.q_elements(), unsigned(40 + b)));
          const ref::ForwardResult f = ref::forward(dense, q[b], k[b], v[b]);
          const ref::Gradients g = ref::backward(dense, q[b], k[b], v[b], f, dout[b]);
          out.push_back(f.out);
          lse.push_back(f.lse);
          dq.push_back(g.dq);
          dk.push_back(g.dk);
          dv.push_back(g.dv);
          const ref::ForwardResult bf = ref::baseline::forward(dense, q[b], k[b], v[b]);
          const ref::Gradients bg = ref::baseline::backward(dense, q[b], k[b], v[b], bf, dout[b]);
          base_out.push_back(bf.out);
          base_lse.push_back(bf.lse);
          base_dq.push_back(bg.dq);
          base_dk.push_back(bg.dk);
          base_dv.push_back(bg.dv);
        }
        const auto& s = p.shape;
        const Vec pq = pack(q, p.seqlens_q, s.heads, d);
        const Vec pk = pack(k, p.seqlens_k, s.heads_kv, d);
        const Vec pv = pack(v, p.seqlens_k, s.heads_kv, d);
        const Vec pdout = pack(dout, p.seqlens_q, s.heads, d);
        const ref::ForwardResult f = ref::forward(p, pq, pk, pv);
        check_equal(f.out, pack(out, p.seqlens_q, s.heads, d));
        check_equal(f.lse, pack(lse, p.seqlens_q, s.heads, 1));
        const ref::Gradients g = ref::backward(p, pq, pk, pv, f, pdout);
        check_equal(g.dq, pack(dq, p.seqlens_q, s.heads, d));
        check_equal(g.dk, pack(dk, p.seqlens_k, s.heads_kv, d));
        check_equal(g.dv, pack(dv, p.seqlens_k, s.heads_kv, d));

        // The baseline splits the same way: the GPU tests' tolerances come from its error, which
        // a sequence given another's rows or LSE would inflate.
        const ref::ForwardResult bf = ref::baseline::forward(p, pq, pk, pv);
        check_equal(bf.out, pack(base_out, p.seqlens_q, s.heads, d));
        check_equal(bf.lse, pack(base_lse, p.seqlens_q, s.heads, 1));
        const ref::Gradients bg = ref::baseline::backward(p, pq, pk, pv, bf, pdout);
        check_equal(bg.dq, pack(base_dq, p.seqlens_q, s.heads, d));
        check_equal(bg.dk, pack(base_dk, p.seqlens_k, s.heads_kv, d));
        check_equal(bg.dv, pack(base_dv, p.seqlens_k, s.heads_kv, d));
      }
    }
  }
}

TEST_CASE("varlen reference: the bottom-right diagonal aligns to each sequence",
          "[reference][varlen]") {
  // Sequence 0: 6 queries over 2 keys; bottom-right, its first 4 rows see no key (LSE +inf,
  // O = 0). Sequence 1: 3 queries over 9 keys; every row sees a key.
  Problem p = packed_problem({6, 3}, {2, 9});
  p.mask = Mask::causal_bottom_right;
  const auto& s = p.shape;
  const ref::ForwardResult f =
      ref::forward(p, random_values(s.q_elements(), 1), random_values(s.kv_elements(), 2),
                   random_values(s.kv_elements(), 3));
  for (int64_t h = 0; h < s.heads; ++h) {
    for (int64_t t = 0; t < s.seq_q; ++t) {
      const bool empty = t < 4;
      CHECK(std::isinf(f.lse[size_t(h * s.seq_q + t)]) == empty);
    }
  }
}

TEST_CASE("varlen reference: inconsistent lengths and layouts are refused", "[reference][varlen]") {
  const Problem good = packed_problem({3, 5}, {3, 5});
  REQUIRE_NOTHROW(ref::validate(good));
  Problem p = good;
  p.shape.seq_q = 9;  // the lengths sum to 8
  CHECK_THROWS_WITH(ref::validate(p), Catch::Contains("sum to 8"));
  p = good;
  p.seqlens_q = {0, 8};
  CHECK_THROWS_WITH(ref::validate(p), Catch::Contains("not a positive length"));
  p = good;
  p.layout = Layout::bshd;
  CHECK_THROWS_WITH(ref::validate(p), Catch::Contains("need layout thd"));
  p = good;
  p.seqlens_q.clear();
  p.seqlens_k.clear();
  CHECK_THROWS_WITH(ref::validate(p), Catch::Contains("layout thd needs sequence lengths"));
  p = good;
  p.seqlens_k = {8};
  CHECK_THROWS_WITH(ref::validate(p), Catch::Contains("one per sequence"));
  p = good;
  p.shape.batch = 2;
  CHECK_THROWS_WITH(ref::validate(p), Catch::Contains("batch 1"));
  p = good;
  p.alibi_slopes.assign(3 * size_t(p.shape.heads), 0.5f);  // two sequences, not three
  CHECK_THROWS_WITH(ref::validate(p), Catch::Contains("alibi_slopes"));
  p.alibi_slopes.assign(2 * size_t(p.shape.heads), 0.5f);
  CHECK_NOTHROW(ref::validate(p));
}
