// Moving densely stored K or V into a paged cache on the device, for the host runner's and the
// benchmark's paged runs (host_runner.h: DeviceForwardExtras).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuflash/problem.h"

namespace cuflash::detail {

// Where a problem's keys go in its paged cache: every batch entry's pages in a shuffled order
// (a fixed seed, so paged runs are reproducible) within a pool that holds a quarter more pages
// than the batch uses, the unused ones between the used ones.
struct PageLayout {
  std::vector<int32_t> block_table;  // [batch, pages_per_sequence]
  int64_t num_pages = 0;
  int64_t pages_per_sequence = 0;  // ceil(seq_k / page_size)
  size_t pool_bytes = 0;           // of one pool: [num_pages, page_size, heads_kv, head_dim]
};
// Throws cuflash::Error (invalid_argument: no page size, more pages than int32 indices hold, a
// pool size that overflows).
PageLayout page_layout(const Problem& problem);

// Copies K or V of `problem`, stored densely in its layout (bhsd or bshd) at `dense`, into
// `pool` through `block_table` (on the device, PageLayout's) on `stream`. Leaves the pool's
// unused pages and slots past seq_k as they are.
void scatter_into_pages(const Problem& problem, const void* dense, const int32_t* block_table,
                        int64_t pages_per_sequence, void* pool, cudaStream_t stream);

}  // namespace cuflash::detail
