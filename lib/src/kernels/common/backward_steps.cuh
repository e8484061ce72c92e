// Pieces shared by the mma.sync and the wgmma backward kernels: the D_i = rowsum(dO * O) and
// dQ-conversion kernels around the main one, and the elementwise steps on S^T and dP^T
// fragments (mma accumulator layout, keys on the rows, queries on the columns).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/common/launch_util.cuh"
#include "kernels/common/fragments.cuh"
#include "kernels/common/params.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/schedule.cuh"
#include "kernels/common/score_mod.cuh"
#include "kernels/common/sequence.cuh"
#include "kernels/common/softmax.cuh"
#include "workspace.h"

namespace cuflash::detail {

// Query row index (over batch, heads, seq_q) -> its [D] row of a strided tensor.
template <typename Tensor>
__device__ __forceinline__ auto row_pointer(const Tensor& tensor, const ProblemParams& p,
                                            int64_t row) {
  const int64_t bh = row / p.seq_q;
  return tensor.slice(bh / p.heads, bh % p.heads) + (row % p.seq_q) * tensor.seq_stride;
}

// Threads per row of the D_i kernel: kHeadDim / 8 (8 elements each) rounded up to a power of
// two, so that a row's threads sit in one warp and reduce with shuffles.
template <int kHeadDim>
inline constexpr int kRowDotThreadsPerRow =
    kHeadDim <= 64 ? (kHeadDim <= 32 ? kHeadDim / 8 : 8) : (kHeadDim <= 128 ? 16 : 32);

// The fp32 dQ accumulator and the semaphores of key group `group` (dq_sum_groups(), workspace.h;
// the prologue zeroes them).
template <typename Params>
__host__ __device__ __forceinline__ float* dq_group_accumulator(const Params& params, int group) {
  return params.dq_accum + group * params.dq_groups.accum_floats;
}
template <typename Params>
__host__ __device__ __forceinline__ int* dq_group_semaphores(const Params& params, int group) {
  return params.dq_semaphores + group * params.dq_groups.semaphore_ints;
}

// Zeroes columns col..col+7 of query row `row` in every key group's dQ accumulator, unless the
// first turns store (dq_first_turn_stores()); the accumulators' rows are kHeadDim floats.
template <int kHeadDim, typename Params>
__device__ __forceinline__ void zero_dq_accumulator_columns(const Params& params, int64_t row,
                                                            int col) {
  if (params.dq_groups.first_turn_stores) return;
  for (int group = 0; group < params.dq_groups.count; ++group) {
    float4* target =
        reinterpret_cast<float4*>(dq_group_accumulator(params, group) + row * kHeadDim + col);
    target[0] = make_float4(0.f, 0.f, 0.f, 0.f);
    target[1] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// D_i = rowsum(dO_i * O_i) for all B*H*Sq rows; kRowDotThreadsPerRow threads per row, 8 elements
// each (those of columns at or past head_dim read nothing and add 0). The same threads zero the
// rows' dQ accumulators: one launch instead of two (a memset before it took the same time: both
// are bound by DRAM bandwidth; H200, share/results/h200-2026-12-04-prologue-groups-d96/).
template <typename Element, int kHeadDim>
__global__ void __launch_bounds__(kElementwiseThreads)
    backward_row_dot_kernel(const BackwardParams<Element> params) {
  constexpr int kThreadsPerRow = kRowDotThreadsPerRow<kHeadDim>;
  static_assert(32 % kThreadsPerRow == 0, "a row's threads sit in one warp");
  static_assert(8 * kThreadsPerRow >= kHeadDim && kHeadDim <= 256, "a row's threads cover it");
  const ProblemParams& p = params.problem;
  if (blockIdx.x == 0 && threadIdx.x == 0) *params.tile_counter = 0;  // before the main kernel
  const int64_t total = p.batch * p.heads * p.seq_q * kThreadsPerRow;
  const int lane = threadIdx.x % 32;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  // The loop test is uniform over the warp (its first thread's index), so every lane takes part
  // in the shuffles.
  for (int64_t base = int64_t(blockIdx.x) * blockDim.x + threadIdx.x - lane; base < total;
       base += stride) {
    const int64_t index = base + lane;
    const bool active = index < total;
    const int64_t row = index / kThreadsPerRow;
    const int col = static_cast<int>(index % kThreadsPerRow) * 8;
    float dot = 0.f;
    if (active && col < p.head_dim) {
      float o[8];
      float d_o[8];
      load8(row_pointer(params.out, p, row) + col, o);
      load8(row_pointer(params.dout, p, row) + col, d_o);
#pragma unroll
      for (int i = 0; i < 8; ++i) dot = fmaf(o[i], d_o[i], dot);
    }
#pragma unroll
    for (int offset = kThreadsPerRow / 2; offset > 0; offset /= 2) {
      dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    }
    if (active && col == 0) params.row_dot[row] = dot;
    if (active && col < kHeadDim) zero_dq_accumulator_columns<kHeadDim>(params, row, col);
  }
}

// Where column `col` of query `query`'s dQ accumulator row lies when the rows are swizzled (the
// wgmma backward's layout): its group of 8 columns c at c ^ g(query % 8), within each group of 8
// groups, where g(r) is r with its lowest bit flipped when r >= 4. Both fragments a warp stages
// in this layout meet no bank conflicts: a dQ fragment's float pairs (each half warp 4
// consecutive rows of 8 columns, whose g differ in their lowest two bits) and a dQ^T fragment's
// single floats (4 rows of one parity, 8 columns each: their g also differ in the lowest two
// bits). The tile, laid out as in global memory, is added there by a single bulk reduce. Groups
// of 8 columns stay together (8-float loads still work).
__host__ __device__ constexpr int dq_swizzled_column(int64_t query, int col) {
  const int row = static_cast<int>(query % 8);
  return col ^ (8 * (row ^ (row >> 2)));
}

// The claims above, checked: rows are whole multiples of 32 floats (banks repeat every row), so
// a store's banks are those of its column groups, group g on banks 8 (g % 4) .. + 7. Each row
// permutes the 8 groups; for every column group, 4 consecutive rows from 0 or 4 (a half warp's
// float pairs) and the 4 rows of each parity (a warp's single floats) land on 4 different bank
// groups.
constexpr bool dq_swizzle_is_conflict_free() {
  const auto bank_group = [](int row, int group) {
    return (dq_swizzled_column(row, 8 * group) / 8) % 4;
  };
  // Rows first, first + step, + 2 step, + 3 step of column group `group` on 4 bank groups.
  const auto spread = [&](int group, int first, int step) {
    int seen = 0;
    for (int i = 0; i < 4; ++i) seen |= 1 << bank_group(first + i * step, group);
    return seen == 15;
  };
  for (int group = 0; group < 8; ++group) {
    const bool half_warps = spread(group, 0, 1) && spread(group, 4, 1);  // float pairs
    const bool parities = spread(group, 0, 2) && spread(group, 1, 2);    // single floats
    if (!half_warps || !parities) return false;
  }
  for (int row = 0; row < 8; ++row) {
    int seen = 0;
    for (int group = 0; group < 8; ++group) seen |= 1 << (dq_swizzled_column(row, 8 * group) / 8);
    if (seen != 255) return false;
  }
  return true;
}
static_assert(dq_swizzle_is_conflict_free());

// How many key groups' accumulators, from group 0, hold query row `row` (its index in its
// sequence). Where the first turns store (dq_first_turn_stores(), workspace.h), a group's
// accumulator holds the rows of the query blocks its key blocks meet and nothing else (no
// zeroing): those that see one of its keys, since the band has no left end there, that is the
// groups up to the one of the row's last visible key, none for a row that sees no key. (The
// rows of those blocks that see none of the group's keys hold zeros: skipped.) Elsewhere the
// prologue zeroed every group's accumulator.
template <typename Params>
__device__ __forceinline__ int dq_groups_holding_row(const Params& params, int64_t row) {
  if (!params.dq_groups.first_turn_stores) return params.dq_groups.count;
  const ProblemParams& p = params.problem;
  const int64_t last_key = min64(row + p.band_last, p.seq_k - 1);
  if (last_key < 0) return 0;
  return int(min64(last_key / params.dq_groups.keys + 1, params.dq_groups.count));
}

// dQ = scale * accumulator (the sum of the groups' accumulators that hold the row, in group
// order, where deterministic mode keeps several), converted to Element and written through dq's
// strides (the accumulator's rows have kHeadDim columns, dQ's the first head_dim of them;
// kSwizzledRows: in dq_swizzled_column()'s order, which needs rows of a multiple of 64 columns).
template <typename Element, int kHeadDim, bool kSwizzledRows = false>
__global__ void __launch_bounds__(kElementwiseThreads)
    backward_dq_convert_kernel(const BackwardParams<Element> params) {
  static_assert(!kSwizzledRows || kHeadDim % 64 == 0, "whole groups of 16 chunks");
  constexpr int kChunksPerRow = kHeadDim / 8;  // 8 elements per thread
  const ProblemParams& p = params.problem;
  const int64_t total = p.batch * p.heads * p.seq_q * kChunksPerRow;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; index < total;
       index += stride) {
    const int64_t row = index / kChunksPerRow;
    const int col = static_cast<int>(index % kChunksPerRow) * 8;
    if (col >= p.head_dim) continue;
    float values[8] = {};
    const int stored_col = kSwizzledRows ? dq_swizzled_column(row % p.seq_q, col) : col;
    const int groups = dq_groups_holding_row(params, row % p.seq_q);
    if (groups > 0) load8(params.dq_accum + row * kHeadDim + stored_col, values);
    for (int group = 1; group < groups; ++group) {  // in group order: fixed bits
      float more[8];
      load8(dq_group_accumulator(params, group) + row * kHeadDim + stored_col, more);
#pragma unroll
      for (int i = 0; i < 8; ++i) values[i] += more[i];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) values[i] *= p.scale;
    if (params.dq_sum.data != nullptr) {  // BackwardArgs::sums
      float* sum = row_pointer(params.dq_sum, p, row) + col;
#pragma unroll
      for (int i = 0; i < 8; ++i) sum[i] += values[i];
    } else {
      store8(row_pointer(params.dq, p, row) + col, values);
    }
  }
}

// P^T = exp2(S^T * scale_log2 - LSE * log2e) in place, for this thread's part of a warp's
// (16 keys, 8 * kTiles queries) block; the columns `visible` hides get 0.
template <int kTiles, bool kLeftBound>
__device__ __forceinline__ void probabilities_transposed(float (&st)[kTiles][4],
                                                         const float* lse, float scale_log2,
                                                         const VisibleColumns<kLeftBound>& visible,
                                                         int lane) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    const int col = 8 * t + 2 * (lane % 4);
    const float2 column_lse = *reinterpret_cast<const float2*>(lse + col);
    const float lse_log2[2] = {column_lse.x * kLog2e, column_lse.y * kLog2e};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = st[t][2 * half + e];
        x = fast_exp2(fmaf(x, scale_log2, -lse_log2[e]));
        if (visible.hides(half, col + e)) x = 0.f;
      }
    }
  }
}

template <ScoreModKind kKind, int kTiles, bool kHardwareTanh, typename OnSoftcapSlope>
__device__ __forceinline__ void modified_probabilities_transposed_as(
    float (&st)[kTiles][4], const float* lse, const ScoreMod<kHardwareTanh>& mod,
    int64_t distance0, int lane, OnSoftcapSlope&& on_softcap_slope) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    const int col = 8 * t + 2 * (lane % 4);
    const float2 column_lse = *reinterpret_cast<const float2*>(lse + col);
    const float lse_log2[2] = {column_lse.x * kLog2e, column_lse.y * kLog2e};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float distance = float(distance0 + col - 8 * half);  // exact below 2^24
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = st[t][2 * half + e];
        if constexpr (kKind == ScoreModKind::none) {
          x = fast_exp2(fmaf(x, mod.scale_log2, -lse_log2[e]));
        } else {
          float softcap_slope;
          x = fast_exp2(mod.template apply<kKind>(x, distance + float(e), softcap_slope) -
                        lse_log2[e]);
          if constexpr (kKind == ScoreModKind::softcap) {
            on_softcap_slope(t, 2 * half + e, softcap_slope);
          }
        }
      }
    }
  }
}

// probabilities_transposed() through the score modifications, without the mask (hide_columns()
// follows): P^T = exp2(mod(S^T) - LSE * log2e). With a softcap, on_softcap_slope(t, i, slope)
// receives d(capped)/d(scaled) of element st[t][i], for the chain rule of dS (the caller keeps
// it, or folds it into dP^T at once, which holds no array of slopes).
// `distance0` is q0 + offset - (key of fragment row `group`): the distance of the block's first
// query column to that key.
template <int kTiles, bool kHardwareTanh, typename OnSoftcapSlope>
__device__ __forceinline__ void modified_probabilities_transposed(
    float (&st)[kTiles][4], const float* lse, const ScoreMod<kHardwareTanh>& mod,
    int64_t distance0, int lane, OnSoftcapSlope&& on_softcap_slope) {
  switch (mod.kind()) {
    case ScoreModKind::softcap:
      return modified_probabilities_transposed_as<ScoreModKind::softcap>(st, lse, mod, distance0,
                                                                         lane, on_softcap_slope);
    case ScoreModKind::alibi:
      return modified_probabilities_transposed_as<ScoreModKind::alibi>(st, lse, mod, distance0,
                                                                       lane, on_softcap_slope);
    case ScoreModKind::none:
      return modified_probabilities_transposed_as<ScoreModKind::none>(st, lse, mod, distance0,
                                                                      lane, on_softcap_slope);
  }
}

// Zeroes the columns `visible` hides, after modified_probabilities_transposed(): a pass of its
// own, so that the mask's bounds take registers only in blocks that need it.
template <int kTiles>
__device__ __forceinline__ void hide_columns(float (&pt)[kTiles][4],
                                             const VisibleColumns<true>& visible, int lane) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (visible.hides(i / 2, 8 * t + 2 * (lane % 4) + i % 2)) pt[t][i] = 0.f;
    }
  }
}

// ds *= factor elementwise: dS^T = P^T * dpt where dpt already holds (dP^T - D) * slope, or
// the softcap's chain rule on score_gradients_transposed()'s result (factor: the slopes).
template <int kTiles>
__device__ __forceinline__ void multiply_elementwise(float (&ds)[kTiles][4],
                                                     const float (&factor)[kTiles][4]) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) ds[t][i] *= factor[t][i];
  }
}

// ds = P^T * (dP^T - D) for this thread's part of a warp's (16 keys, 8 * kTiles queries) block;
// D is indexed by the query column. `ds` may be `pt` or `dpt` itself (elementwise, in place).
template <int kTiles>
__device__ __forceinline__ void score_gradients_transposed(float (&ds)[kTiles][4],
                                                           const float (&pt)[kTiles][4],
                                                           const float (&dpt)[kTiles][4],
                                                           const float* row_dot, int lane) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    const float2 d = *reinterpret_cast<const float2*>(row_dot + 8 * t + 2 * (lane % 4));
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      ds[t][2 * half] = pt[t][2 * half] * (dpt[t][2 * half] - d.x);
      ds[t][2 * half + 1] = pt[t][2 * half + 1] * (dpt[t][2 * half + 1] - d.y);
    }
  }
}

// Adds a warp's (16 rows from row0, 8 * kTiles columns from col0) fp32 dQ fragment to one
// head's [seq_q, kHeadDim] accumulator with vector atomics, skipping rows past seq_q; `store`:
// writes it instead (a deterministic first turn, dq_first_turn_stores()).
template <int kHeadDim, int kTiles>
__device__ __forceinline__ void add_to_dq_accumulator(float* dq_accum, const float (&dq)[kTiles][4],
                                                      int64_t row0, int col0, int64_t seq_q,
                                                      int lane, bool store = false) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t row = row0 + lane / 4 + 8 * half;
    if (row >= seq_q) continue;
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      float* target = dq_accum + row * kHeadDim + col0 + 8 * t + 2 * (lane % 4);
      if (store) {
        *reinterpret_cast<float2*>(target) = make_float2(dq[t][2 * half], dq[t][2 * half + 1]);
      } else {
        atomic_add_pair(target, dq[t][2 * half], dq[t][2 * half + 1]);
      }
    }
  }
}

// --- Deterministic mode: dQ sums in a fixed order ----------------------------------------------
//
// Every key block of a kv head adds its part of dQ for a query block to the same fp32 rows of
// the accumulator. By default the atomics land in whatever order the CTAs get there, and as
// fp32 addition is not associative dQ's last bits vary from run to run. In deterministic mode
// the semaphore of each (batch, query head, query block) counts the key blocks whose part is
// in, and a key block adds its part only once it reads its turn: the key blocks that meet a query
// block are consecutive, F ... L, and every run of a call adds the parts in the same order,
// which the call's DqSumOrder (schedule.cuh) gives: F, F + 1, ..., L (key block n's turn is
// n - F, dq_turn_from_first()) or L, L - 1, ..., F (L - n, dq_turn_from_last()).
//
// Progress: a key block waits only for the key blocks of its (batch, kv head) that add before it,
// whose CTAs have lower linear indices in every order of block_order() (plain, interleaved, in
// groups of heads: a head's blocks come in increasing order in each, and in decreasing order
// where backward_block_order() reverses them for last_key_first).
// CTAs are dispatched in order of linear index, so those were started first and are running or
// done, and (by induction from the key block that adds first) none of them waits forever. Key
// groups (dq_sum_groups(), workspace.h) keep this: each group's turns run over its own key
// blocks, in the same direction, on its own semaphores. DqSumOrder::rotated gives each query
// block its own order of a group's g key blocks, the order in which they get there, and makes
// key blocks wait for later CTAs of their group: there progress takes the group's g CTAs to hold
// SMs at once, which the launch's condition gives (dq_turns_rotate(): g at most the SMs; the
// groups before one that started are all started, need nothing else, and end). Every key
// block's turn at one query block follows a turn taken there at an earlier step.

// Whether a deterministic call rotates its dQ sums (DqSumOrder::rotated): from the first key
// block up, without a mask, every key block of a key group waits for the one before it at every
// query block, and the last one's adds run g - 1 hand-overs behind its products, which its
// stages absorb only for a few blocks; with one CTA an SM nothing else runs meanwhile (H200,
// `fa` head_dim 64 without a mask at 1k-2k rows, 0.834-0.840x the default's speed). Rotated, the
// group's key blocks get to each query block steps apart and take their turns in that order. It
// takes every key block meeting every query block (no mask, no window, not even one bounded on
// the right alone, which is no variant; no variants; a dense batch), at least as many query
// blocks as a key group has key blocks (the groups' starts then differ), and groups of at most
// kRotatedUpToKeyBlocks key blocks. A key block then waits for later CTAs of its group
// (DqSumOrder): for progress those need SMs of their own (no more key blocks a group than SMs,
// and no kernel alongside holding more than SMs - g of them for its whole run), and for speed
// they must start soon after. Measured (H100, `fa` head_dim 64 without a mask, one group of as
// many key blocks as query blocks, deterministic time against first-key-first, medians):
// 0.85-0.94 at 512-2k rows; with a bound of 128, 0.91-0.94 at 4k, 0.94-0.96 at 8k, 1.02 at 16k
// (share/results/h100-2026-12-07-dq-rotated/). The bound stays at 16 key blocks (2k rows): there
// the first-key-first order cost most (0.83-0.87x the default's speed; 0.89-0.93x at 4k-8k), and
// the SMs a group must hold at once stay few. As with dq_sums_from_last_key(), dQ's bits follow
// the order, which here depends on the SM count too. The mma.sync kernels (sm80/backward.cuh)
// rotate under the same condition with fp32 inputs and one column part; more CTAs an SM only
// make the condition looser.
inline constexpr int64_t kRotatedUpToKeyBlocks = 16;
template <int kBlockM, int kBlockN>
bool dq_turns_rotate(const BackwardArgs& args, int multiprocessors) {
  const AttentionShape& s = args.shape;
  // The key blocks of the largest group (the first).
  const int64_t group_blocks =
      std::min(ceil_div(dq_groups_of(args).keys, kBlockN), ceil_div(s.seq_k, kBlockN));
  return args.deterministic && args.mask == Mask::none && !args.window.bounded() &&
         !uses_variant_kernels(args) && !args.varlen.enabled() && group_blocks > 1 &&
         group_blocks <= ceil_div(s.seq_q, kBlockM) && group_blocks <= kRotatedUpToKeyBlocks &&
         group_blocks <= multiprocessors;
}

// Which group of keys (dq_sum_groups(), workspace.h) key block `key_block` adds its dQ with:
// the groups are dq_groups.keys consecutive keys each, a multiple of every kernel's key block.
template <int kBlockN, typename Params>
__device__ __forceinline__ int dq_group(const Params& params, int key_block) {
  static_assert(kDqGroupKeyAlignment % kBlockN == 0, "a key block lies in one group");
  return static_cast<int>(int64_t(key_block) * kBlockN / params.dq_groups.keys);
}

// The first key of key group `group` (the turns count from it).
template <typename Params>
__device__ __forceinline__ int64_t dq_group_begin(const Params& params, int group) {
  return int64_t(group) * params.dq_groups.keys;
}

// The end of key group `group` (the turns of DqSumOrder::last_key_first count from it).
template <typename Params>
__device__ __forceinline__ int64_t dq_group_end(const Params& params, int group) {
  return dq_group_begin(params, group + 1);
}

// The semaphore of (batch, head) and the query block of rows [q0, q0 + kBlockM) among a key
// group's semaphores.
template <int kBlockM>
__device__ __forceinline__ int* dq_semaphore(int* semaphores, const ProblemParams& p,
                                             int64_t batch, int64_t head, int64_t q0) {
  static_assert(kBlockM >= kMinDqBlockRows, "the workspace holds a semaphore per 16 rows");
  const int64_t blocks = (p.max_seq_q + kBlockM - 1) / kBlockM;  // the grid's, in every sequence
  return semaphores + (batch * p.heads + head) * blocks + q0 / kBlockM;
}

// Spins until the key blocks before turn `turn` have added their parts (one thread). With
// `parts` CTAs per key block (column parts of dQ, sm80 traits.cuh: disjoint columns, so their
// order among themselves changes no bit) the semaphore counts parts: turn t waits for
// t * parts. Every one of those CTAs has a lower linear index (the part varies fastest).
__device__ __forceinline__ void wait_for_dq_turn(const int* semaphore, int turn, int parts = 1) {
  while (load_acquire(semaphore) < turn * parts) {
  }
}

// The same, given the semaphore's value `seen`, read ahead with load_relaxed() while other work
// ran: a turn passed by then costs a fence instead of a read's round trip to L2, the first turn
// nothing (no key block's adds come before it).
__device__ __forceinline__ void wait_for_dq_turn(const int* semaphore, int turn, int parts,
                                                 int seen) {
  if (turn == 0) return;
  if (seen >= turn * parts) return fence_acquire();
  wait_for_dq_turn(semaphore, turn, parts);
}

// Hands the query block to the next key block: one thread, after a barrier that every adding
// thread of the CTA passed after its atomics (the release makes them visible first).
__device__ __forceinline__ void pass_dq_turn(int* semaphore) { add_release(semaphore, 1); }

// Runs add(), the whole CTA's atomics of one query block's dQ part; with a semaphore (not
// null: deterministic mode) only in turn `turn` (dq_turn_from_first(); `parts`: CTAs per key
// block; `seen`: thread 0's load_relaxed() of the semaphore, read before dQ was multiplied).
template <typename Add>
__device__ __forceinline__ void add_dq_in_turn(int* semaphore, int turn, int parts, int thread,
                                               int seen, Add&& add) {
  if (semaphore == nullptr) return add();
  if (thread == 0) wait_for_dq_turn(semaphore, turn, parts, seen);
  __syncthreads();
  add();
  __syncthreads();
  if (thread == 0) pass_dq_turn(semaphore);
}

template <typename Element>
BackwardParams<Element> backward_params(const BackwardArgs& args) {
  const BackwardWorkspace workspace = split_workspace(args);
  BackwardParams<Element> params{};
  params.problem = problem_params(args);
  params.q = global_tensor<const Element>(args.q);
  params.k = global_tensor<const Element>(args.k);
  params.v = global_tensor<const Element>(args.v);
  params.out = global_tensor<const Element>(args.out);
  params.dout = global_tensor<const Element>(args.dout);
  params.lse = args.lse;
  params.dq = global_tensor<Element>(args.dq);
  params.dk = global_tensor<Element>(args.dk);
  params.dv = global_tensor<Element>(args.dv);
  params.dq_sum = global_tensor<float>(args.sums.dq);
  params.dk_sum = global_tensor<float>(args.sums.dk);
  params.dv_sum = global_tensor<float>(args.sums.dv);
  params.dq_accum = workspace.dq_accum;
  params.row_dot = workspace.row_dot;
  params.dq_semaphores = workspace.dq_semaphores;
  params.dq_groups = workspace.dq_groups;
  params.tile_counter = workspace.tile_counter;
  return params;
}

// Before the main kernel: zero the semaphores of deterministic mode, then compute D_i and zero
// the fp32 dQ accumulators (unless the first turns store, dq_first_turn_stores()) in one kernel.
// A varlen batch's rows are [1, heads, total_q] (packed_rows()); its semaphores stay [batch,
// heads, query blocks of the longest sequence].
template <typename Element, int kHeadDim>
void launch_backward_prologue(const BackwardParams<Element>& params, cudaStream_t stream) {
  if (params.dq_semaphores != nullptr) {
    check_cuda(cudaMemsetAsync(params.dq_semaphores, 0,
                               size_t(params.dq_groups.count) * params.dq_groups.semaphore_ints *
                                   sizeof(int),
                               stream),
               "backward: zeroing the dQ semaphores");
  }
  const BackwardParams<Element> rows = packed_rows(params);
  const ProblemParams& p = rows.problem;
  const int64_t query_rows = p.batch * p.heads * p.seq_q;
  const int64_t row_dot_threads = query_rows * kRowDotThreadsPerRow<kHeadDim>;
  launch_kernel(&backward_row_dot_kernel<Element, kHeadDim>,
                dim3(elementwise_blocks(row_dot_threads)), kElementwiseThreads, 0, stream, rows);
}

// After it: dQ = scale * accumulator in the output dtype and strides.
template <typename Element, int kHeadDim, bool kSwizzledRows = false>
void launch_backward_dq_convert(const BackwardParams<Element>& params, cudaStream_t stream) {
  const BackwardParams<Element> rows = packed_rows(params);
  const ProblemParams& p = rows.problem;
  const int64_t convert_threads = p.batch * p.heads * p.seq_q * (kHeadDim / 8);
  launch_kernel(&backward_dq_convert_kernel<Element, kHeadDim, kSwizzledRows>,
                dim3(elementwise_blocks(convert_threads)), kElementwiseThreads, 0, stream, rows);
}

}  // namespace cuflash::detail
