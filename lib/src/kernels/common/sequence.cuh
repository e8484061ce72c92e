// The sequence a CTA works on. In a dense batch every (batch, head) slice has the grid's lengths
// and starts at its batch stride; in a variable-length packed batch (VarlenBatch) slice b holds
// the tokens [cu_seqlens[b], cu_seqlens[b + 1]) of one shared token axis, with lengths of its
// own. sequence_params() turns the launch's parameters into those of the CTA's sequence, so that
// the kernels' loops, masks and stores run unchanged on "a problem of these lengths":
//   - seq_q, seq_k: the sequence's lengths (a CTA whose block lies past them has nothing to do);
//   - the band (mask and window): moved to the sequence's own diagonal, len_k - len_q
//     bottom-right or 0 top-left;
//   - first_row: where its rows start in the [heads, total_q] LSE and workspace rows
//     (ProblemParams::row_index());
//   - the tensors: data moved to the sequence's first token (batch_stride is 0 in a varlen
//     batch, so slice(b, h) then adds only the head).
// A dense batch gets the parameters back unchanged.
#pragma once

#include <cstdint>

#include "kernels/common/params.cuh"
#include "kernels/common/schedule.cuh"

namespace cuflash::detail {

// The problem of sequence `batch`; q_begin and k_begin get its first query and key token (0 for
// a dense batch).
__device__ __forceinline__ ProblemParams sequence_problem(const ProblemParams& grid,
                                                          int64_t batch, int64_t& q_begin,
                                                          int64_t& k_begin) {
  ProblemParams p = grid;
  q_begin = 0;
  k_begin = 0;
  if (grid.cu_seqlens_q == nullptr) return p;
  q_begin = __ldg(grid.cu_seqlens_q + batch);
  k_begin = __ldg(grid.cu_seqlens_k + batch);
  p.seq_q = __ldg(grid.cu_seqlens_q + batch + 1) - q_begin;
  p.seq_k = __ldg(grid.cu_seqlens_k + batch + 1) - k_begin;
  p.first_row = q_begin;
  // The band's offsets all move with the diagonal (problem_params() placed it for the longest
  // lengths); unbounded sides stay far beyond any sequence.
  const int64_t offset = grid.top_left ? 0 : p.seq_k - p.seq_q;
  const int64_t shift = offset - grid.offset;
  p.offset = offset;
  p.band_first += shift;
  p.band_last += shift;
  return p;
}

template <typename Tensor>
__device__ __forceinline__ void move_to_token(Tensor& tensor, int64_t token) {
  tensor.data += token * tensor.seq_stride;
}

// The parameters of the sequence of the CTA at `order` (block_order()) in the forward grid
// (batch * heads + head on y).
template <typename Element>
__device__ __forceinline__ ForwardParams<Element> sequence_params(
    const ForwardParams<Element>& grid, BlockOrder order) {
  ForwardParams<Element> params = grid;
  const int64_t batch = (grid.bh_offset + order.head) / grid.problem.heads;
  int64_t q_begin, k_begin;
  params.problem = sequence_problem(grid.problem, batch, q_begin, k_begin);
  move_to_token(params.q, q_begin);
  move_to_token(params.out, q_begin);
  move_to_token(params.k, k_begin);
  move_to_token(params.v, k_begin);
  return params;
}

// ... in the backward grid (batch * heads_kv + kv head on y).
template <typename Element>
__device__ __forceinline__ BackwardParams<Element> sequence_params(
    const BackwardParams<Element>& grid, BlockOrder order) {
  BackwardParams<Element> params = grid;
  const int64_t batch = (grid.bh_offset + order.head) / grid.problem.heads_kv;
  int64_t q_begin, k_begin;
  params.problem = sequence_problem(grid.problem, batch, q_begin, k_begin);
  move_to_token(params.q, q_begin);
  move_to_token(params.out, q_begin);
  move_to_token(params.dout, q_begin);
  move_to_token(params.dq, q_begin);
  move_to_token(params.k, k_begin);
  move_to_token(params.v, k_begin);
  move_to_token(params.dk, k_begin);
  move_to_token(params.dv, k_begin);
  return params;
}

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
