// rows_overlap() (lib/src/memory_overlap.h), the test that keeps outputs off inputs: exact on
// interleaved layouts, checked against every pair of rows on small random tensors.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include "memory_overlap.h"

using cuflash::detail::Overlap;
using cuflash::detail::rows_overlap;
using cuflash::detail::StridedRows;

namespace {

// [batch, heads, seq, head_dim] elements of `bytes` each, strides in elements.
StridedRows tensor(uintptr_t begin, int64_t batch, int64_t batch_stride, int64_t heads,
                   int64_t head_stride, int64_t seq, int64_t seq_stride, int64_t head_dim,
                   int64_t bytes = 2) {
  return {begin,
          {{batch, batch_stride * bytes}, {heads, head_stride * bytes}, {seq, seq_stride * bytes}},
          head_dim * bytes};
}

// Every row start of `t`.
std::vector<int64_t> row_starts(const StridedRows& t) {
  std::vector<int64_t> starts = {int64_t(t.begin)};
  for (const StridedRows::Dim& d : t.dims) {
    std::vector<int64_t> next;
    for (int64_t start : starts) {
      for (int64_t i = 0; i < d.size; ++i) next.push_back(start + i * d.stride);
    }
    starts = next;
  }
  return starts;
}

// Whether some row of `a` and some row of `b` share a byte, pair by pair.
bool overlap_by_pairs(const StridedRows& a, const StridedRows& b) {
  for (int64_t sa : row_starts(a)) {
    for (int64_t sb : row_starts(b)) {
      if (sa < sb + b.row_bytes && sb < sa + a.row_bytes) return true;
    }
  }
  return false;
}

// A random tensor of disjoint rows: dimensions in a random order, each stride past the span of
// the dimensions inside it plus a random gap (the rule validate_tensor() enforces).
StridedRows random_tensor(std::mt19937_64& rng, uintptr_t begin) {
  std::uniform_int_distribution<int64_t> size(1, 4), gap(0, 3), row(1, 3), order(0, 5);
  StridedRows t;
  t.begin = begin;
  t.row_bytes = 16 * row(rng);
  int64_t span = t.row_bytes;
  std::vector<StridedRows::Dim> dims;
  for (int k = 0; k < 3; ++k) {
    const int64_t n = size(rng);
    const int64_t stride = span + 16 * gap(rng);
    dims.push_back({n, stride});
    span = stride * (n - 1) + span;
  }
  // The stored order of dimensions is not their stride order (bshd lists heads before seq).
  const int64_t o = order(rng);
  std::swap(dims[size_t(o % 3)], dims[size_t((o / 3) % 3)]);
  t.dims = dims;
  return t;
}

}  // namespace

TEST_CASE("memory overlap: tensors of separate buffers and aliases", "[overlap]") {
  // 1 x 2 x 8 x 64 fp16, bhsd: 2048 bytes.
  const StridedRows a = tensor(0x10000, 1, 1024, 2, 512, 8, 64, 64);
  CHECK(rows_overlap(a, tensor(0x10000 + 2048, 1, 1024, 2, 512, 8, 64, 64)) == Overlap::no);
  CHECK(rows_overlap(a, a) == Overlap::yes);
  // The last byte of a is the first of b.
  CHECK(rows_overlap(a, tensor(0x10000 + 2046, 1, 1024, 2, 512, 8, 64, 64)) == Overlap::yes);
  // The same buffer read as bshd.
  CHECK(rows_overlap(a, tensor(0x10000, 1, 1024, 2, 64, 8, 128, 64)) == Overlap::yes);
}

TEST_CASE("memory overlap: thirds of one packed [B, S, 3, H, D] buffer share no byte",
          "[overlap]") {
  // B = 2, S = 100, H = 4, D = 64, fp16: token stride 3 x 4 x 64 elements.
  const int64_t H = 4, D = 64, S = 100, token = 3 * H * D, batch = S * token;
  const uintptr_t base = 0x100000;
  const StridedRows dq = tensor(base, 2, batch, H, D, S, token, D);
  const StridedRows dk = tensor(base + 2 * H * D, 2, batch, H, D, S, token, D);
  const StridedRows dv = tensor(base + 4 * H * D, 2, batch, H, D, S, token, D);
  CHECK(rows_overlap(dq, dk) == Overlap::no);
  CHECK(rows_overlap(dk, dv) == Overlap::no);
  CHECK(rows_overlap(dq, dv) == Overlap::no);
  CHECK(rows_overlap(dv, dq) == Overlap::no);
  // dK one element early: its first row takes dQ's last head's last element.
  CHECK(rows_overlap(dq, tensor(base + 2 * H * D - 2, 2, batch, H, D, S, token, D)) ==
        Overlap::yes);
  // fp32 sums given the packed strides in elements over the same buffer: twice the strides in
  // bytes, no dimension paired. From dK's first byte they miss every row of dQ (a test of spans
  // would refuse them); from dQ's they meet it.
  CHECK(rows_overlap(dq, tensor(base + 2 * H * D, 2, batch, H, D, S, token, D, 4)) == Overlap::no);
  CHECK(rows_overlap(dq, tensor(base, 2, batch, H, D, S, token, D, 4)) == Overlap::yes);
}

TEST_CASE("memory overlap: rows interleaved under different strides", "[overlap]") {
  // a: rows of 32 bytes at 0, 64, 128, 192; b: at 32, 96, 160, 224 as two dimensions of its own.
  const StridedRows a{0x1000, {{4, 64}}, 32};
  const StridedRows b{0x1000 + 32, {{2, 128}, {2, 64}}, 32};
  CHECK(rows_overlap(a, b) == Overlap::no);
  CHECK(rows_overlap(b, a) == Overlap::no);
  const StridedRows b_late{0x1000 + 48, {{2, 128}, {2, 64}}, 32};
  CHECK(rows_overlap(a, b_late) == Overlap::yes);
  // One contiguous run (an LSE) inside a gap between rows, then across one.
  CHECK(rows_overlap(a, StridedRows{0x1000 + 32, {}, 32}) == Overlap::no);
  CHECK(rows_overlap(a, StridedRows{0x1000 + 40, {}, 32}) == Overlap::yes);
}

TEST_CASE("memory overlap: random small tensors agree with every pair of rows", "[overlap]") {
  std::mt19937_64 rng(20261205);
  std::uniform_int_distribution<int64_t> shift(-64, 64);
  int overlapping = 0;
  for (int n = 0; n < 4000; ++n) {
    const StridedRows a = random_tensor(rng, 0x10000);
    // Shifted by whole 16-byte vectors, or (every third case) by 2-byte elements.
    const int64_t offset = shift(rng) * (n % 3 == 0 ? 2 : 16);
    StridedRows b = random_tensor(rng, uintptr_t(0x10000 + offset));
    if (n % 2 == 0) {  // the same layout: the search over index differences
      b.dims = a.dims;
      b.row_bytes = a.row_bytes;
    }
    const bool expected = overlap_by_pairs(a, b);
    overlapping += expected;
    INFO("case " << n);
    REQUIRE(rows_overlap(a, b) == (expected ? Overlap::yes : Overlap::no));
  }
  // Both answers were exercised often.
  CHECK(overlapping > 400);
  CHECK(overlapping < 3600);
}
