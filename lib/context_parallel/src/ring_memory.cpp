// ring_rank_device_bytes(): what one rank of the ring holds on its GPU, in builds with and
// without NCCL (the CLI checks a --gpus case against the free memory before it runs).
#include <algorithm>
#include <vector>

#include "chunk_merge.h"
#include "cuflash/context_parallel/plan.h"
#include "cuflash/context_parallel/ring.h"

namespace cuflash::context_parallel {

// The sizes of ring.cpp's RankShards (RingPasses) and RankScratch (Ring::Impl::make_scratch),
// for the largest shard: keep them in step with those.
size_t ring_rank_device_bytes(const AttentionShape& s, DType dtype, int gpus, bool backward) {
  const std::vector<Chunk> q_chunks = split_into_chunks(s.seq_q, 2 * gpus);
  const std::vector<Chunk> k_chunks = split_into_chunks(s.seq_k, 2 * gpus);
  int64_t largest_q_chunk = 1, largest_k_chunk = 1;
  for (const Chunk& c : q_chunks) largest_q_chunk = std::max(largest_q_chunk, c.size());
  for (const Chunk& c : k_chunks) largest_k_chunk = std::max(largest_k_chunk, c.size());
  const double element = dtype_size(dtype);
  const double q_shard = double(s.batch * s.heads * largest_shard(q_chunks) * s.head_dim);
  const double k_shard = double(s.batch * s.heads_kv * largest_shard(k_chunks) * s.head_dim);
  const double lse_shard = double(s.batch * s.heads * largest_shard(q_chunks));

  // Shards of Q, O, K, V and LSE, and the two ring buffers of K and V.
  double bytes = element * (2 * q_shard + 2 * k_shard) + 4 * lse_shard + element * 4 * k_shard;
  // A block's O, and the running merges of the two query chunks: the forward's scratch, which
  // the ring keeps for a backward of the same shape (make_scratch()).
  bytes += element * double(s.batch * s.heads * largest_q_chunk * s.head_dim);
  bytes += 2 * 4.0 *
           double(detail::ChunkMerge::out_floats(s, largest_q_chunk) +
                  detail::ChunkMerge::lse_floats(s, largest_q_chunk));
  if (!backward) return size_t(bytes);
  // dO, dQ, dK, dV shards; the fp32 dK/dV sums (two buffers being added to, and with more than
  // one rank two arriving), the fp32 dQ sum, the chunks' LSE rows and a block's workspace.
  const double sum_buffers = gpus > 1 ? 8 : 4;
  bytes += element * (2 * q_shard + 2 * k_shard) + 4 * (sum_buffers * k_shard + q_shard);
  bytes += 2 * 4.0 * double(s.batch * s.heads * largest_q_chunk);
  AttentionShape block = s;
  block.seq_q = largest_q_chunk;
  block.seq_k = largest_k_chunk;
  bytes += double(backward_workspace_size(block, dtype, true));
  return size_t(bytes);
}

}  // namespace cuflash::context_parallel
