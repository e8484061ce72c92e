// Public GPU API: FlashAttention forward and backward on device pointers the caller owns.
//
// Tensors are 4-D with a contiguous last dimension (head_dim) and 64-bit element strides for the
// other three, so [batch, heads, seq, head_dim] ("bhsd") and [batch, seq, heads, head_dim]
// ("bshd") are both served without copies. Q, O, dO, dQ have `heads` heads; K, V, dK, dV have
// `heads_kv` heads (grouped-query attention: heads % heads_kv == 0; query head h reads key/value
// head h / (heads / heads_kv)).
//
// All functions are asynchronous on `stream` and throw cuflash::Error on invalid arguments or
// CUDA errors. Nothing is allocated behind the caller's back: the backward pass takes a workspace
// whose size backward_workspace_size() gives, and a forward pass that splits its keys over
// several CTAs (flash-decoding) one whose size forward_workspace_size() gives.
//
// No output (O and LSE; dQ, dK and dV or their sums; the workspace: backward() the bytes it uses,
// forward() all of workspace_bytes) may share a byte with an input tensor (Q, K, V, O, dO, LSE,
// paged K/V pools) or another output: the calls refuse that, naming both. Inputs may overlap one
// another (K and V in one buffer), and tensors that interleave without a byte in common are
// served (dQ, dK and dV as thirds of one [batch, seq, 3, heads, head_dim] buffer). Not checked:
// the index arrays (offsets, block tables, cache lengths), ALiBi slopes, and pairs of tensors
// whose strides share no pattern over so many rows that the exact test would take over 10-20 ms
// a pair (then the call goes ahead).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuflash/error.h"
#include "cuflash/problem.h"
#include "cuflash/types.h"

namespace cuflash {

// A device tensor of logical shape [batch, heads, seq, head_dim]; strides are in elements.
// Requirements (checked by forward()/backward(), which name the tensor and field on failure):
// `data` 16-byte aligned; the last dimension contiguous; every stride a non-negative multiple
// of 16 bytes (8 fp16/bf16 or 4 fp32 elements), since tiles move in 16-byte vectors; and no two
// rows overlapping, so a stride-0 broadcast over a dimension larger than 1 is refused.
// The alignment of `data` and of every row start, in bytes:
inline constexpr size_t kTensorAlignment = 16;
struct TensorRef {
  void* data = nullptr;
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
  int64_t seq_stride = 0;
};

// Strides of a densely packed tensor in the given layout. For thd, `seq` is the token total and
// `batch` must be 1: the sequences' split comes from VarlenBatch, and batch_stride is 0.
TensorRef make_tensor_ref(void* data, Layout layout, int64_t batch, int64_t heads, int64_t seq,
                          int64_t head_dim);

// A paged key/value cache (FlashAttention's and vLLM's layout): the keys of every sequence live
// in fixed-size pages of two shared pools, and a block table lists each sequence's pages in key
// order, so key j of batch entry b is row j % page_size of page block_table[b, j / page_size].
// Page indices are not checked (they live on the device): each entry the forward reads, those
// of keys below the sequence's length, must lie in [0, num_pages).
struct PagedKV {
  const void* k_pages = nullptr;  // [num_pages, page_size, heads_kv, head_dim], dense, 16-byte aligned
  const void* v_pages = nullptr;  // the same for V
  int64_t num_pages = 0;
  int64_t page_size = 0;  // keys per page: a power of two, at least 16
  const int32_t* block_table = nullptr;  // [batch, block_table_stride] page indices
  int64_t block_table_stride = 0;  // >= ceil(seq_k / page_size): the pages of seq_k keys

  bool enabled() const { return block_table != nullptr; }
  // Any field set: forward() refuses a cache given in part rather than read K and V densely.
  bool any_given() const {
    return k_pages != nullptr || v_pages != nullptr || num_pages != 0 || page_size != 0 ||
           block_table != nullptr || block_table_stride != 0;
  }
};

// A variable-length packed batch (FlashAttention's varlen convention): the shape's `batch`
// sequences lie one after another along the token axis of every tensor. Sequence b's queries are
// tokens [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of q, out (and dout, dq), its keys tokens
// [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k, v (and dk, dv), and it is the attention of those
// lengths alone: the causal masks, the window and ALiBi's distances align to its own (len_q,
// len_k) (bottom-right: row i sees key j when j <= i + len_k - len_q), and [batch, heads] ALiBi
// slopes give it row b. shape.seq_q and shape.seq_k are the longest lengths (the grid covers
// them); work is proportional to each sequence's own blocks. Tensors are [total, heads, head_dim]
// ("thd"): token t of head h at data + t * seq_stride + h * head_stride, with batch_stride 0 (as
// make_tensor_ref(..., Layout::thd, ...) gives). LSE is [heads, total_q]; the backward's
// workspace keeps backward_workspace_size(shape), which covers the packed rows.
// The offsets live on the device and are not checked: each must be int32 [batch + 1], start at
// 0, never decrease, end at total_q (total_k), and give no sequence more than shape.seq_q
// (seq_k) tokens; a sequence of length 0 is allowed (a query without keys gets O = 0 and LSE =
// +inf, and zero gradients).
struct VarlenBatch {
  const int32_t* cu_seqlens_q = nullptr;  // device [batch + 1]; null: a dense batch
  const int32_t* cu_seqlens_k = nullptr;  // device [batch + 1]
  int64_t total_q = 0;  // cu_seqlens_q[batch]: the tokens of q, out, dout, dq
  int64_t total_k = 0;  // cu_seqlens_k[batch]: the tokens of k, v, dk, dv

  bool enabled() const { return cu_seqlens_q != nullptr; }
  // Any field set: forward() and backward() refuse a batch given in part rather than run a dense
  // one.
  bool any_given() const {
    return cu_seqlens_q != nullptr || cu_seqlens_k != nullptr || total_q != 0 || total_k != 0;
  }
};

// ALiBi slopes in device memory, fp32: the slope of (batch b, query head h) is
// data[b * batch_stride + h]. batch_stride is 0 for one set of [heads] slopes shared by every
// batch, `heads` for [batch, heads]. data == nullptr: no ALiBi. Slopes must be finite (not
// checked: they are on the device).
struct AlibiSlopes {
  const float* data = nullptr;
  int64_t batch_stride = 0;
};

// The bounds of a scale and of a softcap (0 aside: the default scale, no softcap). Beyond them
// the softmax is uniform to float precision or the scores overflow; and the forward measures
// scores in units of one of the two, in which an ALiBi slope must stay a float.
inline constexpr double kMinScaleOrSoftcap = 0x1p-100;
inline constexpr double kMaxScaleOrSoftcap = 0x1p100;
inline bool within_scale_bounds(double value) {
  return value >= kMinScaleOrSoftcap && value <= kMaxScaleOrSoftcap;
}

// The variants of the scores, in the order they apply (problem.h has the semantics): the scaled
// score s = scale * q.k, then softcap * tanh(s / softcap) when softcap > 0, then minus the ALiBi
// bias, then the causal mask and the window.
struct ForwardArgs {
  AttentionShape shape;
  DType dtype = DType::fp16;
  Mask mask = Mask::none;
  float scale = 0.f;  // softmax scale: 0 means 1/sqrt(head_dim), else within [2^-100, 2^100]
  Window window;      // bounds >= -1 (-1: unbounded)
  float softcap = 0.f;  // 0: off, else within [2^-100, 2^100], scale / softcap a float
  AlibiSlopes alibi;
  TensorRef q, k, v;  // inputs
  TensorRef out;      // output O, same shape as q
  float* lse = nullptr;  // output [batch, heads, seq_q] fp32, contiguous: natural-log sum-exp of
                         // the scaled scores; +inf for rows that see no key
  // Key splits (flash-decoding): the keys of every row are cut into `splits` runs of whole
  // 64-key blocks, computed by separate CTAs into partial results (in the workspace) that
  // merge_attention_partials() combines. 0: forward() chooses for the shape and the device (1
  // where the workspace cannot hold the partials); 1: no split; 2..max_forward_splits(shape):
  // exactly that many (fp16 and bf16 only). Results differ from unsplit ones by rounding only.
  // splits > 1, paged K/V and cache_seqlens run the split kernel, which applies no window,
  // softcap or ALiBi: those combinations are refused (unsupported).
  int64_t splits = 0;
  // Scratch for the partial results: at least forward_workspace_size(shape, dtype, splits)
  // bytes, 256-byte aligned. May be null when splits is 0 or 1.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Optional, both on the split kernel (fp16 / bf16; with either, k and v describe no memory
  // when `paged` is enabled, and forward() routes every seq_q to the split kernel):
  PagedKV paged;  // K and V read through a block table instead of k and v
  // Device int32 [batch]: the keys of batch entry b are [0, cache_seqlens[b]), each in
  // [0, seq_k]; keys past it do not exist for that entry, and the causal masks align to it
  // (bottom-right: row i sees key j when j <= i + cache_seqlens[b] - seq_q). Null: seq_k.
  const int32_t* cache_seqlens = nullptr;
  // Optional: a variable-length packed batch (VarlenBatch), run by the wgmma kernels' variant
  // instantiation on Hopper (fp16/bf16; the backward above head_dim 128 on mma.sync) and by the
  // mma.sync kernels elsewhere (never the split one); it combines with every variant but not
  // with paged K/V, cache_seqlens or splits > 1.
  VarlenBatch varlen;
  // Optional: the diagonal's offset (types.h, diagonal_offset()) in place of the one the mask
  // gives (seq_k - seq_q, or 0 under causal_top_left), for a block of a larger problem whose
  // queries and keys start elsewhere: the larger problem's offset plus the block's first query
  // position minus its first key position (context-parallel attention, whose blocks are chunks
  // of both sequences). Query i then sees key j when j <= i + offset under either causal mask,
  // and the window and ALiBi's distances |i + offset - j| follow it too, so that the block is
  // computed at its global positions; rows that see no key get O = 0 and LSE = +inf as usual.
  // Within +-2^32. Dense batches only: refused with varlen, paged K/V and cache_seqlens, whose
  // sequences place their own diagonals.
  std::optional<int64_t> diagonal_offset;
};

// fp32 arrays that backward() adds its gradients to, instead of writing them in the dtype to
// dq, dk and dv: dQ shaped like q, dK and dV like k and v, fp32 elements with the strides of
// each TensorRef (head_dim contiguous). For gradients summed over several calls, each a block of
// one larger problem (context parallelism), rounded to the dtype once at the end: the sums hold
// exactly the fp32 values the kernels would round. Each element is read, added to and written by
// one thread of one call, in stream order: calls that add to the same arrays must not overlap.
// On when dq.data is set; dk and dv are then required too, and either set without dq is refused.
struct GradientSums {
  TensorRef dq, dk, dv;
  bool enabled() const { return dq.data != nullptr; }
  bool any_given() const { return dq.data != nullptr || dk.data != nullptr || dv.data != nullptr; }
};

struct BackwardArgs {
  AttentionShape shape;
  DType dtype = DType::fp16;
  Mask mask = Mask::none;
  float scale = 0.f;
  Window window;  // the forward call's
  float softcap = 0.f;
  AlibiSlopes alibi;
  TensorRef q, k, v, out, dout;  // inputs (out and lse from forward())
  const float* lse = nullptr;    // [batch, heads, seq_q] fp32, contiguous
  TensorRef dq, dk, dv;          // outputs, shaped like q, k, v
  // dK and dV are always bitwise reproducible; dQ sums the contributions of every key block,
  // by default in the order they finish (fastest), so its last bits may differ between runs.
  // true: those sums run in a fixed order (key block after key block; on small problems
  // without a mask or under a causal one, with no window bounded on the left, within each of up
  // to four groups of keys, then the groups in order), so dQ, dK and dV are the same bits on
  // every run of the same inputs on the same device and build, at some speed (README:
  // "Deterministic backward"). Needs backward_workspace_size(shape, dtype, true).
  bool deterministic = false;
  void* workspace = nullptr;     // at least backward_workspace_size() bytes, 256-byte aligned
  size_t workspace_bytes = 0;
  VarlenBatch varlen;  // the forward call's (VarlenBatch); LSE then [heads, total_q]
  // The forward call's (ForwardArgs::diagonal_offset). Given with the forward's O and LSE of a
  // larger problem (the rows of this block's queries), the backward of a block yields exactly
  // its part of that problem's gradients: P = exp(S - LSE) and D_i = rowsum(dO_i * O_i) are the
  // larger problem's, so dQ, dK and dV are the block's terms of the sums over all keys and
  // queries.
  std::optional<int64_t> diagonal_offset;
  // Optional (GradientSums): add dQ, dK and dV in fp32 to these arrays; dq, dk and dv are then
  // neither read nor written (they may be null). Not with a varlen batch.
  GradientSums sums;
};

// The backward arguments that restate the forward call's: shape, dtype, mask, scale, window,
// softcap, alibi, varlen, diagonal_offset, q, k, v, out and lse. The caller adds dout, dq, dk,
// dv and the workspace.
BackwardArgs backward_args_for(const ForwardArgs& forward);

// Device pointers of densely packed tensors in a Problem's layout: Q, O, dO, dQ with `heads`
// heads of seq_q rows, K, V, dK, dV with `heads_kv` heads of seq_k rows, LSE [batch, heads,
// seq_q] fp32. The backward members are read by backward_args() only.
struct DenseTensors {
  void* q = nullptr;
  void* k = nullptr;
  void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;
  void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  void* workspace = nullptr;  // for forward() and backward(): the larger of their sizes
  size_t workspace_bytes = 0;
  // The problem's ALiBi slopes copied to the device (problem.alibi_slopes, [heads] or
  // [batch, heads]); read when the problem has slopes.
  const float* alibi_slopes = nullptr;
  // A varlen problem's cumulative offsets (cumulative_offsets() of seqlens_q and seqlens_k, as
  // int32) on the device; read when the problem is one.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
};

// The shape the API takes for `problem`: its own, or for a varlen problem (whose shape is that
// of the packed tensors, problem.h) the sequence count as batch and the longest lengths.
inline AttentionShape varlen_args_shape(const Problem& problem) {
  AttentionShape s = problem.shape;
  if (!problem.varlen()) return s;
  if (problem.seqlens_k.size() != problem.seqlens_q.size()) {
    throw Error(Error::Kind::invalid_argument,
                "varlen problem: seqlens_q gives " + std::to_string(problem.seqlens_q.size()) +
                    " lengths and seqlens_k " + std::to_string(problem.seqlens_k.size()) +
                    ": one pair per sequence");
  }
  s.batch = problem.sequences();
  s.seq_q = *std::max_element(problem.seqlens_q.begin(), problem.seqlens_q.end());
  s.seq_k = *std::max_element(problem.seqlens_k.begin(), problem.seqlens_k.end());
  return s;
}

// The forward() arguments of `problem` on `tensors`: shape, dtype, mask, the scale and softcap
// as float, window, ALiBi slopes, the key splits, make_tensor_ref() views in problem.layout and
// the workspace. Throws cuflash::Error (invalid_argument) when the problem has ALiBi slopes and
// tensors.alibi_slopes is null, rather than silently leaving the bias out.
inline ForwardArgs forward_args(const Problem& problem, const DenseTensors& tensors) {
  const AttentionShape& s = problem.shape;
  ForwardArgs args;
  args.shape = varlen_args_shape(problem);
  args.dtype = problem.dtype;
  args.mask = problem.mask;
  // Bounds checked in double: a float would round a tiny value to 0, the default scale or no
  // softcap, rather than refuse it.
  for (const auto& [name, value] :
       {std::pair{"scale", problem.scale}, std::pair{"softcap", problem.softcap}}) {
    if (value != 0.0 && !within_scale_bounds(value)) {
      char shown[32];
      std::snprintf(shown, sizeof shown, "%g", value);
      throw Error(Error::Kind::invalid_argument, std::string("forward_args: problem.") + name +
                                                     " must be 0 or within [2^-100, 2^100], got " +
                                                     shown);
    }
  }
  args.scale = static_cast<float>(problem.scale);
  args.window = problem.window;
  args.softcap = static_cast<float>(problem.softcap);
  if (!problem.alibi_slopes.empty()) {
    if (tensors.alibi_slopes == nullptr) {
      throw Error(Error::Kind::invalid_argument,
                  "forward_args: the problem has ALiBi slopes but tensors.alibi_slopes is null");
    }
    const int64_t slopes = int64_t(problem.alibi_slopes.size());
    if (slopes != s.heads && slopes != problem.sequences() * s.heads) {
      throw Error(Error::Kind::invalid_argument,
                  "forward_args: " + std::to_string(slopes) + " ALiBi slopes for " +
                      std::to_string(s.heads) + " heads: give [heads] or [batch, heads]");
    }
    args.alibi = {tensors.alibi_slopes, problem.alibi_batch_stride()};
  }
  args.q = make_tensor_ref(tensors.q, problem.layout, s.batch, s.heads, s.seq_q, s.head_dim);
  args.k = make_tensor_ref(tensors.k, problem.layout, s.batch, s.heads_kv, s.seq_k, s.head_dim);
  args.v = make_tensor_ref(tensors.v, problem.layout, s.batch, s.heads_kv, s.seq_k, s.head_dim);
  args.out = make_tensor_ref(tensors.out, problem.layout, s.batch, s.heads, s.seq_q, s.head_dim);
  args.lse = tensors.lse;
  if (problem.varlen()) {
    if (tensors.cu_seqlens_q == nullptr || tensors.cu_seqlens_k == nullptr) {
      throw Error(Error::Kind::invalid_argument,
                  "forward_args: the problem is a varlen batch but tensors.cu_seqlens_q or "
                  "tensors.cu_seqlens_k is null");
    }
    args.varlen = {tensors.cu_seqlens_q, tensors.cu_seqlens_k, s.seq_q, s.seq_k};
  }
  args.splits = problem.splits;
  args.workspace = tensors.workspace;
  args.workspace_bytes = tensors.workspace_bytes;
  return args;
}

// The backward() arguments: those of forward_args() plus dout, dq, dk, dv, the deterministic
// flag and the workspace.
inline BackwardArgs backward_args(const Problem& problem, const DenseTensors& tensors) {
  const AttentionShape& s = problem.shape;
  BackwardArgs args = backward_args_for(forward_args(problem, tensors));
  args.dout = make_tensor_ref(tensors.dout, problem.layout, s.batch, s.heads, s.seq_q, s.head_dim);
  args.dq = make_tensor_ref(tensors.dq, problem.layout, s.batch, s.heads, s.seq_q, s.head_dim);
  args.dk = make_tensor_ref(tensors.dk, problem.layout, s.batch, s.heads_kv, s.seq_k, s.head_dim);
  args.dv = make_tensor_ref(tensors.dv, problem.layout, s.batch, s.heads_kv, s.seq_k, s.head_dim);
  args.deterministic = problem.deterministic;
  args.workspace = tensors.workspace;
  args.workspace_bytes = tensors.workspace_bytes;
  return args;
}

// The head dimensions forward() and backward() take, for every dtype, in increasing order:
// every multiple of 8 from 8 to 256 (the CPU reference takes any head_dim).
std::vector<int> supported_head_dims();
bool is_supported_head_dim(int64_t head_dim);
// The head dimensions with kernels of their own (tuned tile shapes), in increasing order: 32,
// 64, 96, 128, 192, 256. Any other supported head_dim runs on the kernels of the next one,
// kernel_head_dim(head_dim), with the extra columns treated as zeros (never read or written);
// fp16/bf16 on the wgmma kernels (tensor_core_kernels()) run from head_dim 40 on at the next
// of 64, 128, 192, 256 instead, 96 on the 128 ones (the backward's on 128-column tiles with
// 96-column products).
std::vector<int> tuned_head_dims();
// 0 when head_dim is not supported.
int64_t kernel_head_dim(int64_t head_dim);

// The kernels forward() and backward() run for fp16/bf16 at head_dim 40 and above on `device`:
// "wgmma" (Hopper's warpgroup instructions and TMA loads; needs a build for sm_90a and a compute
// capability 9.0 device, and is off when the environment variable CUFLASH_DISABLE_WGMMA is set
// to anything but an empty value or 0; the variable is read once per process, at the first
// call) or "mma.sync" (everywhere else; also always at head_dim 32 and below, for fp32, for the
// backward's varlen batches, variants, fp32 sums and deterministic dQ above head_dim 128, and
// for tensors whose strides TMA cannot describe).
const char* tensor_core_kernels(int device);

void forward(const ForwardArgs& args, cudaStream_t stream = nullptr);

// The most key splits forward() takes for `shape`: its number of 64-key blocks,
// ceil(seq_k / 64).
int64_t max_forward_splits(const AttentionShape& shape);

// Bytes of device scratch forward() needs with `splits` key splits (0: the number it chooses
// itself on the current device when given this much): partial O of
// splits*batch*heads*seq_q*head_dim fp32 and partial LSE of splits*batch*heads*seq_q fp32, each
// rounded up to 256 bytes; 0 when it does not split.
size_t forward_workspace_size(const AttentionShape& shape, DType dtype, int64_t splits = 0);

// Partial attention results over disjoint parts of the keys (key splits of one device, or the
// shards of K and V that long-context parallelism spreads over devices), merged into the
// attention over all of them. For each row (b, h, i) and split s:
//   partial_out[s, b, h, i, :] = softmax over split s's keys, times its values (fp32);
//   partial_lse[s, b, h, i]    = natural-log sum-exp of the scaled scores of those keys;
//                                -inf or +inf: the split has no key for this row (weight 0).
// Then lse = log(sum_s exp(partial_lse_s)) and out = sum_s exp(partial_lse_s - lse) *
// partial_out_s, in out's dtype; a row that no split has a key for gets out = 0, lse = +inf
// (forward()'s convention); NaN inputs give NaN. The partials are contiguous; out is strided
// like forward()'s O and may not overlap them.
struct MergePartialsArgs {
  int64_t splits = 1;     // partial results per row, >= 1
  int64_t batch = 1;
  int64_t heads = 1;
  int64_t seq_q = 1;
  int64_t head_dim = 64;  // a multiple of 8
  DType dtype = DType::fp16;                // of out
  const float* partial_out = nullptr;       // [splits, batch, heads, seq_q, head_dim], 16-byte aligned
  const float* partial_lse = nullptr;       // [splits, batch, heads, seq_q]
  TensorRef out;                            // [batch, heads, seq_q, head_dim], as forward()'s
  float* lse = nullptr;                     // [batch, heads, seq_q] fp32, contiguous
};

void merge_attention_partials(const MergePartialsArgs& args, cudaStream_t stream = nullptr);

// Bytes of device scratch backward() needs: an fp32 dQ accumulator of batch*heads*seq_q*C
// floats, C the columns of the widest kernel that may run: kernel_head_dim(head_dim), or 128
// where it is 96 (the wgmma backward's tiles there; the same size for every dtype and
// device) (head_dim for an unsupported one), and the row
// sums D_i = rowsum(dO_i * O_i) of batch*heads*seq_q, each rounded up to 256 bytes; with
// `deterministic` (BackwardArgs::deterministic) also one 32-bit counter per 16 query rows,
// batch*heads*ceil(seq_q / 16), that orders the dQ sums, four times over, and room for up to
// three more accumulators (at most 48 MiB) that small problems without a mask use to sum
// groups of keys apart (README: "Deterministic backward"); and 256 bytes for the counter of
// the key blocks that persistent CTAs take in turn (short sequences on Hopper). The size never
// shrinks when a dimension grows.
size_t backward_workspace_size(const AttentionShape& shape, DType dtype,
                               bool deterministic = false);

void backward(const BackwardArgs& args, cudaStream_t stream = nullptr);

// What forward() and backward() check of a dense call's problem (shape, dtype, mask), variants,
// diagonal_offset's range, tensors (with LSE), gradient sums (given whole) and outputs apart from
// inputs (the workspace, when given, over all its workspace_bytes; not its size, the key splits,
// paged K/V or a varlen batch, beyond refusing either when given in part), without launching
// anything: throws cuflash::Error as they would, the message starting with `caller`. For code
// that runs them on parts of a problem (context parallelism) and must refuse the whole problem's
// tensors before the first part runs.
void check_dense_forward_args(const ForwardArgs& args, const std::string& caller);
void check_dense_backward_args(const BackwardArgs& args, const std::string& caller);

// What forward() and backward() check of a dense call's problem alone (shape, dtype, mask,
// scale, variants, diagonal_offset's range, and a varlen batch or paged K/V given in part), none
// of its tensors: for code that runs a problem whose tensors are spread over devices (the ring)
// and must refuse it before the first transfer.
void check_problem_args(const ForwardArgs& args, const std::string& caller);
void check_problem_args(const BackwardArgs& args, const std::string& caller);

// Number of CUDA devices usable by this process; 0 (never an exception) when there is none or
// no driver.
int device_count() noexcept;

// A kernel launch of a call, as LaunchRecord reports it.
struct KernelLaunch {
  std::string call;    // the API function: "forward", "backward" or "merge_attention_partials"
  std::string kernel;  // as profilers name it, less the return type, the parameter list and the
                       // namespace cuflash::detail:: ("sm90::forward_kernel<__half,
                       // sm90::ForwardConfig<64, 3, 128>, (sm90::ForwardKernel)0>"); empty
                       // where the CUDA runtime gives no name
  std::array<unsigned, 3> grid{};  // CTAs
  int threads = 0;                 // threads a CTA
  size_t shared_bytes = 0;         // dynamic shared memory a CTA
};

namespace detail {
void record_launch(const void* kernel, dim3 grid, int threads, size_t shared_bytes);
}  // namespace detail

// Which kernels ran: while a LaunchRecord lives, the kernels that forward(), backward() and
// merge_attention_partials() launch from this thread are added to it in launch order (to the
// innermost record where records nest). Each launch then asks the CUDA runtime for the kernel's
// name: record an untimed call. Launches of other threads are not in it.
class LaunchRecord {
 public:
  LaunchRecord();
  ~LaunchRecord();
  LaunchRecord(const LaunchRecord&) = delete;
  LaunchRecord& operator=(const LaunchRecord&) = delete;

  const std::vector<KernelLaunch>& launches() const { return launches_; }

 private:
  friend void detail::record_launch(const void*, dim3, int, size_t);
  std::vector<KernelLaunch> launches_;
  LaunchRecord* outer_;
};

}  // namespace cuflash
