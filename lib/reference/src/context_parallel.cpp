#include "cuflash/reference/context_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "attention_engine.h"

namespace cuflash::reference {

namespace {

using context_parallel::Chunk;

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Rows `rows` of each of `planes` [seq, width] planes: [planes, rows, width].
std::vector<double> gather_rows(const std::vector<double>& x, int64_t planes, int64_t seq,
                                int64_t width, const Chunk& rows) {
  std::vector<double> gathered;
  gathered.reserve(size_t(planes * rows.size() * width));
  for (int64_t plane = 0; plane < planes; ++plane) {
    const auto first = x.begin() + (plane * seq + rows.begin) * width;
    gathered.insert(gathered.end(), first, first + rows.size() * width);
  }
  return gathered;
}

// The inverse of gather_rows(): writes [planes, rows, width] into rows `rows` of `x`.
void scatter_rows(const std::vector<double>& gathered, int64_t planes, int64_t seq,
                  int64_t width, const Chunk& rows, std::vector<double>& x) {
  for (int64_t plane = 0; plane < planes; ++plane) {
    const auto first = gathered.begin() + plane * rows.size() * width;
    std::copy(first, first + rows.size() * width, x.begin() + (plane * seq + rows.begin) * width);
  }
}

// The block's problem: the chunks' lengths, everything else the whole problem's.
Problem block_problem(const Problem& p, const Chunk& queries, const Chunk& keys) {
  Problem block = p;
  block.shape.seq_q = queries.size();
  block.shape.seq_k = keys.size();
  return block;
}

// The partial result of the rank's query chunk `query_chunk`: its blocks merged in the order of
// the ring steps, as the rank would merge them while the K/V shards pass by.
PartialResult run_query_chunk(const Problem& p, const context_parallel::Plan& plan,
                              const context_parallel::RankPlan& rank, int query_chunk,
                              const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v) {
  const AttentionShape& s = p.shape;
  const Chunk& queries = plan.query_chunks[size_t(query_chunk)];
  const std::vector<double> chunk_q =
      gather_rows(q, s.batch * s.heads, s.seq_q, s.head_dim, queries);
  PartialResult partial = empty_partial(s, queries.size());
  for (const context_parallel::RingStep& step : rank.steps) {
    for (const context_parallel::Block& block : step.blocks) {
      if (block.query_chunk != query_chunk) continue;
      const Chunk& keys = plan.key_chunks[size_t(block.key_chunk)];
      const int64_t kv_planes = s.batch * s.heads_kv;
      // Global positions: query i of the chunk is queries.begin + i, key j keys.begin + j.
      const int64_t offset = plan.band.offset + queries.begin - keys.begin;
      merge_partial(partial,
                    forward_block(block_problem(p, queries, keys), offset, chunk_q,
                                  gather_rows(k, kv_planes, s.seq_k, s.head_dim, keys),
                                  gather_rows(v, kv_planes, s.seq_k, s.head_dim, keys)),
                    s.head_dim);
    }
  }
  return partial;
}

}  // namespace

PartialResult empty_partial(const AttentionShape& shape, int64_t rows) {
  PartialResult partial;
  partial.out.assign(size_t(shape.batch * shape.heads * rows * shape.head_dim), 0.0);
  partial.lse.assign(size_t(shape.batch * shape.heads * rows), -kInfinity);
  return partial;
}

void merge_partial(PartialResult& into, const ForwardResult& block, int64_t head_dim) {
  for (size_t row = 0; row < into.lse.size(); ++row) {
    const double block_lse = block.lse[row];
    if (block_lse == kInfinity) continue;  // the row saw no key of the block: weight 0
    const double lse = into.lse[row];
    const double high = std::max(lse, block_lse);
    // log(exp(a) + exp(b)) = high + log1p(exp(low - high)), exact when one side is -inf.
    const double merged = high + std::log1p(std::exp(std::min(lse, block_lse) - high));
    const double kept = std::exp(lse - merged);
    const double added = std::exp(block_lse - merged);
    double* out = into.out.data() + row * size_t(head_dim);
    const double* block_out = block.out.data() + row * size_t(head_dim);
    for (int64_t d = 0; d < head_dim; ++d) out[d] = kept * out[d] + added * block_out[d];
    into.lse[row] = merged;
  }
}

ForwardResult finish_partial(PartialResult partial) {
  ForwardResult result{std::move(partial.out), std::move(partial.lse)};
  for (double& lse : result.lse) {
    if (lse == -kInfinity) lse = kInfinity;  // no key at all: forward()'s convention
  }
  return result;
}

ForwardResult context_parallel_forward(const Problem& p, int ranks, const std::vector<double>& q,
                                       const std::vector<double>& k,
                                       const std::vector<double>& v) {
  engine::check_forward_inputs(p, q, k, v);
  if (ranks < 1) throw std::invalid_argument("ranks (" + std::to_string(ranks) + ") must be >= 1");
  if (p.varlen() || !p.cache_seqlens.empty()) {
    throw std::invalid_argument(
        "context_parallel_forward: one dense problem only (no seqlens_q, no cache_seqlens)");
  }
  const AttentionShape& s = p.shape;
  const context_parallel::Plan plan =
      context_parallel::make_plan(s.seq_q, s.seq_k, p.mask, p.window, ranks);
  ForwardResult result{std::vector<double>(size_t(s.q_elements())),
                       std::vector<double>(size_t(s.lse_elements()))};
  for (const context_parallel::RankPlan& rank : plan.rank_plans) {
    for (const int query_chunk : rank.query_chunks) {
      const Chunk& queries = plan.query_chunks[size_t(query_chunk)];
      const ForwardResult chunk =
          finish_partial(run_query_chunk(p, plan, rank, query_chunk, q, k, v));
      const int64_t planes = s.batch * s.heads;
      scatter_rows(chunk.out, planes, s.seq_q, s.head_dim, queries, result.out);
      scatter_rows(chunk.lse, planes, s.seq_q, 1, queries, result.lse);
    }
  }
  return result;
}

}  // namespace cuflash::reference
