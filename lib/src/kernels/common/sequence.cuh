// The sequence a CTA works on. In a dense batch every (batch, head) slice has the grid's lengths
// and starts at its batch stride; in a variable-length packed batch (VarlenBatch) slice b holds
// the tokens [cu_seqlens[b], cu_seqlens[b + 1]) of one shared token axis, with lengths of its
// own. sequence_params() turns the launch's parameters into those of the CTA's sequence, so that
// the kernels' loops, masks and stores run unchanged on "a problem of these lengths":
//   - seq_q, seq_k: the sequence's lengths (a CTA whose block lies past them has nothing to do);
//   - the band (mask and window): moved to the sequence's own diagonal, len_k - len_q
//     bottom-right or 0 top-left;
//   - first_row, first_key: its first query and key token, where its rows start in the tensors
//     (GlobalTensor::slice(batch, head, first); batch_stride is 0 in a varlen batch) and in the
//     [heads, total_q] LSE and workspace rows (ProblemParams::row_index()).
// A dense batch gets the parameters back unchanged. The tensors' pointers stay those of the
// launch (kernel constants), so that a dense CTA holds no more pointers in registers than before.
#pragma once

#include <cstdint>

#include "kernels/common/params.cuh"
#include "kernels/common/schedule.cuh"

namespace cuflash::detail {

// The problem of sequence `batch`.
__device__ __forceinline__ ProblemParams sequence_problem(const ProblemParams& grid,
                                                          int64_t batch) {
  ProblemParams p = grid;
  if (grid.cu_seqlens_q == nullptr) return p;
  p.first_row = __ldg(grid.cu_seqlens_q + batch);
  p.first_key = __ldg(grid.cu_seqlens_k + batch);
  p.seq_q = __ldg(grid.cu_seqlens_q + batch + 1) - p.first_row;
  p.seq_k = __ldg(grid.cu_seqlens_k + batch + 1) - p.first_key;
  // The band's offsets all move with the diagonal (problem_params() placed it for the longest
  // lengths); unbounded sides stay far beyond any sequence.
  const int64_t offset = grid.top_left ? 0 : p.seq_k - p.seq_q;
  const int64_t shift = offset - grid.offset;
  p.offset = offset;
  p.band_first += shift;
  p.band_last += shift;
  return p;
}

// The parameters of the sequence of the CTA at `order` (block_order()) in the forward grid
// (batch * heads + head on y).
template <typename Element>
__device__ __forceinline__ ForwardParams<Element> sequence_params(
    const ForwardParams<Element>& grid, BlockOrder order) {
  ForwardParams<Element> params = grid;
  params.problem =
      sequence_problem(grid.problem, (grid.bh_offset + order.head) / grid.problem.heads);
  return params;
}

// ... in the backward grid (batch * heads_kv + kv head on y).
template <typename Element>
__device__ __forceinline__ BackwardParams<Element> sequence_params(
    const BackwardParams<Element>& grid, BlockOrder order) {
  BackwardParams<Element> params = grid;
  params.problem =
      sequence_problem(grid.problem, (grid.bh_offset + order.head) / grid.problem.heads_kv);
  return params;
}

// Where the tokens of a CTA's sequence start, for a kernel compiled for both kinds of batch
// (kMayBeVarlen) or for dense batches only; the latter get a dense batch's offsets as constants
// (0, [B, H, Sq] rows), so that the varlen fields cost them no registers.
template <bool kMayBeVarlen>
struct SequenceStart {
  const ProblemParams& p;  // the CTA's problem (sequence_problem())

  __device__ __forceinline__ int64_t first_row() const { return kMayBeVarlen ? p.first_row : 0; }
  __device__ __forceinline__ int64_t first_key() const { return kMayBeVarlen ? p.first_key : 0; }
  // The first of (batch, head)'s rows of LSE, D and the dQ accumulator.
  __device__ __forceinline__ int64_t rows(int64_t batch, int64_t head) const {
    return kMayBeVarlen ? p.row_index(batch, head) : (batch * p.heads + head) * p.seq_q;
  }
  // Batch entry `batch` in TMA tensor maps, which map a varlen batch's packed tensors as one
  // entry of all the tokens.
  __device__ __forceinline__ int64_t map_batch(int64_t batch) const {
    return kMayBeVarlen && p.cu_seqlens_q != nullptr ? 0 : batch;
  }
};

// For the backward's row-wise kernels (D_i, the dQ conversion), which walk every query row of
// [B, H, Sq]: a varlen batch's rows are those of one batch entry of total_q tokens, [1, H,
// total_q], which is how LSE and the workspace store them. A dense batch is returned unchanged.
template <typename Params>
Params packed_rows(Params params) {
  if (params.problem.cu_seqlens_q == nullptr) return params;
  params.problem.batch = 1;
  params.problem.seq_q = params.problem.total_q;
  params.problem.cu_seqlens_q = nullptr;  // row_index() of [1, H, total_q]: dense
  params.problem.cu_seqlens_k = nullptr;
  return params;
}

}  // namespace cuflash::detail
