// The attention computation shared by the float64 reference and the low-precision baseline.
//
// Both walk the same tiles with the same formulas; they differ only in a precision policy:
//   Exact         float64 arithmetic, nothing rounded (the reference).
//   LowPrecision  float32 arithmetic, and every matrix stored between two steps rounded to a
//                 DType (the baseline that emulates a plain, non-fused implementation).
//
// Forward, per (batch, head, block of query rows):
//   S = round(scale * Q K^T)                             (rows, keys)
//   S = round(softcap * tanh(S / softcap))               with a softcap
//   S = round(S - slope * |i + offset - j|)              with ALiBi
//   masked entries (causal mask, window) -inf
//   P = round(softmax(S)), LSE = max + log(sum)          (rows, keys), (rows)
//   O = round(P V)                                       (rows, D)
// Backward, pass 1 per (batch, head, block of query rows), pass 2 per (batch, kv head, block of
// keys) over all query heads of the group and all rows that see the block:
//   P = round(exp(S - LSE)), dP = round(dO V^T), D = round(rowsum(dO * O))
//   dS = round(P * (dP - D) * (1 - tanh^2))              (rows, keys; the factor with a softcap)
//   dQ = round(scale * dS K)      (pass 1)
//   dV = round(P^T dO), dK = round(scale * dS^T Q)      (pass 2, summed before the rounding)
// Pass 2 owns its dK/dV rows outright, so no two threads ever add into the same output.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <vector>

#include "cuflash/numeric.h"
#include "cuflash/reference/attention_ref.h"
#include "cuflash/types.h"

namespace cuflash::reference::engine {

template <class Scalar>
using Matrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class Scalar>
using ConstMap = Eigen::Map<const Matrix<Scalar>>;

// Float64 throughout, nothing rounded: the reference.
struct Exact {
  using Scalar = double;
  double round(double x) const { return x; }
  void round_stored(Matrix<double>&) const {}
};

// Float32 arithmetic; every stored matrix rounded to `dtype` (a no-op for fp32): the baseline.
struct LowPrecision {
  using Scalar = float;
  DType dtype = DType::fp32;

  float round(float x) const {
    switch (dtype) {
      case DType::fp16: return numeric::round_to_half(x);
      case DType::bf16: return numeric::round_to_bf16(x);
      case DType::fp32: break;
    }
    return x;
  }
  void round_stored(Matrix<float>& m) const {
    if (dtype != DType::fp32) m = m.unaryExpr([this](float x) { return round(x); });
  }
};

// Dense inputs of one problem, already in the policy's scalar type.
template <class Scalar>
struct Inputs {
  const Scalar* q = nullptr;     // [B, H, Sq, D]
  const Scalar* k = nullptr;     // [B, Hkv, Sk, D]
  const Scalar* v = nullptr;     // [B, Hkv, Sk, D]
  const Scalar* out = nullptr;   // [B, H, Sq, D]  backward only
  const Scalar* dout = nullptr;  // [B, H, Sq, D]  backward only
  const Scalar* lse = nullptr;   // [B, H, Sq]     backward only
};

// Scores of one tile take rows x keys elements per matrix; a few such matrices live per thread.
constexpr int64_t kMaxTileElements = int64_t(1) << 20;
constexpr int64_t kMaxQueryBlockRows = 256;
constexpr int64_t kKeyBlockColumns = 256;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows per query block when each row spans `keys` scores.
inline int64_t query_block_rows(int64_t keys) {
  return std::clamp<int64_t>(kMaxTileElements / std::max<int64_t>(keys, 1), 1, kMaxQueryBlockRows);
}

// Index arithmetic, mask and score modifications of one problem.
struct Geometry {
  explicit Geometry(const Problem& p)
      : batch(p.shape.batch), heads(p.shape.heads), heads_kv(p.shape.heads_kv),
        seq_q(p.shape.seq_q), seq_k(p.shape.seq_k), head_dim(p.shape.head_dim),
        group(p.shape.heads / p.shape.heads_kv), band(p.band()), scale(p.effective_scale()),
        softcap(p.softcap), alibi_slopes(p.alibi_slopes.empty() ? nullptr : &p.alibi_slopes),
        alibi_batch_stride(p.alibi_batch_stride()) {}
  // A block of a larger problem (reference::forward_block()): `diagonal_offset` replaces the
  // block's own, so that the mask, the window and ALiBi's distances are the whole problem's.
  Geometry(const Problem& p, int64_t diagonal_offset) : Geometry(p) {
    band.offset = diagonal_offset;
  }

  // Query row `row` sees keys [visible_begin(row), visible_end(row)), a band that moves right
  // (never left) from one row to the next.
  int64_t visible_begin(int64_t row) const {
    return std::clamp<int64_t>(band.begin(row), 0, seq_k);
  }
  int64_t visible_end(int64_t row) const {
    return std::clamp<int64_t>(band.end(row, seq_k), visible_begin(row), seq_k);
  }
  // Rows [first_row_seeing(key), rows_end_seeing(key)) see key `key`.
  int64_t first_row_seeing(int64_t key) const {
    return std::clamp<int64_t>(key - band.offset - band.right, 0, seq_q);
  }
  int64_t rows_end_seeing(int64_t key) const {
    return std::clamp<int64_t>(key - band.offset + band.left + 1, first_row_seeing(key), seq_q);
  }
  double alibi_slope(int64_t b, int64_t h) const {
    return double((*alibi_slopes)[size_t(b * alibi_batch_stride + h)]);
  }
  int64_t q_offset(int64_t b, int64_t h) const { return (b * heads + h) * seq_q * head_dim; }
  int64_t kv_offset(int64_t b, int64_t hkv) const {
    return (b * heads_kv + hkv) * seq_k * head_dim;
  }
  int64_t lse_offset(int64_t b, int64_t h) const { return (b * heads + h) * seq_q; }

  int64_t batch, heads, heads_kv, seq_q, seq_k, head_dim;
  int64_t group;  // query heads per key/value head
  VisibleBand band;
  double scale;
  double softcap;  // 0: off
  const std::vector<float>* alibi_slopes;  // null: no ALiBi
  int64_t alibi_batch_stride;
};

// Query rows [row_begin, row_end) against keys [key_begin, key_end) of one (batch, head).
struct Tile {
  int64_t batch, head;
  int64_t row_begin, row_end;
  int64_t key_begin, key_end;

  int64_t rows() const { return row_end - row_begin; }
  int64_t keys() const { return key_end - key_begin; }
  // Whether local row i sees local key j.
  bool visible(const Geometry& g, int64_t i, int64_t j) const {
    const int64_t key = key_begin + j;
    return key >= g.visible_begin(row_begin + i) && key < g.visible_end(row_begin + i);
  }
  // Local keys [first_visible(i), end_visible(i)) are those row i sees.
  int64_t first_visible(const Geometry& g, int64_t i) const {
    return std::clamp<int64_t>(g.visible_begin(row_begin + i) - key_begin, 0, keys());
  }
  int64_t end_visible(const Geometry& g, int64_t i) const {
    return std::clamp<int64_t>(g.visible_end(row_begin + i) - key_begin, first_visible(g, i),
                               keys());
  }
};

// a * b where every masked entry of `a` (always an exact zero) contributes nothing, even when `b`
// holds Inf or NaN: a plain GEMM would add 0 * NaN = NaN to rows that never see that value.
// visible(i, k) says whether a(i, k) is unmasked.
template <class A, class B, class IsVisible>
Matrix<typename B::Scalar> masked_product(const A& a, const B& b, IsVisible visible) {
  using Scalar = typename B::Scalar;
  if (b.allFinite()) return a * b;
  Matrix<Scalar> c = Matrix<Scalar>::Zero(a.rows(), b.cols());
  for (Eigen::Index i = 0; i < a.rows(); ++i) {
    for (Eigen::Index k = 0; k < a.cols(); ++k) {
      if (visible(i, k)) c.row(i) += a(i, k) * b.row(k);
    }
  }
  return c;
}

// Softcap and ALiBi on the scaled scores of a tile, each step rounded. With `softcap_slope`,
// also d(capped)/d(scaled) = 1 - tanh^2 per score (1 without a softcap), for the backward.
template <class Policy, class Scalar = typename Policy::Scalar>
void modify_scores(const Policy& policy, const Geometry& g, const Tile& t, Matrix<Scalar>& s,
                   Matrix<Scalar>* softcap_slope) {
  if (softcap_slope != nullptr) *softcap_slope = Matrix<Scalar>::Ones(t.rows(), t.keys());
  if (g.softcap > 0) {
    const auto cap = static_cast<Scalar>(g.softcap);
    for (int64_t i = 0; i < t.rows(); ++i) {
      for (int64_t j = 0; j < t.keys(); ++j) {
        const Scalar tanh = std::tanh(s(i, j) / cap);
        s(i, j) = policy.round(cap * tanh);
        if (softcap_slope != nullptr) (*softcap_slope)(i, j) = 1 - tanh * tanh;
      }
    }
  }
  if (g.alibi_slopes != nullptr) {
    const auto slope = static_cast<Scalar>(g.alibi_slope(t.batch, t.head));
    for (int64_t i = 0; i < t.rows(); ++i) {
      for (int64_t j = 0; j < t.keys(); ++j) {
        const int64_t distance = std::abs(t.row_begin + i + g.band.offset - (t.key_begin + j));
        s(i, j) = policy.round(s(i, j) - slope * static_cast<Scalar>(distance));
      }
    }
  }
}

// S = round(scale * Q K^T) for the tile, modified (softcap, ALiBi), masked entries set to
// -inf.   (rows, keys)
template <class Policy, class Scalar = typename Policy::Scalar>
Matrix<Scalar> masked_scores(const Policy& policy, const Geometry& g, const Inputs<Scalar>& in,
                             const Tile& t, Matrix<Scalar>* softcap_slope = nullptr) {
  const int64_t d = g.head_dim;
  const ConstMap<Scalar> q(in.q + g.q_offset(t.batch, t.head) + t.row_begin * d, t.rows(), d);
  const ConstMap<Scalar> k(in.k + g.kv_offset(t.batch, t.head / g.group) + t.key_begin * d,
                           t.keys(), d);
  Matrix<Scalar> s = static_cast<Scalar>(g.scale) * (q * k.transpose());
  policy.round_stored(s);
  modify_scores(policy, g, t, s, softcap_slope);
  constexpr Scalar kMasked = -std::numeric_limits<Scalar>::infinity();
  for (int64_t i = 0; i < t.rows(); ++i) {
    const int64_t first = t.first_visible(g, i);
    const int64_t end = t.end_visible(g, i);
    s.row(i).head(first).setConstant(kMasked);
    s.row(i).tail(t.keys() - end).setConstant(kMasked);
  }
  return s;
}

// Turns the entries [first, end) of a row of scores into probabilities (the rest become 0)
// and returns the row's LSE: +inf for a row that sees nothing. A NaN score makes the whole row
// NaN through the sum, which is the point.
template <class Row>
auto softmax_in_place(Row&& row, int64_t first, int64_t end) {
  using Scalar = typename std::decay_t<Row>::Scalar;
  if (end == first) {
    row.setZero();
    return std::numeric_limits<Scalar>::infinity();
  }
  Scalar max = -std::numeric_limits<Scalar>::infinity();
  for (int64_t j = first; j < end; ++j) max = std::max(max, row(j));
  Scalar sum = 0;
  for (int64_t j = first; j < end; ++j) {
    row(j) = std::exp(row(j) - max);
    sum += row(j);
  }
  row.segment(first, end - first) /= sum;
  row.head(first).setZero();
  row.tail(row.size() - end).setZero();
  return max + std::log(sum);
}

// Forward of one block of query rows of one (batch, head); writes O and LSE of those rows.
template <class Policy, class Scalar = typename Policy::Scalar>
void forward_block(const Policy& policy, const Geometry& g, const Inputs<Scalar>& in,
                   const Tile& t, double* out, double* lse) {
  const int64_t d = g.head_dim;
  double* out_rows = out + g.q_offset(t.batch, t.head) + t.row_begin * d;  // (rows, D)
  double* lse_rows = lse + g.lse_offset(t.batch, t.head) + t.row_begin;    // (rows)
  if (t.keys() == 0) {  // no row of the block sees a key
    std::fill(out_rows, out_rows + t.rows() * d, 0.0);
    std::fill(lse_rows, lse_rows + t.rows(), std::numeric_limits<double>::infinity());
    return;
  }
  Matrix<Scalar> p = masked_scores(policy, g, in, t);  // (rows, keys), scores -> probabilities
  for (int64_t i = 0; i < t.rows(); ++i) {
    lse_rows[i] = static_cast<double>(
        softmax_in_place(p.row(i), t.first_visible(g, i), t.end_visible(g, i)));
  }
  policy.round_stored(p);
  const ConstMap<Scalar> v(in.v + g.kv_offset(t.batch, t.head / g.group) + t.key_begin * d,
                           t.keys(), d);
  Matrix<Scalar> o = masked_product(p, v, [&](int64_t i, int64_t j) { return t.visible(g, i, j); });
  policy.round_stored(o);  // (rows, D)
  Eigen::Map<Matrix<double>>(out_rows, t.rows(), d) = o.template cast<double>();
}

template <class Scalar>
struct ScoreGradients {
  Matrix<Scalar> p;   // (rows, keys) probabilities, 0 where masked
  Matrix<Scalar> ds;  // (rows, keys) dL/dS of the scaled scores before any softcap (without
                      // the scale), 0 where masked
};

// Recomputes P from the LSE and forms dS for one tile.
template <class Policy, class Scalar = typename Policy::Scalar>
ScoreGradients<Scalar> score_gradients(const Policy& policy, const Geometry& g,
                                       const Inputs<Scalar>& in, const Tile& t) {
  const int64_t d = g.head_dim;
  const int64_t rows_offset = g.q_offset(t.batch, t.head) + t.row_begin * d;
  const ConstMap<Scalar> out(in.out + rows_offset, t.rows(), d);    // (rows, D)
  const ConstMap<Scalar> dout(in.dout + rows_offset, t.rows(), d);  // (rows, D)
  const ConstMap<Scalar> v(in.v + g.kv_offset(t.batch, t.head / g.group) + t.key_begin * d,
                           t.keys(), d);  // (keys, D)
  const Scalar* lse = in.lse + g.lse_offset(t.batch, t.head) + t.row_begin;

  Matrix<Scalar> softcap_slope;  // (rows, keys)
  ScoreGradients<Scalar> grads{masked_scores(policy, g, in, t, &softcap_slope), Matrix<Scalar>()};
  Matrix<Scalar>& p = grads.p;
  for (int64_t i = 0; i < t.rows(); ++i) {
    const int64_t first = t.first_visible(g, i);
    const int64_t end = t.end_visible(g, i);
    // An empty row has LSE = +inf; it has no visible entry either, so P stays exactly zero.
    p.row(i).segment(first, end - first) =
        (p.row(i).segment(first, end - first).array() - lse[i]).exp().matrix();
    p.row(i).head(first).setZero();
    p.row(i).tail(t.keys() - end).setZero();
  }
  policy.round_stored(p);

  Matrix<Scalar> dp = dout * v.transpose();  // (rows, keys)
  policy.round_stored(dp);
  Matrix<Scalar>& ds = grads.ds;
  ds = Matrix<Scalar>::Zero(t.rows(), t.keys());
  for (int64_t i = 0; i < t.rows(); ++i) {
    const Scalar row_dot = policy.round(dout.row(i).dot(out.row(i)));  // D_i
    const int64_t first = t.first_visible(g, i);
    const int64_t n = t.end_visible(g, i) - first;
    ds.row(i).segment(first, n) =
        (p.row(i).segment(first, n).array() * (dp.row(i).segment(first, n).array() - row_dot) *
         softcap_slope.row(i).segment(first, n).array())
            .matrix();
  }
  policy.round_stored(ds);
  return grads;
}

// Backward pass 1: dQ of one block of query rows of one (batch, head).
template <class Policy, class Scalar = typename Policy::Scalar>
void query_gradient_block(const Policy& policy, const Geometry& g, const Inputs<Scalar>& in,
                          const Tile& t, double* dq) {
  const int64_t d = g.head_dim;
  Eigen::Map<Matrix<double>> dq_rows(dq + g.q_offset(t.batch, t.head) + t.row_begin * d, t.rows(),
                                     d);  // (rows, D)
  if (t.keys() == 0) {
    dq_rows.setZero();
    return;
  }
  const ScoreGradients<Scalar> grads = score_gradients(policy, g, in, t);
  const ConstMap<Scalar> k(in.k + g.kv_offset(t.batch, t.head / g.group) + t.key_begin * d,
                           t.keys(), d);
  Matrix<Scalar> dq_tile = static_cast<Scalar>(g.scale) *
      masked_product(grads.ds, k, [&](int64_t i, int64_t j) { return t.visible(g, i, j); });
  policy.round_stored(dq_tile);
  dq_rows = dq_tile.template cast<double>();
}

// Backward pass 2: dK and dV of keys [key_begin, key_end) of one (batch, kv head), summed over
// the query heads of its group and over every query row that sees those keys.
template <class Policy, class Scalar = typename Policy::Scalar>
void key_gradient_block(const Policy& policy, const Geometry& g, const Inputs<Scalar>& in,
                        int64_t batch, int64_t head_kv, int64_t key_begin, int64_t key_end,
                        double* dk, double* dv) {
  const int64_t d = g.head_dim;
  const int64_t keys = key_end - key_begin;
  Matrix<Scalar> dk_acc = Matrix<Scalar>::Zero(keys, d);  // (keys, D)
  Matrix<Scalar> dv_acc = Matrix<Scalar>::Zero(keys, d);  // (keys, D)
  const int64_t rows_per_chunk = std::max<int64_t>(kMaxTileElements / keys, 1);
  for (int64_t head = head_kv * g.group; head < (head_kv + 1) * g.group; ++head) {
    const int64_t rows_end = g.rows_end_seeing(key_end - 1);
    for (int64_t row = g.first_row_seeing(key_begin); row < rows_end; row += rows_per_chunk) {
      const Tile t{batch, head, row, std::min(row + rows_per_chunk, rows_end), key_begin, key_end};
      const ScoreGradients<Scalar> grads = score_gradients(policy, g, in, t);
      const int64_t rows_offset = g.q_offset(batch, head) + t.row_begin * d;
      const ConstMap<Scalar> q(in.q + rows_offset, t.rows(), d);        // (rows, D)
      const ConstMap<Scalar> dout(in.dout + rows_offset, t.rows(), d);  // (rows, D)
      const auto visible = [&](int64_t j, int64_t i) { return t.visible(g, i, j); };
      dv_acc += masked_product(grads.p.transpose(), dout, visible);
      dk_acc += masked_product(grads.ds.transpose(), q, visible);
    }
  }
  dk_acc *= static_cast<Scalar>(g.scale);
  policy.round_stored(dk_acc);
  policy.round_stored(dv_acc);
  const int64_t offset = g.kv_offset(batch, head_kv) + key_begin * d;
  Eigen::Map<Matrix<double>>(dk + offset, keys, d) = dk_acc.template cast<double>();
  Eigen::Map<Matrix<double>>(dv + offset, keys, d) = dv_acc.template cast<double>();
}

// Counts finished blocks for an optional ProgressCallback and carries its request to stop.
class BlockCounter {
 public:
  // Reports done = 0 before any block.
  BlockCounter(const ProgressCallback* callback, int64_t total)
      : callback_(callback != nullptr && *callback ? callback : nullptr), total_(total) {
    if (callback_ != nullptr && !(*callback_)(0, total_)) stopped_ = true;
  }

  // Whether the blocks not yet started are to be skipped.
  bool stopped() const { return stopped_.load(std::memory_order_relaxed); }
  void finished_one() {
    if (callback_ == nullptr) return;
    const int64_t done = done_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (!(*callback_)(done, total_)) stopped_.store(true, std::memory_order_relaxed);
  }
  // After the parallel loops (an exception cannot leave an OpenMP loop).
  void throw_if_stopped() const {
    if (stopped()) throw Cancelled("the computation was stopped before it finished");
  }

 private:
  const ProgressCallback* callback_;
  int64_t total_;
  std::atomic<int64_t> done_{0};
  std::atomic<bool> stopped_{false};
};

// Number of blocks for_each_query_block() walks.
inline int64_t query_block_count(const Geometry& g) {
  return g.batch * g.heads * ceil_div(g.seq_q, query_block_rows(g.seq_k));
}

// Number of progress steps of run_backward(): the query blocks, then the key blocks.
inline int64_t backward_block_count(const Geometry& g) {
  return query_block_count(g) + g.batch * g.heads_kv * ceil_div(g.seq_k, kKeyBlockColumns);
}

// Calls work(tile) for every block of query rows of every (batch, head), spread over the cores;
// each tile spans the keys its rows can see. With a counter, each finished block is counted
// and, once it says stop, the remaining blocks are skipped.
template <class Work>
void for_each_query_block(const Geometry& g, Work&& work, BlockCounter* counter = nullptr) {
  const int64_t block_rows = query_block_rows(g.seq_k);
  const int64_t blocks = ceil_div(g.seq_q, block_rows);
  const int64_t tasks = g.batch * g.heads * blocks;
#pragma omp parallel for schedule(dynamic)
  for (int64_t task = 0; task < tasks; ++task) {
    if (counter != nullptr && counter->stopped()) continue;
    const int64_t batch_head = task / blocks;
    const int64_t row_begin = (task % blocks) * block_rows;
    const int64_t row_end = std::min(row_begin + block_rows, g.seq_q);
    work(Tile{batch_head / g.heads, batch_head % g.heads, row_begin, row_end,
              g.visible_begin(row_begin), g.visible_end(row_end - 1)});
    if (counter != nullptr) counter->finished_one();
  }
}

// The whole forward; `out` and `lse` are preallocated to the problem's sizes. Throws Cancelled
// when `progress` asks to stop.
template <class Policy, class Scalar = typename Policy::Scalar>
void run_forward(const Policy& policy, const Geometry& g, const Inputs<Scalar>& in, double* out,
                 double* lse, const ProgressCallback* progress = nullptr) {
  BlockCounter counter(progress, query_block_count(g));
  for_each_query_block(
      g, [&](const Tile& t) { forward_block(policy, g, in, t, out, lse); }, &counter);
  counter.throw_if_stopped();
}

template <class Policy, class Scalar = typename Policy::Scalar>
void run_forward(const Policy& policy, const Problem& p, const Inputs<Scalar>& in, double* out,
                 double* lse, const ProgressCallback* progress = nullptr) {
  run_forward(policy, Geometry(p), in, out, lse, progress);
}

// The whole backward; `dq`, `dk`, `dv` are preallocated to the problem's sizes. Throws Cancelled
// when `progress` asks to stop.
template <class Policy, class Scalar = typename Policy::Scalar>
void run_backward(const Policy& policy, const Problem& p, const Inputs<Scalar>& in, double* dq,
                  double* dk, double* dv, const ProgressCallback* progress = nullptr) {
  const Geometry g(p);
  const int64_t key_blocks = ceil_div(g.seq_k, kKeyBlockColumns);
  const int64_t key_tasks = g.batch * g.heads_kv * key_blocks;
  BlockCounter counter(progress, backward_block_count(g));
  for_each_query_block(
      g, [&](const Tile& t) { query_gradient_block(policy, g, in, t, dq); }, &counter);

#pragma omp parallel for schedule(dynamic)
  for (int64_t task = 0; task < key_tasks; ++task) {
    if (counter.stopped()) continue;
    const int64_t batch_head_kv = task / key_blocks;
    const int64_t key_begin = (task % key_blocks) * kKeyBlockColumns;
    const int64_t key_end = std::min(key_begin + kKeyBlockColumns, g.seq_k);
    key_gradient_block(policy, g, in, batch_head_kv / g.heads_kv, batch_head_kv % g.heads_kv,
                       key_begin, key_end, dk, dv);
    counter.finished_one();
  }
  counter.throw_if_stopped();
}

// Shape checks shared by the reference and the baseline (defined in attention_ref.cpp).
void check_forward_inputs(const Problem& p, const std::vector<double>& q,
                          const std::vector<double>& k, const std::vector<double>& v);
void check_backward_inputs(const Problem& p, const std::vector<double>& q,
                           const std::vector<double>& k, const std::vector<double>& v,
                           const ForwardResult& fwd, const std::vector<double>& dout);

}  // namespace cuflash::reference::engine
