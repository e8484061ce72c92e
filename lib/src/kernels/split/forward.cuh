// Split-KV forward (flash-decoding) with grouped-query head packing, on mma.sync (fp16 / bf16).
//
// Built for short queries against long key sequences, where the cost is reading K and V once:
//   - the query heads that share a kv head are stacked as the rows of one problem, packed row
//     r = query (r / heads_per_kv) of head (kv_head * heads_per_kv + r % heads_per_kv), so a CTA
//     reads its kv head's K/V once for the whole group (query-major: under a causal mask the
//     rows of a block see nearly the same keys);
//   - the key blocks of each row block are divided into `splits` contiguous runs, one CTA each,
//     so that batch * heads_kv * row blocks * splits fills the GPU; each CTA writes its rows'
//     O (normalized over its keys, fp32) and LSE into the workspace and merge.cuh combines them.
//     With one split the CTA writes O and LSE directly.
// Per CTA: Q as A fragments straight from global memory into registers (no shared tile), K/V
// blocks of 64 keys through kStages cp.async buffers (rows swizzled where they are whole
// 128-byte segments: ChunkSwizzledTile, common/fragments.cuh), then per block:
//   S = Q K_j^T; mask the causal diagonal and the end of the keys;
//   online softmax in exp2 (common/softmax.cuh); O += P V_j with P reused in registers.
// Narrow configurations give the four warps a quarter of each key block and merge their
// states at the end (sm80::merge_key_parts). No atomics: results are bitwise reproducible for a
// given split count.
// Two options change only where keys come from and how many there are, never the arithmetic:
// a paged cache (each K/V row's address through the block table, still 16-byte cp.async
// vectors), so paged and contiguous K/V give the same bits; and per-sequence key lengths (the
// CTAs of a short sequence walk only its own key blocks).
// A head_dim below kHeadDim (head_dims.h) reads its missing columns of Q, K and V as zeros and
// stores no column of O (or of the fp32 partials, whose rows have head_dim columns) past it:
// kPadded, an instantiation of its own, so that the full head_dim's kernel keeps its registers
// (the column tests there would be uniform but not free in this register-bound kernel).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuflash/attention.h"
#include "cuflash/error.h"
#include "dispatch.h"
#include "kernels/common/copy.cuh"
#include "kernels/common/fragments.cuh"
#include "kernels/common/launch_util.cuh"
#include "kernels/common/params.cuh"
#include "kernels/common/softmax.cuh"
#include "kernels/sm80/forward.cuh"
#include "kernels/sm80/mma_ops.cuh"
#include "kernels/split/plan.h"
#include "kernels/split/traits.cuh"

namespace cuflash::detail::split {

template <typename Element>
struct SplitParams {
  ProblemParams problem;
  GlobalTensor<const Element> q, k, v;
  GlobalTensor<Element> out;
  float* lse;                // [B, H, Sq]
  float* partial_out;        // [splits, B, H, Sq, D] when splits > 1
  float* partial_lse;        // [splits, B, H, Sq] when splits > 1
  int64_t splits;            // CTAs per row block, each with a run of its key blocks
  int64_t bh_offset;         // batch * heads_kv + kv head of blockIdx.y == 0
  int64_t head_group;        // kv heads launched side by side (cta_work()); 1: launch order
  // Paged K/V: k and v are the pools seen as [page row, kv head, D] (batch stride 0), and the
  // key j of batch b is page row block_table[b, j >> page_shift] << page_shift | j % page size.
  const int32_t* block_table;  // [B, block_table_stride]; null for contiguous K/V
  int64_t block_table_stride;
  int page_shift;              // log2(page_size)
  const int32_t* cache_seqlens;  // [B] keys per batch entry; null: seq_k for every entry
  bool diagonal_follows_length;  // causal bottom-right: the diagonal ends at each entry's length
};

// The keys [0, length) of one batch entry and its causal offset (row i sees key j <= i + offset).
struct SequenceKeys {
  int64_t length;
  int64_t causal_offset;
};

template <typename Element>
__device__ __forceinline__ SequenceKeys sequence_keys(const SplitParams<Element>& params,
                                                      int64_t batch) {
  const ProblemParams& p = params.problem;
  // band_last is the causal diagonal's offset (the split kernel serves no window).
  if (params.cache_seqlens == nullptr) return {p.seq_k, p.band_last};
  // Clamped so that a bad length cannot send the loads past the caller's memory.
  const int64_t length = clamp64(__ldg(params.cache_seqlens + batch), 0, p.seq_k);
  return {length, p.band_last + (params.diagonal_follows_length ? length - p.seq_k : 0)};
}

// The packed rows of one thread's fragment rows (group, group + 8) in a CTA's block.
// Query indices and key counts fit 32 bits (sequence lengths stay below 2^31, api.cu).
struct FragmentRows {
  bool valid[2];        // below heads_per_kv * seq_q
  int64_t head[2];      // query head
  int query[2];         // query index
  int visible_end[2];   // the row sees keys [0, visible_end)
};

__device__ __forceinline__ FragmentRows fragment_rows(const ProblemParams& p,
                                                      const SequenceKeys& keys, int64_t kv_head,
                                                      int64_t first_row) {
  const int64_t rows = p.heads_per_kv * p.seq_q;
  FragmentRows f;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t row = first_row + 8 * half;
    f.valid[half] = row < rows;
    const int64_t query = row / p.heads_per_kv;
    f.query[half] = static_cast<int>(query);
    f.head[half] = kv_head * p.heads_per_kv + row % p.heads_per_kv;
    f.visible_end[half] = static_cast<int>(
        p.causal ? clamp64(query + keys.causal_offset + 1, 0, keys.length) : keys.length);
  }
  return f;
}

// The work of this CTA: which (row block, split), blockIdx.x's range, of which (batch, kv
// head), blockIdx.y's. In launch order, unless params.head_group > 1: then runs of head_group
// consecutive CTAs take the same (row block, split) of head_group consecutive kv heads of one
// batch entry. Where K and V interleave the heads in each key's row (bshd, and paged caches'
// [page row, kv head, D]), those CTAs read the same rows of memory at about the same time, as
// whole rows rather than each its 128-byte share of every row at its own moment (H200,
// performance log 2026-12-03, head_dim 64, B=64 GQA-4 128k keys: bshd 3.948 -> 3.888 ms, pages
// of 64 keys 4.091 -> 4.025; B=8 GQA-4 32k 1.5-3 % faster; bhsd, launched so, unchanged).
struct CtaWork {
  int64_t row_split;  // row block * splits + split
  int64_t bh_kv;      // batch * heads_kv + kv head
};
template <typename Element>
__device__ __forceinline__ CtaWork cta_work(const SplitParams<Element>& params) {
  const int64_t group = params.head_group;
  if (group == 1) return {blockIdx.x, params.bh_offset + blockIdx.y};
  const int64_t linear = int64_t(blockIdx.y) * gridDim.x + blockIdx.x;
  const int64_t rest = linear / group;  // gridDim.y is a multiple of group
  return {rest % gridDim.x, params.bh_offset + (rest / gridDim.x) * group + linear % group};
}

// Keys [0, end) some row of the block [row0, row0 + block_rows) sees: the last row sees most.
__device__ __forceinline__ int64_t block_key_end(const ProblemParams& p, const SequenceKeys& keys,
                                                 int64_t row0, int block_rows) {
  const int64_t last_row = min64(row0 + block_rows, p.heads_per_kv * p.seq_q) - 1;
  return p.causal ? clamp64(last_row / p.heads_per_kv + keys.causal_offset + 1, 0, keys.length)
                  : keys.length;
}

// The page row of key `key` of a batch entry whose block table row is `pages`.
__device__ __forceinline__ int64_t page_row(const int32_t* pages, int page_shift, int64_t key) {
  const int64_t slot_mask = (int64_t{1} << page_shift) - 1;
  return (int64_t(__ldg(pages + (key >> page_shift))) << page_shift) | (key & slot_mask);
}

// Starts loading keys key0..key0+kRows-1 of one (batch, kv head) into a K or V tile (kRows, D);
// keys at or past `length` and columns at or past `cols` become zeros. `pages` is the batch
// entry's block table row (paged K/V: `slice` then addresses page rows) or null (contiguous:
// `slice` addresses keys).

template <int kRows, int kCols, int kThreads, typename Tile, typename Element>
__device__ __forceinline__ void load_kv_tile_async(Tile tile, const Element* slice,
                                                   int64_t seq_stride, const int32_t* pages,
                                                   int page_shift, int64_t key0, int64_t length,
                                                   int thread, int cols) {
  if (pages == nullptr) {
    load_tile_async<kRows, kCols, kThreads>(tile, slice, seq_stride, key0, length, thread, cols);
    return;
  }
  static_assert(kEvenChunks<kRows, kCols, kThreads, Element>,
                "every thread copies the same number of chunks");
  for_each_chunk<kRows, kCols, kThreads, Element>(thread, [&](int row, int col) {
    const int64_t key = key0 + row;
    const bool valid = key < length;  // the table holds no page for keys past the length
    const int64_t source_row = valid ? page_row(pages, page_shift, key) : 0;
    const bool in_row = col < cols;
    cp_async_16(tile.at(row, col), slice + source_row * seq_stride + (in_row ? col : 0),
                valid && in_row);
  });
}

// One thread's share of a (kBlockN, kHeadDim) K or V tile, as for_each_chunk (copy.cuh) deals
// it: the 16-byte chunks at column `col` of rows row + i * kRowStep (i < kCount). A block wholly
// inside the keys, with every column in memory and contiguous rows, is loaded by advancing one
// global pointer kRowStep rows per chunk: no bounds checks, no global address rebuilt per chunk
// (the checked load spent most of the split kernel's instructions: performance log, decode v3).
// The shared side is the tile's own address of each row (a constant step when kRowStep is a
// multiple of 8, the swizzle's period).
// Head dims whose rows the threads do not divide evenly (96, 192: 12 and 24 chunks a row) keep
// the checked load (kWholeRows false).
template <typename Config, typename Element>
struct ThreadChunks {
  static constexpr int kChunksPerRow = Config::kHeadDim * int(sizeof(Element)) / 16;
  static constexpr bool kWholeRows = Config::kThreads % kChunksPerRow == 0;
  static constexpr int kRowStep = kWholeRows ? Config::kThreads / kChunksPerRow : 1;
  static constexpr int kCount = Config::kBlockN / kRowStep;
  static_assert(!kWholeRows || Config::kBlockN % kRowStep == 0, "whole steps per block");
  int row;
  int col;
  __device__ explicit ThreadChunks(int thread)
      : row(thread / kChunksPerRow), col((thread % kChunksPerRow) * (16 / int(sizeof(Element)))) {}
  // Offset of the thread's first chunk from a row-major slice's first element.
  __device__ int64_t offset(int64_t seq_stride) const { return row * seq_stride + col; }
};

// Starts loading a whole block of K and of V from pages smaller than a block: each of the
// thread's rows through the block table once for both tensors, no bounds checks (the block lies
// inside the keys, so the table has its pages).
template <typename Chunks, typename Tile, typename Element>
__device__ __forceinline__ void load_full_paged_block_async(Tile k_tile, Tile v_tile,
                                                            const Element* k, const Element* v,
                                                            int64_t k_stride, int64_t v_stride,
                                                            const int32_t* pages, int page_shift,
                                                            int64_t key0, const Chunks& chunks) {
#pragma unroll
  for (int i = 0; i < Chunks::kCount; ++i) {
    const int row = chunks.row + i * Chunks::kRowStep;
    const int64_t source_row = page_row(pages, page_shift, key0 + row);
    cp_async_16_whole_line(k_tile.at(row, chunks.col), k + source_row * k_stride + chunks.col);
    cp_async_16_whole_line(v_tile.at(row, chunks.col), v + source_row * v_stride + chunks.col);
  }
}

// Starts loading a whole block: `rows` points at the thread's first chunk (its row and column
// of the block's first key), rows `seq_stride` elements apart.
template <typename Chunks, typename Tile, typename Element>
__device__ __forceinline__ void load_full_block_async(Tile tile, const Element* rows,
                                                      int64_t seq_stride, const Chunks& chunks) {
  const int64_t step = int64_t(Chunks::kRowStep) * seq_stride;
#pragma unroll
  for (int i = 0; i < Chunks::kCount; ++i) {
    cp_async_16_whole_line(tile.at(chunks.row + i * Chunks::kRowStep, chunks.col), rows + i * step);
  }
}

// Q (16 rows of this warp, D) as A fragments, loaded from global memory: 32-bit pairs at
// columns 2 * quad (+8) of the thread's two rows; rows past the packed rows and columns at or
// past head_dim (whole groups of 8) are zeros.
template <typename Element, int kSteps>
__device__ __forceinline__ void load_q_fragments(typename sm80::MmaOps<Element>::A (&a)[kSteps],
                                                 const GlobalTensor<const Element>& q,
                                                 int64_t batch, const FragmentRows& rows,
                                                 int head_dim, int lane) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const bool valid = rows.valid[half];
    const Element* row =
        valid ? q.slice(batch, rows.head[half]) + rows.query[half] * q.seq_stride : q.data;
    const int col = 2 * (lane % 4);
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      const auto* pair = reinterpret_cast<const uint32_t*>(row + 16 * kk + col);
      a[kk].reg[half] = valid && 16 * kk < head_dim ? __ldg(pair) : 0u;  // cols 16kk + 2q, +1
      a[kk].reg[2 + half] =
          valid && 16 * kk + 8 < head_dim ? __ldg(pair + 4) : 0u;  // cols 16kk + 8 + 2q, +1
    }
  }
}

// Scores of keys at or past each row's visible end -> -inf, for this thread's part of a warp's
// 16 x (8 * kTiles) block of keys k0...
template <int kTiles>
__device__ __forceinline__ void mask_keys(float (&s)[kTiles][4], int64_t k0,
                                          const FragmentRows& rows, int lane) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int visible = static_cast<int>(clamp64(rows.visible_end[half] - k0, 0, 8 * kTiles));
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (8 * t + 2 * (lane % 4) + e >= visible) s[t][2 * half + e] = kMaskedScore;
      }
    }
  }
}

// Writes a thread's two rows of O: normalized, in Element, with LSE, when the CTA is the only
// split; as an fp32 partial with its LSE otherwise.
template <typename Element, int kOutTiles>
__device__ __forceinline__ void store_rows(const SplitParams<Element>& params, int64_t batch,
                                           int64_t split, const FragmentRows& rows,
                                           const float (&o_acc)[kOutTiles][4],
                                           const float (&normalizer)[2],
                                           const float (&row_lse)[2], int head_dim, int lane) {
  const ProblemParams& p = params.problem;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (!rows.valid[half]) continue;
    const int64_t row = (batch * p.heads + rows.head[half]) * p.seq_q + rows.query[half];
    if (params.splits == 1) {
      Element* out = params.out.slice(batch, rows.head[half]) +
                     rows.query[half] * params.out.seq_stride;
      store_accumulator_row(out, o_acc, half, normalizer[half], head_dim, lane);
      if (lane % 4 == 0) params.lse[row] = row_lse[half];
    } else {
      const int64_t partial = partial_row(p, split, row);
      store_accumulator_row(params.partial_out + partial * head_dim, o_acc, half,  // fp32
                            normalizer[half], head_dim, lane);
      if (lane % 4 == 0) params.partial_lse[partial] = row_lse[half];
    }
  }
}

template <typename Element, typename Config, bool kPadded>
__global__ void __launch_bounds__(Config::kThreads, Config::kMinCtasPerSm)
    split_forward_kernel(const SplitParams<Element> params) {
  using Ops = sm80::MmaOps<Element>;
  constexpr int kHeadDim = Config::kHeadDim;
  constexpr int kBlockN = Config::kBlockN;
  constexpr int kThreads = Config::kThreads;
  constexpr int kStages = Config::kStages;
  constexpr int kWarpKeys = Config::kWarpKeys;
  constexpr int kDimSteps = kHeadDim / Ops::kK;  // k steps of Q K^T
  constexpr int kScoreTiles = kWarpKeys / 8;     // n8 tiles of S
  constexpr int kOutTiles = kHeadDim / 8;        // n8 tiles of O
  using Tile = std::conditional_t<Config::kSwizzled, ChunkSwizzledTile<Element, kHeadDim>,
                                  SmemTile<Element, Config::kStride>>;
  static_assert(sizeof(Element) == 2, "Q fragments are loaded as 16-bit pairs");

  const ProblemParams& p = params.problem;
  const int head_dim = kPadded ? p.head_dim : kHeadDim;  // columns that exist in memory
  const int thread = threadIdx.x;
  const int warp = thread / 32;
  const int lane = thread % 32;
  const int row_group = warp % Config::kRowGroups;
  const int key_part = warp / Config::kRowGroups;  // which share of every key block
  const int warp_key0 = kWarpKeys * key_part;
  const CtaWork work = cta_work(params);
  const int64_t split = work.row_split % params.splits;
  const int64_t row0 = work.row_split / params.splits * Config::kBlockM;
  const int64_t bh_kv = work.bh_kv;
  const int64_t batch = bh_kv / p.heads_kv;
  const int64_t kv_head = bh_kv % p.heads_kv;
  const SequenceKeys keys = sequence_keys(params, batch);
  const FragmentRows rows = fragment_rows(p, keys, kv_head, row0 + 16 * row_group + lane / 4);

  // This split's run [first, last) of the key blocks the row block sees (fewer than 2^31 / 64:
  // sequence lengths stay below 2^31).
  const int64_t blocks = ceil_div(block_key_end(p, keys, row0, Config::kBlockM), kBlockN);
  const KeyBlockShare share = key_block_share(blocks, split, params.splits);
  const int first = static_cast<int>(share.begin);
  const int last = static_cast<int>(share.end);

  extern __shared__ __align__(128) unsigned char shared_bytes[];  // the swizzle's segments
  Element* smem = reinterpret_cast<Element*>(shared_bytes);
  auto k_tile = [&](int stage) { return Tile{smem + stage * kBlockN * Config::kStride}; };
  auto v_tile = [&](int stage) {
    return Tile{smem + (kStages + stage) * kBlockN * Config::kStride};
  };  // both (kBlockN, D)
  const Element* k = params.k.slice(batch, kv_head);  // [Sk, D], or [page rows, D] paged
  const Element* v = params.v.slice(batch, kv_head);
  const int32_t* pages = params.block_table == nullptr
                             ? nullptr
                             : params.block_table + batch * params.block_table_stride;
  using Chunks = ThreadChunks<Config, Element>;
  const Chunks chunks(thread);
  // Whole blocks of a paged cache whose pages hold whole blocks (page size >= 64: a block's
  // keys are consecutive rows of one page) load as contiguous ones; smaller pages by a table
  // read per row, shared by K and V.
  const bool whole_rows = Chunks::kWholeRows && !kPadded;
  const bool rows_in_one_page = pages == nullptr || params.page_shift >= kLog2BlockKeys;
  auto load_block = [&](int block, int stage) {
    const int64_t key0 = int64_t(block) * kBlockN;
    if constexpr (Chunks::kWholeRows) {
      if (whole_rows && key0 + kBlockN <= keys.length && !rows_in_one_page) {
        load_full_paged_block_async(k_tile(stage), v_tile(stage), k, v, params.k.seq_stride,
                                    params.v.seq_stride, pages, params.page_shift, key0, chunks);
        return;
      }
      if (whole_rows && key0 + kBlockN <= keys.length) {
        const int64_t first_row =
            pages == nullptr ? key0 : page_row(pages, params.page_shift, key0);
        const int64_t k_stride = params.k.seq_stride;
        const int64_t v_stride = params.v.seq_stride;
        load_full_block_async(k_tile(stage), k + first_row * k_stride + chunks.offset(k_stride),
                              k_stride, chunks);
        load_full_block_async(v_tile(stage), v + first_row * v_stride + chunks.offset(v_stride),
                              v_stride, chunks);
        return;
      }
    }
    load_kv_tile_async<kBlockN, kHeadDim, kThreads>(k_tile(stage), k, params.k.seq_stride,
                                                    pages, params.page_shift, key0, keys.length,
                                                    thread, head_dim);
    load_kv_tile_async<kBlockN, kHeadDim, kThreads>(v_tile(stage), v, params.v.seq_stride,
                                                    pages, params.page_shift, key0, keys.length,
                                                    thread, head_dim);
  };
  // One commit group per block, empty past the run, so that waiting for "all but the
  // kStages - 1 newest" always means "the current block landed". Every stage is refilled as
  // soon as the warps are done with it, so kStages blocks are in flight while the CTA waits.
  // Block first + i lives in stage i % kStages.
#pragma unroll
  for (int i = 0; i < kStages; ++i) {
    if (first + i < last) load_block(first + i, i);
    cp_async_commit();
  }

  typename Ops::A q_fragments[kDimSteps];  // Q (16, D) of this warp, loaded while K/V land
  load_q_fragments(q_fragments, params.q, batch, rows, head_dim, lane);
  const int64_t visible_min = min64(rows.visible_end[0], rows.visible_end[1]);
  float o_acc[1][kOutTiles][4];  // O (16, D), unnormalized
  OnlineSoftmax softmax[1];
  zero(o_acc[0]);

  int stage = 0;
  for (int block = first; block < last; ++block) {
    cp_async_wait<kStages - 1>();
    __syncthreads();  // the block landed for every thread

    // S = Q K^T: (16, kWarpKeys)
    float s[kScoreTiles][4];
    zero(s);
#pragma unroll
    for (int kk = 0; kk < kDimSteps; ++kk) {
#pragma unroll
      for (int pair = 0; pair < kScoreTiles / 2; ++pair) {
        typename Ops::BPair b;
        Ops::load_b_pair_nk(b, k_tile(stage), warp_key0 + 16 * pair, Ops::kK * kk, lane);
        Ops::mma_pair(s[2 * pair], s[2 * pair + 1], q_fragments[kk], b);
      }
    }
    const int64_t k0 = int64_t(block) * kBlockN + warp_key0;
    if (k0 + kWarpKeys > visible_min) mask_keys(s, k0, rows, lane);
    float rescale[2];
    softmax[0].exponentiate(s, p.scale_log2, rescale);  // s now holds P
    // After the first blocks the running maximum rarely grows: multiplying O by exactly 1 is
    // skipped (the same bits; a NaN factor is applied).
    if (rescale[0] != 1.f || rescale[1] != 1.f) OnlineSoftmax::rescale_rows(o_acc[0], rescale);

    // O += P V: (16, D)
    const Tile v_part{v_tile(stage).at(warp_key0, 0)};  // warp_key0: a multiple of 16 rows
    sm80::add_product_of_accumulators<kOutTiles / 2>(o_acc[0], s, v_part, lane);

    __syncthreads();  // every warp is done with the stage: refill it
    if (block + kStages < last) load_block(block + kStages, stage);
    cp_async_commit();
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  cp_async_wait<0>();

  if constexpr (Config::kKeySplit > 1) {
    __syncthreads();  // every warp is done with the K/V stages
    sm80::merge_key_parts<Config>(reinterpret_cast<float*>(shared_bytes), softmax, o_acc,
                                  row_group, key_part, lane);
    if (key_part != 0) return;
  }
  float normalizer[2];
  float row_lse[2];
  softmax[0].finish(normalizer, row_lse);
  store_rows(params, batch, split, rows, o_acc[0], normalizer, row_lse, head_dim, lane);
}

// Points params.k and v at the page pools, seen as [page row, kv head, D] tensors (one "batch"),
// with the block table that maps keys to page rows.
template <typename Element>
void set_paged_kv(SplitParams<Element>& params, const ForwardArgs& args) {
  const PagedKV& paged = args.paged;
  const int64_t row_stride = args.shape.heads_kv * args.shape.head_dim;
  const auto pool = [&](const void* data) {
    return GlobalTensor<const Element>{static_cast<const Element*>(data), 0,
                                       args.shape.head_dim, row_stride};
  };
  params.k = pool(paged.k_pages);
  params.v = pool(paged.v_pages);
  params.block_table = paged.block_table;
  params.block_table_stride = paged.block_table_stride;
  int shift = 0;
  while ((int64_t{1} << shift) < paged.page_size) ++shift;  // a power of two (api.cu)
  params.page_shift = shift;
}

// Combines the partial results of `partials.splits` key splits (the split kernel's or the sm90
// forward's) into the call's O and LSE, through the public merge's own path
// (merge_attention_partials()).
inline void merge_partial_outputs(const ForwardArgs& args, const PartialOutputs& partials,
                                  cudaStream_t stream) {
  const AttentionShape& s = args.shape;
  MergePartialsArgs merge;
  merge.splits = partials.splits;
  merge.batch = s.batch;
  merge.heads = s.heads;
  merge.seq_q = s.seq_q;
  merge.head_dim = s.head_dim;
  merge.dtype = args.dtype;
  merge.partial_out = partials.out;
  merge.partial_lse = partials.lse;
  merge.out = args.out;
  merge.lse = args.lse;
  dispatch_merge(merge, stream);
}

// Runs the split kernel with Config and `splits` key splits, then, with more than one, the merge
// of their partials from the workspace (partial_outputs()) into O and LSE.
template <typename Element, typename Config>
void launch_split_forward(const ForwardArgs& args, int64_t splits, cudaStream_t stream) {
  const AttentionShape& s = args.shape;
  SplitParams<Element> params{};
  params.problem = problem_params(args);
  params.q = global_tensor<const Element>(args.q);
  params.k = global_tensor<const Element>(args.k);
  params.v = global_tensor<const Element>(args.v);
  if (args.paged.enabled()) set_paged_kv(params, args);
  params.cache_seqlens = args.cache_seqlens;
  params.diagonal_follows_length = args.mask == Mask::causal_bottom_right;
  params.out = global_tensor<Element>(args.out);
  params.lse = args.lse;
  params.splits = splits;
  if (splits > 1) {
    const PartialOutputs partials = partial_outputs(args, splits);
    params.partial_out = partials.out;
    params.partial_lse = partials.lse;
  }
  const int64_t grid_x = ceil_div(packed_rows(s), Config::kBlockM) * splits;
  if (grid_x > int64_t(INT32_MAX)) {
    throw Error(Error::Kind::unsupported,
                "forward: " + std::to_string(splits) + " splits of " +
                    std::to_string(packed_rows(s)) + " packed rows exceed the grid");
  }

  auto* kernel = s.head_dim == Config::kHeadDim ? &split_forward_kernel<Element, Config, false>
                                                : &split_forward_kernel<Element, Config, true>;
  allow_dynamic_smem(kernel, Config::kSmemBytes);
  // Side by side where each head's share of a key's row is one 128-byte line or less (head_dim
  // 64 and below): measured no gain at 128 (cta_work()).
  const bool heads_interleaved =
      params.k.head_stride < params.k.seq_stride && s.head_dim * int64_t(sizeof(Element)) <= 128;
  for_each_grid_y_chunk(s.batch * s.heads_kv, [&](int64_t offset, unsigned count) {
    params.bh_offset = offset;
    const bool whole_groups = offset % s.heads_kv == 0 && count % s.heads_kv == 0;
    params.head_group = heads_interleaved && whole_groups ? s.heads_kv : 1;
    launch_kernel(kernel, dim3(static_cast<unsigned>(grid_x), count), Config::kThreads,
                  Config::kSmemBytes, stream, params);
  });
  if (splits == 1) return;
  merge_partial_outputs(args, {splits, params.partial_out, params.partial_lse}, stream);
}

}  // namespace cuflash::detail::split
