// Context-parallel attention in one process, on the float64 reference: the N ranks of the plan
// (cuflash/context_parallel/plan.h) run one after another, each block through forward_block()
// at its global positions, and the partial results of a query chunk are merged by their
// log-sum-exp, as the ranks of a ring would merge them. The result equals forward() up to
// float64 rounding: a check of the partitioning and of the merge, not a faster forward.
#pragma once

#include <cstdint>
#include <vector>

#include "cuflash/context_parallel/plan.h"
#include "cuflash/reference/attention_ref.h"

namespace cuflash::reference {

// The running result of some query rows over the key blocks merged so far: O [B, H, rows, D] and
// LSE [B, H, rows]. An LSE of -inf marks a row that has seen no key yet.
struct PartialResult {
  std::vector<double> out;
  std::vector<double> lse;
};

// A partial result of `rows` rows that has seen no key.
PartialResult empty_partial(const AttentionShape& shape, int64_t rows);

// Merges a block's forward result into `into` (both of the same rows): per row,
// LSE = log(exp(LSE_a) + exp(LSE_b)) and O = exp(LSE_a - LSE) O_a + exp(LSE_b - LSE) O_b. A block
// row with LSE +inf (it saw no key of the block, forward()'s convention) has weight 0.
void merge_partial(PartialResult& into, const ForwardResult& block, int64_t head_dim);

// The finished result of a partial one: rows that never saw a key get O = 0 and LSE = +inf.
ForwardResult finish_partial(PartialResult partial);

// forward(p, q, k, v) computed as `ranks` context-parallel ranks would, one after another.
// Throws like forward(), and std::invalid_argument for ranks < 1, a varlen batch or
// cache_seqlens.
ForwardResult context_parallel_forward(const Problem& p, int ranks, const std::vector<double>& q,
                                       const std::vector<double>& k,
                                       const std::vector<double>& v);

}  // namespace cuflash::reference
