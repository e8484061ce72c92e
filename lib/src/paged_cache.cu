#include "paged_cache.h"

#include <algorithm>
#include <limits>
#include <string>

#include "cuflash/cuda_error.h"
#include "cuflash/error.h"
#include "int_math.h"

namespace cuflash::detail {
namespace {

// A permutation of 0..count-1 from a fixed seed (splitmix64 driving Fisher-Yates).
std::vector<int32_t> shuffled_pages(int64_t count) {
  uint64_t state = 0x7061676564ull;  // "paged"
  const auto next = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  std::vector<int32_t> order(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) order[i] = static_cast<int32_t>(i);
  for (int64_t i = count - 1; i > 0; --i) {
    std::swap(order[i], order[next() % uint64_t(i + 1)]);
  }
  return order;
}

// The rows of one K or V tensor: `rows` = batch * seq_k * heads_kv rows of `units_per_row`
// copy units each, numbered in their dense storage order.
struct RowGeometry {
  int64_t rows = 0;
  int64_t units_per_row = 0;
  int64_t seq_k = 0;
  int64_t heads_kv = 0;
  int64_t page_size = 0;
  int64_t pages_per_sequence = 0;
  bool bhsd = true;
};

// One thread a copy unit (grid-stride): dense row (b, h, key) to page row
// block_table[b, key / page_size] * page_size + key % page_size, kv head h.
template <typename Unit>
__global__ void scatter_rows_kernel(const Unit* dense, Unit* pool, const int32_t* block_table,
                                    RowGeometry g) {
  const int64_t units = g.rows * g.units_per_row;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < units; i += stride) {
    const int64_t row = i / g.units_per_row;
    int64_t batch, head, key;
    if (g.bhsd) {  // row = (batch * heads_kv + head) * seq_k + key
      key = row % g.seq_k;
      head = (row / g.seq_k) % g.heads_kv;
      batch = row / (g.seq_k * g.heads_kv);
    } else {  // row = (batch * seq_k + key) * heads_kv + head
      head = row % g.heads_kv;
      key = (row / g.heads_kv) % g.seq_k;
      batch = row / (g.seq_k * g.heads_kv);
    }
    const int64_t page = block_table[batch * g.pages_per_sequence + key / g.page_size];
    const int64_t page_row = page * g.page_size + key % g.page_size;
    pool[(page_row * g.heads_kv + head) * g.units_per_row + i % g.units_per_row] = dense[i];
  }
}

template <typename Unit>
void launch_scatter(const void* dense, void* pool, const int32_t* block_table, RowGeometry g,
                    cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t units = g.rows * g.units_per_row;
  const int blocks = static_cast<int>(std::min<int64_t>(ceil_div(units, kThreads), 65536));
  scatter_rows_kernel<Unit><<<blocks, kThreads, 0, stream>>>(
      static_cast<const Unit*>(dense), static_cast<Unit*>(pool), block_table, g);
  check_cuda(cudaGetLastError(), "paging K/V: kernel launch");
}

}  // namespace

PageLayout page_layout(const Problem& problem) {
  const AttentionShape& s = problem.shape;
  const int64_t page_size = problem.page_size;
  if (page_size <= 0) {
    throw Error(Error::Kind::invalid_argument, "page_size must be positive");
  }
  PageLayout layout;
  layout.pages_per_sequence = ceil_div(s.seq_k, page_size);
  const int64_t used = s.batch * layout.pages_per_sequence;
  layout.num_pages = used + used / 4 + 1;  // a quarter more, unused, between the used ones
  if (layout.num_pages > std::numeric_limits<int32_t>::max()) {
    throw Error(Error::Kind::invalid_argument, "paged K/V: more pages than int32 indices hold");
  }
  const std::vector<int32_t> order = shuffled_pages(layout.num_pages);
  layout.block_table.assign(order.begin(), order.begin() + used);

  size_t pool_bytes = size_t(s.head_dim) * size_t(dtype_size(problem.dtype));
  for (const int64_t factor : {layout.num_pages, page_size, s.heads_kv}) {
    if (pool_bytes > std::numeric_limits<size_t>::max() / size_t(factor)) {
      throw Error(Error::Kind::invalid_argument, "paged K/V: the page pools' size overflows");
    }
    pool_bytes *= size_t(factor);
  }
  layout.pool_bytes = pool_bytes;
  return layout;
}

void scatter_into_pages(const Problem& problem, const void* dense, const int32_t* block_table,
                        int64_t pages_per_sequence, void* pool, cudaStream_t stream) {
  const AttentionShape& s = problem.shape;
  if (problem.layout != Layout::bhsd && problem.layout != Layout::bshd) {
    throw Error(Error::Kind::invalid_argument,
                "paged K/V: K and V must be stored as bhsd or bshd, not " +
                    std::string(to_string(problem.layout)));
  }
  const int64_t row_bytes = s.head_dim * dtype_size(problem.dtype);
  RowGeometry g;
  g.rows = s.batch * s.seq_k * s.heads_kv;
  g.seq_k = s.seq_k;
  g.heads_kv = s.heads_kv;
  g.page_size = problem.page_size;
  g.pages_per_sequence = pages_per_sequence;
  g.bhsd = problem.layout == Layout::bhsd;
  // The widest unit that divides a row (both buffers are cudaMalloc'd: rows stay aligned to it).
  if (row_bytes % 16 == 0) {
    g.units_per_row = row_bytes / 16;
    launch_scatter<uint4>(dense, pool, block_table, g, stream);
  } else if (row_bytes % 4 == 0) {
    g.units_per_row = row_bytes / 4;
    launch_scatter<uint32_t>(dense, pool, block_table, g, stream);
  } else {
    g.units_per_row = row_bytes / 2;
    launch_scatter<uint16_t>(dense, pool, block_table, g, stream);
  }
}

}  // namespace cuflash::detail
