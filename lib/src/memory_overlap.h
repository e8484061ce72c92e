// Whether two strided tensors share a byte: the check that keeps an output from being written
// over an input (or another output) that the kernels still read. Host only.
//
// A tensor here is a set of rows, `row_bytes` contiguous bytes each, at begin + sum_k i_k *
// stride_k for 0 <= i_k < size_k. Packed layouts interleave tensors whose spans overlap without
// a byte in common (dQ, dK and dV as thirds of one [B, S, 3, H, D] buffer), so comparing spans
// would refuse them: the test is exact. Two rows meet when the distance between their starts
// lies strictly between -row_bytes of the one and row_bytes of the other, which is a bounded
// integer problem in the tensors' indices: a branch and bound over the dimensions, largest
// stride first, where a dimension of the one tensor and one of the other with the same stride
// and size become one variable (their index difference). Tensors of the same layout (the usual
// case, also packed) then take a handful of steps.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace cuflash::detail {

struct StridedRows {
  struct Dim {
    int64_t size;    // >= 1
    int64_t stride;  // bytes, >= 0
  };
  uintptr_t begin = 0;
  std::vector<Dim> dims;
  int64_t row_bytes = 0;  // > 0

  // The bytes [first, last) the rows span.
  uintptr_t first() const { return begin; }
  uintptr_t last() const {
    int64_t end = row_bytes;
    for (const Dim& d : dims) end += (d.size - 1) * d.stride;
    return begin + uintptr_t(end);
  }
};

enum class Overlap { no, yes, undecided };

namespace overlap_detail {

// One integer variable of the search: x in [low, high], contributing x * stride bytes.
struct Variable {
  int64_t stride;
  int64_t low;
  int64_t high;
};

// Floor and ceiling of a / b for b > 0.
inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
inline int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

class Search {
 public:
  explicit Search(std::vector<Variable> variables) : variables_(std::move(variables)) {
    std::sort(variables_.begin(), variables_.end(),
              [](const Variable& a, const Variable& b) { return a.stride > b.stride; });
    // reach_[k]: the least and most the variables from k on can add.
    reach_low_.assign(variables_.size() + 1, 0);
    reach_high_.assign(variables_.size() + 1, 0);
    for (size_t k = variables_.size(); k-- > 0;) {
      reach_low_[k] = reach_low_[k + 1] + variables_[k].low * variables_[k].stride;
      reach_high_[k] = reach_high_[k + 1] + variables_[k].high * variables_[k].stride;
    }
  }

  // Whether some choice puts sum x_k * stride_k strictly between `low` and `high`.
  Overlap find(int64_t low, int64_t high) { return step(0, low, high); }

 private:
  static constexpr int64_t kMaxSteps = 1 << 20;  // bounds a pair's host time (10-20 ms)

  Overlap step(size_t k, int64_t low, int64_t high) {
    if (++steps_ > kMaxSteps) return Overlap::undecided;
    if (reach_high_[k] <= low || reach_low_[k] >= high) return Overlap::no;
    if (k == variables_.size()) return Overlap::yes;  // 0 lies in (low, high)
    const Variable& v = variables_[k];
    // x * stride must leave the rest room: low - reach_high < x * stride < high - reach_low.
    const int64_t first = std::max(v.low, floor_div(low - reach_high_[k + 1], v.stride) + 1);
    const int64_t last = std::min(v.high, ceil_div(high - reach_low_[k + 1], v.stride) - 1);
    bool undecided = false;
    for (int64_t x = first; x <= last; ++x) {
      const Overlap found = step(k + 1, low - x * v.stride, high - x * v.stride);
      if (found == Overlap::yes) return Overlap::yes;
      undecided = undecided || found == Overlap::undecided;
    }
    return undecided ? Overlap::undecided : Overlap::no;
  }

  std::vector<Variable> variables_;
  std::vector<int64_t> reach_low_, reach_high_;
  int64_t steps_ = 0;
};

}  // namespace overlap_detail

// Whether `a` and `b` share a byte; `undecided` only past the search's step budget (strides of
// no common pattern over many rows).
inline Overlap rows_overlap(const StridedRows& a, const StridedRows& b) {
  if (a.last() <= b.first() || b.last() <= a.first()) return Overlap::no;
  using overlap_detail::Variable;
  // Row i of a and row j of b meet when start_a(i) - start_b(j) lies in (-a.row_bytes,
  // b.row_bytes): sum_k i_k sa_k - sum_k j_k sb_k in (b.begin - a.begin - a.row_bytes, ... +
  // b.row_bytes).
  std::vector<Variable> variables;
  std::vector<bool> b_paired(b.dims.size(), false);
  for (const StridedRows::Dim& da : a.dims) {
    if (da.size == 1 || da.stride == 0) continue;
    bool paired = false;
    for (size_t m = 0; m < b.dims.size() && !paired; ++m) {
      const StridedRows::Dim& db = b.dims[m];
      if (!b_paired[m] && db.size == da.size && db.stride == da.stride) {
        b_paired[m] = paired = true;  // i - j in [-(size - 1), size - 1]
        variables.push_back({da.stride, -(da.size - 1), da.size - 1});
      }
    }
    if (!paired) variables.push_back({da.stride, 0, da.size - 1});
  }
  for (size_t m = 0; m < b.dims.size(); ++m) {
    const StridedRows::Dim& db = b.dims[m];
    if (b_paired[m] || db.size == 1 || db.stride == 0) continue;
    variables.push_back({db.stride, -(db.size - 1), 0});
  }
  const int64_t distance = int64_t(b.begin - a.begin);  // the spans overlap: no wrap-around
  overlap_detail::Search search(std::move(variables));
  return search.find(distance - a.row_bytes, distance + b.row_bytes);
}

}  // namespace cuflash::detail
