// The public API of attention.h: argument validation at the boundary, then dispatch to the
// launcher compiled for (dtype, head_dim). Kernels never see an argument this file has not
// checked.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuflash/attention.h"
#include "cuflash/cuda_error.h"
#include "cuflash/error.h"
#include "cuflash/types.h"
#include "dispatch.h"
#include "head_dims.h"
#include "kernels/split/plan.h"
#include "launch_log.h"
#include "memory_overlap.h"
#include "workspace.h"

namespace cuflash {
namespace {

using detail::kHeadDims;

// The kernels index within a sequence with 32-bit block-relative offsets and put the number of
// query (key) blocks on grid.x; this bound keeps both comfortably in range.
constexpr int64_t kMaxSeqLen = (int64_t{1} << 31) - 256;
// An explicit diagonal offset beyond this lies past every position of both sequences (each
// below 2^31): the band's ends stay far from int64 overflow, and the kernels' 32-bit casts see
// only values clamped to a block.
constexpr int64_t kMaxDiagonalOffset = int64_t{1} << 32;

[[noreturn]] void invalid(const std::string& context, const std::string& message) {
  throw Error(Error::Kind::invalid_argument, context + ": " + message);
}

[[noreturn]] void unsupported(const std::string& context, const std::string& message) {
  throw Error(Error::Kind::unsupported, context + ": " + message);
}

// Overflow-checked arithmetic on non-negative sizes: -1 stands for "overflowed" and sticks.
int64_t checked_mul(int64_t a, int64_t b) {
  if (a < 0 || b < 0 || (a != 0 && b > std::numeric_limits<int64_t>::max() / a)) return -1;
  return a * b;
}

int64_t checked_add(int64_t a, int64_t b) {
  if (a < 0 || b < 0 || a > std::numeric_limits<int64_t>::max() - b) return -1;
  return a + b;
}

std::string supported_head_dims_text() {
  return "multiples of " + std::to_string(detail::kHeadDimGranule) + " from " +
         std::to_string(detail::kHeadDimGranule) + " to " + std::to_string(detail::kMaxHeadDim);
}

bool is_valid(DType dtype) {
  return dtype == DType::fp16 || dtype == DType::bf16 || dtype == DType::fp32;
}

bool is_valid(Mask mask) {
  return mask == Mask::none || mask == Mask::causal_bottom_right || mask == Mask::causal_top_left;
}

// Sizes positive, heads a multiple of heads_kv, element counts representable.
void validate_sizes(const std::string& context, const AttentionShape& s) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"batch", s.batch}, {"heads", s.heads}, {"heads_kv", s.heads_kv},
      {"seq_q", s.seq_q}, {"seq_k", s.seq_k}, {"head_dim", s.head_dim}};
  for (const auto& [name, value] : sizes) {
    if (value <= 0) {
      invalid(context, std::string("shape.") + name + " must be positive, got " +
                           std::to_string(value));
    }
  }
  if (s.heads % s.heads_kv != 0) {
    invalid(context, "shape.heads (" + std::to_string(s.heads) +
                         ") must be a multiple of shape.heads_kv (" + std::to_string(s.heads_kv) +
                         ")");
  }
  // Byte counts of Q and K at 8 bytes per element: fp32 with a factor 2 of headroom.
  const int64_t bytes_q = checked_mul(
      checked_mul(checked_mul(checked_mul(s.batch, s.heads), s.seq_q), s.head_dim), 8);
  const int64_t bytes_k = checked_mul(
      checked_mul(checked_mul(checked_mul(s.batch, s.heads_kv), s.seq_k), s.head_dim), 8);
  if (bytes_q < 0 || bytes_k < 0) invalid(context, "shape is too large (sizes overflow 64 bits)");
}

// Everything about the problem itself: sizes, head_dim, dtype, mask.
void validate_problem(const std::string& context, const AttentionShape& s, DType dtype,
                      Mask mask) {
  validate_sizes(context, s);
  if (!is_valid(dtype)) invalid(context, "dtype is not one of fp16, bf16, fp32");
  if (!is_valid(mask)) invalid(context, "mask is not one of none, causal, causal-top-left");
  if (!is_supported_head_dim(s.head_dim)) {
    unsupported(context, "head_dim " + std::to_string(s.head_dim) +
                             " is not supported (supported: " + supported_head_dims_text() + ")");
  }
  if (s.seq_q > kMaxSeqLen || s.seq_k > kMaxSeqLen) {
    unsupported(context, "sequence lengths above " + std::to_string(kMaxSeqLen) +
                             " are not supported (seq_q " + std::to_string(s.seq_q) +
                             ", seq_k " + std::to_string(s.seq_k) + ")");
  }
}

// A float as "%g" writes it (1e-31 rather than std::to_string's 0.000000).
std::string short_float(float value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", static_cast<double>(value));
  return text;
}

// The scale the kernels use: `scale`, or 1/sqrt(head_dim) for 0.
float effective_scale(const std::string& context, float scale, int64_t head_dim) {
  if (scale != 0.f && !within_scale_bounds(scale)) {
    invalid(context, "scale must be 0 (1/sqrt(head_dim)) or within [2^-100, 2^100], got " +
                         short_float(scale));
  }
  return scale == 0.f ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))) : scale;
}

// Window bounds >= -1, softcap 0 or within the bounds of a scale, ALiBi slopes aligned with a
// valid stride.
void validate_variants(const std::string& context, const AttentionShape& s, Window window,
                       float scale, float softcap, AlibiSlopes alibi) {
  if (window.left < -1 || window.right < -1) {
    invalid(context, "window bounds must be >= -1 (-1: unbounded), got " +
                         std::to_string(window.left) + "," + std::to_string(window.right));
  }
  if (softcap != 0.f && !within_scale_bounds(softcap)) {
    invalid(context, "softcap must be 0 (off) or within [2^-100, 2^100], got " +
                         short_float(softcap));
  }
  // The kernels multiply each score by scale / softcap: an overflow would turn a zero score
  // into inf * 0 = NaN.
  if (softcap != 0.f && !std::isfinite(scale / softcap)) {
    invalid(context, "scale / softcap (" + short_float(scale) + " / " +
                         short_float(softcap) + ") overflows float");
  }
  if (alibi.data != nullptr) {
    if (reinterpret_cast<uintptr_t>(alibi.data) % alignof(float) != 0) {
      invalid(context, "alibi.data must be 4-byte aligned");
    }
    if (alibi.batch_stride != 0 && alibi.batch_stride < s.heads) {
      invalid(context, "alibi.batch_stride (" + std::to_string(alibi.batch_stride) +
                           ") must be 0 or at least shape.heads (" + std::to_string(s.heads) +
                           ")");
    }
  }
}

// The checks every forward and backward call shares: the problem (shape, dtype, mask) and the
// score variants. Returns the scale the kernels use.
template <typename Args>
float validate_problem_and_variants(const std::string& context, const Args& args) {
  validate_problem(context, args.shape, args.dtype, args.mask);
  const float scale = effective_scale(context, args.scale, args.shape.head_dim);
  validate_variants(context, args.shape, args.window, scale, args.softcap, args.alibi);
  return scale;
}

// ForwardArgs::diagonal_offset / BackwardArgs::diagonal_offset: in range, and only where the
// diagonal is the call's own. A varlen batch and cache_seqlens place a diagonal per sequence;
// paged K/V (forward-only decoding) has no use for one yet and is not tested with it.
void validate_diagonal_offset(const std::string& context, const std::optional<int64_t>& offset,
                              bool varlen, bool paged, bool cache_seqlens) {
  if (!offset) return;
  if (*offset > kMaxDiagonalOffset || *offset < -kMaxDiagonalOffset) {
    invalid(context, "diagonal_offset (" + std::to_string(*offset) + ") must lie within +-2^32");
  }
  if (varlen || paged || cache_seqlens) {
    unsupported(context, "diagonal_offset does not combine with a varlen batch, paged K/V or "
                         "cache_seqlens");
  }
}

bool is_aligned(const void* pointer, size_t alignment) {
  return reinterpret_cast<uintptr_t>(pointer) % alignment == 0;
}

// A [batch, heads, seq, head_dim] tensor: non-null and aligned, strides non-negative multiples
// of 16 bytes, and no two (batch, head, seq) rows overlapping.
void validate_tensor(const std::string& context, const std::string& name, const TensorRef& t,
                     int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype) {
  if (t.data == nullptr) invalid(context, name + ".data is null");
  if (!is_aligned(t.data, kTensorAlignment)) {
    invalid(context, name + ".data must be " + std::to_string(kTensorAlignment) +
                         "-byte aligned");
  }
  const int64_t stride_multiple = static_cast<int64_t>(kTensorAlignment) / dtype_size(dtype);
  struct Dim {
    const char* stride_name;
    int64_t size;
    int64_t stride;
  };
  Dim dims[] = {{"seq_stride", seq, t.seq_stride},
                {"head_stride", heads, t.head_stride},
                {"batch_stride", batch, t.batch_stride}};
  for (const Dim& dim : dims) {
    if (dim.stride < 0 || dim.stride % stride_multiple != 0) {
      invalid(context, name + "." + dim.stride_name + " (" + std::to_string(dim.stride) +
                           ") must be a non-negative multiple of " +
                           std::to_string(stride_multiple) + " elements (16 bytes)");
    }
  }
  // Rows are disjoint when, with dimensions ordered by stride, each stride reaches past
  // everything the inner dimensions span. Dimensions of size 1 never step.
  std::stable_sort(std::begin(dims), std::end(dims),
                   [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
  int64_t span = head_dim;  // elements covered by the dimensions handled so far
  const Dim* inner = nullptr;  // the last of them that steps
  for (const Dim& dim : dims) {
    if (dim.size == 1) continue;
    if (dim.stride < span) {
      // Name both strides: either may be the wrong one (a bshd seq_stride of head_dim, say).
      const std::string with = inner == nullptr ? std::string()
                                                : " with " + name + "." + inner->stride_name +
                                                      " (" + std::to_string(inner->stride) + ")";
      invalid(context, name + "." + dim.stride_name + " (" + std::to_string(dim.stride) +
                           ") makes rows overlap" + with + ": it must be at least " +
                           std::to_string(span));
    }
    inner = &dim;
    span = checked_add(checked_mul(dim.stride, dim.size - 1), span);
    if (span < 0 || checked_mul(span, dtype_size(dtype)) < 0) {
      invalid(context, name + " strides span more than 64-bit offsets can address");
    }
  }
}

void validate_lse(const std::string& context, const void* lse) {
  if (lse == nullptr) invalid(context, "lse is null");
  if (!is_aligned(lse, alignof(float))) invalid(context, "lse must be 4-byte aligned");
}

// A workspace of at least `required` bytes ("function()" names the size function).
void validate_workspace(const std::string& context, const void* workspace, size_t bytes,
                        size_t required, const std::string& size_function) {
  if (workspace == nullptr) invalid(context, "workspace is null");
  if (!is_aligned(workspace, detail::kWorkspaceAlignment)) {
    invalid(context, "workspace must be " + std::to_string(detail::kWorkspaceAlignment) +
                         "-byte aligned");
  }
  if (bytes < required) {
    invalid(context, "workspace_bytes (" + std::to_string(bytes) + ") is smaller than " +
                         size_function + " = " + std::to_string(required));
  }
}

void validate_splits(const std::string& context, const AttentionShape& s, DType dtype,
                     int64_t splits) {
  if (splits < 0) invalid(context, "splits must be >= 0 (0: automatic), got " + std::to_string(splits));
  if (splits > max_forward_splits(s)) {
    invalid(context, "splits (" + std::to_string(splits) + ") exceeds the " +
                         std::to_string(max_forward_splits(s)) + " key blocks of seq_k " +
                         std::to_string(s.seq_k) + " (64 keys each)");
  }
  if (splits > 1 && dtype == DType::fp32) {
    unsupported(context, "splits > 1 needs fp16 or bf16 (fp32 runs unsplit)");
  }
}

// The page pools and block table of a paged K/V cache (PagedKV in attention.h).
// Bytes of each paged pool ([num_pages, page_size, heads_kv, head_dim]); negative past 64 bits.
int64_t paged_pool_bytes(const AttentionShape& s, DType dtype, const PagedKV& paged) {
  return checked_mul(
      checked_mul(checked_mul(checked_mul(paged.num_pages, paged.page_size), s.heads_kv),
                  s.head_dim),
      dtype_size(dtype));
}

void validate_paged(const std::string& context, const AttentionShape& s, DType dtype,
                    const PagedKV& paged) {
  const int64_t page_size = paged.page_size;
  if (page_size < 16 || (page_size & (page_size - 1)) != 0 || page_size > kMaxSeqLen) {
    invalid(context, "paged.page_size must be a power of two from 16 to " +
                         std::to_string(kMaxSeqLen) + ", got " + std::to_string(page_size));
  }
  if (paged.num_pages <= 0) {
    invalid(context, "paged.num_pages must be positive, got " + std::to_string(paged.num_pages));
  }
  const std::pair<const char*, const void*> pools[] = {{"paged.k_pages", paged.k_pages},
                                                       {"paged.v_pages", paged.v_pages}};
  for (const auto& [name, pool] : pools) {
    if (pool == nullptr) invalid(context, std::string(name) + " is null");
    if (!is_aligned(pool, kTensorAlignment)) {
      invalid(context, std::string(name) + " must be 16-byte aligned");
    }
  }
  if (paged_pool_bytes(s, dtype, paged) < 0) {
    invalid(context, "paged pools are too large (sizes overflow 64 bits)");
  }
  if (!is_aligned(paged.block_table, alignof(int32_t))) {
    invalid(context, "paged.block_table must be 4-byte aligned");
  }
  const int64_t pages_per_sequence = (s.seq_k + page_size - 1) / page_size;
  if (paged.block_table_stride < pages_per_sequence) {
    invalid(context, "paged.block_table_stride (" + std::to_string(paged.block_table_stride) +
                         ") must be at least the " + std::to_string(pages_per_sequence) +
                         " pages of seq_k " + std::to_string(s.seq_k));
  }
}

// A variable-length batch (VarlenBatch in attention.h): offsets present and aligned, totals that
// hold the longest sequences and fit the int32 offsets, and tensors of `total` tokens with
// batch_stride 0. `tensors` lists (name, tensor, queries or keys).
struct VarlenTensor {
  const char* name;
  const TensorRef* ref;
  bool queries;
};

void validate_varlen(const std::string& context, const AttentionShape& s, DType dtype,
                     const VarlenBatch& varlen, std::initializer_list<VarlenTensor> tensors) {
  const std::pair<const char*, const int32_t*> offsets[] = {
      {"varlen.cu_seqlens_q", varlen.cu_seqlens_q}, {"varlen.cu_seqlens_k", varlen.cu_seqlens_k}};
  for (const auto& [name, pointer] : offsets) {
    if (pointer == nullptr) invalid(context, std::string(name) + " is null");
    if (!is_aligned(pointer, alignof(int32_t))) {
      invalid(context, std::string(name) + " must be 4-byte aligned");
    }
  }
  const std::pair<const char*, int64_t> totals[] = {{"q", varlen.total_q}, {"k", varlen.total_k}};
  for (const auto& [side, total] : totals) {
    const int64_t longest = side[0] == 'q' ? s.seq_q : s.seq_k;
    const char* length = side[0] == 'q' ? "shape.seq_q" : "shape.seq_k";
    if (total < longest) {
      invalid(context, std::string("varlen.total_") + side + " (" + std::to_string(total) +
                           ") is less than " + length + " (" + std::to_string(longest) +
                           "), the longest sequence");
    }
    // The workspace and the grid are sized from batch x the longest length, which the lengths
    // of batch sequences cannot exceed (a capacity given as the total would be written past).
    if (total > s.batch * longest) {
      invalid(context, std::string("varlen.total_") + side + " (" + std::to_string(total) +
                           ") is more than shape.batch x " + length + " (" +
                           std::to_string(s.batch * longest) + "): " + std::to_string(s.batch) +
                           " sequences of at most " + std::to_string(longest) +
                           " tokens cannot add up to it");
    }
    if (total > std::numeric_limits<int32_t>::max()) {
      unsupported(context, std::string("varlen.total_") + side + " (" + std::to_string(total) +
                               ") exceeds the int32 offsets");
    }
  }
  for (const VarlenTensor& t : tensors) {
    if (t.ref->batch_stride != 0) {
      invalid(context, std::string(t.name) + ".batch_stride must be 0 in a varlen batch (layout "
                       "thd: the sequences share the token axis), got " +
                       std::to_string(t.ref->batch_stride));
    }
    validate_tensor(context, t.name, *t.ref, 1, t.queries ? s.heads : s.heads_kv,
                    t.queries ? varlen.total_q : varlen.total_k, s.head_dim, dtype);
  }
}

// One tensor of a call, for validate_outputs_apart(): its name and the rows it covers.
struct Operand {
  std::string name;
  detail::StridedRows rows;
};

// A [batch, heads, seq, head_dim] tensor (validate_tensor() has passed).
Operand tensor_operand(const char* name, const TensorRef& t, int64_t batch, int64_t heads,
                       int64_t seq, int64_t head_dim, DType dtype) {
  const int64_t bytes = dtype_size(dtype);
  return {name,
          {reinterpret_cast<uintptr_t>(t.data),
           {{batch, t.batch_stride * bytes},
            {heads, t.head_stride * bytes},
            {seq, t.seq_stride * bytes}},
           head_dim * bytes}};
}

// `bytes` contiguous bytes (an LSE, a workspace, a page pool) as one row, at most 2^48 of them
// (256 TiB, beyond any device's memory): the cap keeps the overlap search's arithmetic (a distance
// between addresses plus an operand's bytes) within int64 for sizes given with no stated end (a
// workspace of SIZE_MAX) or near 2^63 (page pools).
Operand bytes_operand(const char* name, const void* data, int64_t bytes) {
  constexpr int64_t kMaxOperandBytes = int64_t{1} << 48;
  return {name, {reinterpret_cast<uintptr_t>(data), {}, std::min(bytes, kMaxOperandBytes)}};
}

// No output may share a byte with an input or with another output: CTAs write their rows of an
// output while others still read the inputs, so an overlap gives wrong numbers without an error
// (attention.h). Inputs may overlap one another (K and V in one packed buffer, say). A search
// that cannot decide within its budget (rows_overlap()) lets the call through.
void validate_outputs_apart(const std::string& context, const std::vector<Operand>& outputs,
                            const std::vector<Operand>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto refuse_if_shared = [&](const Operand& other) {
      if (detail::rows_overlap(outputs[i].rows, other.rows) == detail::Overlap::yes) {
        invalid(context, outputs[i].name + " overlaps " + other.name +
                             ": an output may share no memory with an input or another output");
      }
    };
    for (size_t j = i + 1; j < outputs.size(); ++j) refuse_if_shared(outputs[j]);
    for (const Operand& input : inputs) refuse_if_shared(input);
  }
}

// A call's tensors as operands, shaped by its problem: query-shaped (q, out, dout, dq),
// key-shaped (k, v, dk, dv) and the LSE, over batch entries of seq_q and seq_k rows (a varlen
// batch: one entry of total_q and total_k tokens).
class CallOperands {
 public:
  template <typename Args>
  explicit CallOperands(const Args& args)
      : s_(args.shape),
        varlen_(args.varlen.enabled()),
        batch_(varlen_ ? 1 : s_.batch),
        queries_(varlen_ ? args.varlen.total_q : s_.seq_q),
        keys_(varlen_ ? args.varlen.total_k : s_.seq_k) {}
  Operand queries(const char* name, const TensorRef& t, DType dtype) const {
    return tensor_operand(name, t, batch_, s_.heads, queries_, s_.head_dim, dtype);
  }
  Operand keys(const char* name, const TensorRef& t, DType dtype) const {
    return tensor_operand(name, t, batch_, s_.heads_kv, keys_, s_.head_dim, dtype);
  }
  Operand lse(const void* lse) const {
    return bytes_operand("lse", lse, batch_ * s_.heads * queries_ * int64_t(sizeof(float)));
  }

 private:
  AttentionShape s_;
  bool varlen_;
  int64_t batch_;
  int64_t queries_;
  int64_t keys_;
};

// The workspace bytes a call may write when it names none narrower: those given, as int64.
int64_t given_workspace_bytes(size_t bytes) {
  return int64_t(std::min<size_t>(bytes, size_t(std::numeric_limits<int64_t>::max())));
}

// forward()'s outputs (O, LSE and the workspace when given) apart from its inputs.
void validate_forward_outputs_apart(const std::string& context, const ForwardArgs& args) {
  const CallOperands call(args);
  std::vector<Operand> outputs = {call.queries("out", args.out, args.dtype), call.lse(args.lse)};
  if (args.workspace != nullptr && args.workspace_bytes > 0) {
    outputs.push_back(
        bytes_operand("workspace", args.workspace, given_workspace_bytes(args.workspace_bytes)));
  }
  std::vector<Operand> inputs = {call.queries("q", args.q, args.dtype)};
  if (args.paged.enabled()) {
    const int64_t pool_bytes = paged_pool_bytes(args.shape, args.dtype, args.paged);
    inputs.push_back(bytes_operand("paged.k_pages", args.paged.k_pages, pool_bytes));
    inputs.push_back(bytes_operand("paged.v_pages", args.paged.v_pages, pool_bytes));
  } else {
    inputs.push_back(call.keys("k", args.k, args.dtype));
    inputs.push_back(call.keys("v", args.v, args.dtype));
  }
  validate_outputs_apart(context, outputs, inputs);
}

// backward()'s outputs (dQ, dK and dV or their fp32 sums, and the first `workspace_bytes` of
// the workspace) apart from its inputs.
void validate_backward_outputs_apart(const std::string& context, const BackwardArgs& args,
                                     int64_t workspace_bytes) {
  const CallOperands call(args);
  std::vector<Operand> outputs;
  if (args.sums.enabled()) {
    outputs = {call.queries("sums.dq", args.sums.dq, DType::fp32),
               call.keys("sums.dk", args.sums.dk, DType::fp32),
               call.keys("sums.dv", args.sums.dv, DType::fp32)};
  } else {
    outputs = {call.queries("dq", args.dq, args.dtype), call.keys("dk", args.dk, args.dtype),
               call.keys("dv", args.dv, args.dtype)};
  }
  if (args.workspace != nullptr && workspace_bytes > 0) {
    outputs.push_back(bytes_operand("workspace", args.workspace, workspace_bytes));
  }
  const std::vector<Operand> inputs = {
      call.queries("q", args.q, args.dtype),       call.keys("k", args.k, args.dtype),
      call.keys("v", args.v, args.dtype),          call.queries("out", args.out, args.dtype),
      call.queries("dout", args.dout, args.dtype), call.lse(args.lse)};
  validate_outputs_apart(context, outputs, inputs);
}

// A varlen batch is on when cu_seqlens_q is set (VarlenBatch::enabled()), paged K/V when the
// block table is: their other fields set without it would be ignored, and the call run as a
// dense one.
void validate_optional_parts_given_whole(const std::string& context, const VarlenBatch& varlen,
                                         const PagedKV& paged = {}) {
  if (varlen.any_given() && !varlen.enabled()) {
    invalid(context,
            "varlen.cu_seqlens_q is null but other varlen fields are set: give "
            "cu_seqlens_q, cu_seqlens_k and both totals, or none");
  }
  if (paged.any_given() && !paged.enabled()) {
    invalid(context,
            "paged.block_table is null but other paged fields are set: give the pools, "
            "their sizes and the block table, or none");
  }
}

void validate_cache_seqlens(const std::string& context, const int32_t* cache_seqlens) {
  if (cache_seqlens != nullptr && !is_aligned(cache_seqlens, alignof(int32_t))) {
    invalid(context, "cache_seqlens must be 4-byte aligned");
  }
}

}  // namespace

TensorRef make_tensor_ref(void* data, Layout layout, int64_t batch, int64_t heads, int64_t seq,
                          int64_t head_dim) {
  const std::string context = "make_tensor_ref";
  const std::pair<const char*, int64_t> sizes[] = {
      {"batch", batch}, {"heads", heads}, {"seq", seq}, {"head_dim", head_dim}};
  for (const auto& [name, value] : sizes) {
    if (value <= 0) {
      invalid(context, std::string(name) + " must be positive, got " + std::to_string(value));
    }
  }
  TensorRef ref;
  ref.data = data;
  switch (layout) {
    case Layout::bhsd:
      ref.seq_stride = head_dim;
      ref.head_stride = seq * head_dim;
      ref.batch_stride = heads * seq * head_dim;
      return ref;
    case Layout::bshd:
      ref.head_stride = head_dim;
      ref.seq_stride = heads * head_dim;
      ref.batch_stride = seq * heads * head_dim;
      return ref;
    case Layout::thd:
      if (batch != 1) {
        invalid(context, "layout thd packs every sequence into one token axis: batch must be 1, "
                         "got " + std::to_string(batch));
      }
      ref.head_stride = head_dim;
      ref.seq_stride = heads * head_dim;
      ref.batch_stride = 0;
      return ref;
  }
  invalid(context, "layout is not one of bhsd, bshd, thd");
}

const char* tensor_core_kernels(int device) {
  return detail::use_sm90_kernels(device) ? "wgmma" : "mma.sync";
}

std::vector<int> supported_head_dims() {
  std::vector<int> dims;
  for (int d = detail::kHeadDimGranule; d <= detail::kMaxHeadDim; d += detail::kHeadDimGranule) {
    dims.push_back(d);
  }
  return dims;
}

std::vector<int> tuned_head_dims() {
  return std::vector<int>(std::begin(kHeadDims), std::end(kHeadDims));
}

bool is_supported_head_dim(int64_t head_dim) { return detail::compiled_head_dim(head_dim) != 0; }

int64_t kernel_head_dim(int64_t head_dim) { return detail::compiled_head_dim(head_dim); }

void forward(const ForwardArgs& args, cudaStream_t stream) {
  const std::string context = "forward";
  const detail::RecordedCall recorded("forward");
  const AttentionShape& s = args.shape;
  ForwardArgs resolved = args;
  resolved.scale = validate_problem_and_variants(context, args);
  validate_optional_parts_given_whole(context, args.varlen, args.paged);
  validate_diagonal_offset(context, args.diagonal_offset, args.varlen.enabled(),
                           args.paged.enabled(), args.cache_seqlens != nullptr);
  if (args.varlen.enabled()) {
    if (args.paged.enabled() || args.cache_seqlens != nullptr || args.splits > 1) {
      unsupported(context, "a varlen batch does not combine with paged K/V, cache_seqlens or "
                           "splits > 1");
    }
    validate_splits(context, s, args.dtype, args.splits);  // here: a negative count
    validate_varlen(context, s, args.dtype, args.varlen,
                    {{"q", &args.q, true}, {"k", &args.k, false}, {"v", &args.v, false},
                     {"out", &args.out, true}});
    validate_lse(context, args.lse);
    validate_forward_outputs_apart(context, args);
    detail::dispatch_forward(resolved, stream);
    check_cuda(cudaGetLastError(), "forward: kernel launch");
    return;
  }
  validate_tensor(context, "q", args.q, s.batch, s.heads, s.seq_q, s.head_dim, args.dtype);
  if (args.paged.enabled()) {
    validate_paged(context, s, args.dtype, args.paged);
  } else {
    validate_tensor(context, "k", args.k, s.batch, s.heads_kv, s.seq_k, s.head_dim, args.dtype);
    validate_tensor(context, "v", args.v, s.batch, s.heads_kv, s.seq_k, s.head_dim, args.dtype);
  }
  validate_cache_seqlens(context, args.cache_seqlens);
  validate_tensor(context, "out", args.out, s.batch, s.heads, s.seq_q, s.head_dim, args.dtype);
  validate_lse(context, args.lse);
  validate_splits(context, s, args.dtype, args.splits);
  if (args.workspace == nullptr) {
    resolved.workspace_bytes = 0;  // an automatic split count then stays at 1
  } else if (!is_aligned(args.workspace, detail::kWorkspaceAlignment)) {
    invalid(context, "workspace must be " + std::to_string(detail::kWorkspaceAlignment) +
                         "-byte aligned");
  }
  if (detail::split::has_score_variants(args) &&
      (detail::split::needs_split_kernel(args) || args.splits > 1)) {
    unsupported(context, "paged K/V, cache_seqlens and splits > 1 do not combine with a window, "
                         "softcap or ALiBi yet (the split kernel applies none of them)");
  }
  if (detail::split::needs_split_kernel(args)) {
    if (args.dtype == DType::fp32) {
      unsupported(context, "paged K/V and cache_seqlens need fp16 or bf16 (the split kernel)");
    }
    if (detail::split::plan_forward(resolved).kernel == detail::split::ForwardKernel::tiled) {
      unsupported(context, "paged K/V and cache_seqlens: the device lacks the shared memory of "
                           "the split kernel at head_dim " + std::to_string(s.head_dim));
    }
  }
  if (args.splits > 1) {
    if (detail::split::plan_forward(resolved).splits != args.splits) {
      unsupported(context, "splits > 1: the device lacks the shared memory of the split kernel "
                           "at head_dim " + std::to_string(s.head_dim));
    }
    validate_workspace(context, args.workspace, args.workspace_bytes,
                       forward_workspace_size(s, args.dtype, args.splits),
                       "forward_workspace_size()");
  }
  validate_forward_outputs_apart(context, args);

  detail::dispatch_forward(resolved, stream);
  check_cuda(cudaGetLastError(), "forward: kernel launch");
}

int64_t max_forward_splits(const AttentionShape& shape) {
  return detail::split::key_blocks(shape.seq_k);
}

size_t forward_workspace_size(const AttentionShape& shape, DType dtype, int64_t splits) {
  const std::string context = "forward_workspace_size";
  validate_sizes(context, shape);
  if (!is_valid(dtype)) invalid(context, "dtype is not one of fp16, bf16, fp32");
  if (!is_supported_head_dim(shape.head_dim)) return 0;  // forward() refuses the shape
  validate_splits(context, shape, dtype, splits);
  ForwardArgs args;
  args.shape = shape;
  args.dtype = dtype;
  args.splits = splits;
  args.workspace_bytes = std::numeric_limits<size_t>::max();
  return detail::split::forward_workspace_bytes(shape, detail::split::plan_forward(args).splits);
}

namespace {

// The merge's outputs, O and LSE, apart from its inputs, the partials (attention.h): a row's O
// and LSE are written while other rows' partials may still be read.
void validate_merge_outputs_apart(const std::string& context, const MergePartialsArgs& args,
                                  int64_t rows) {
  const int64_t float_bytes = sizeof(float);
  validate_outputs_apart(
      context,
      {tensor_operand("out", args.out, args.batch, args.heads, args.seq_q, args.head_dim,
                      args.dtype),
       bytes_operand("lse", args.lse, rows * float_bytes)},
      {bytes_operand("partial_out", args.partial_out,
                     args.splits * rows * args.head_dim * float_bytes),
       bytes_operand("partial_lse", args.partial_lse, args.splits * rows * float_bytes)});
}

}  // namespace

void merge_attention_partials(const MergePartialsArgs& args, cudaStream_t stream) {
  const std::string context = "merge_attention_partials";
  const detail::RecordedCall recorded("merge_attention_partials");
  const std::pair<const char*, int64_t> sizes[] = {{"splits", args.splits},
                                                   {"batch", args.batch},
                                                   {"heads", args.heads},
                                                   {"seq_q", args.seq_q},
                                                   {"head_dim", args.head_dim}};
  for (const auto& [name, value] : sizes) {
    if (value <= 0) {
      invalid(context, std::string(name) + " must be positive, got " + std::to_string(value));
    }
  }
  if (args.head_dim % 8 != 0) {
    invalid(context, "head_dim must be a multiple of 8, got " + std::to_string(args.head_dim));
  }
  if (!is_valid(args.dtype)) invalid(context, "dtype is not one of fp16, bf16, fp32");
  const int64_t rows = checked_mul(checked_mul(args.batch, args.heads), args.seq_q);
  if (checked_mul(checked_mul(checked_mul(rows, args.splits), args.head_dim), 8) < 0) {
    invalid(context, "sizes are too large (they overflow 64 bits)");
  }
  if (args.partial_out == nullptr) invalid(context, "partial_out is null");
  if (!is_aligned(args.partial_out, kTensorAlignment)) {
    invalid(context, "partial_out must be 16-byte aligned");
  }
  if (args.partial_lse == nullptr) invalid(context, "partial_lse is null");
  if (!is_aligned(args.partial_lse, alignof(float))) {
    invalid(context, "partial_lse must be 4-byte aligned");
  }
  validate_tensor(context, "out", args.out, args.batch, args.heads, args.seq_q, args.head_dim,
                  args.dtype);
  validate_lse(context, args.lse);
  validate_merge_outputs_apart(context, args, rows);
  detail::dispatch_merge(args, stream);
  check_cuda(cudaGetLastError(), "merge_attention_partials: kernel launch");
}

size_t backward_workspace_size(const AttentionShape& shape, DType dtype, bool deterministic) {
  const std::string context = "backward_workspace_size";
  validate_sizes(context, shape);
  if (!is_valid(dtype)) invalid(context, "dtype is not one of fp16, bf16, fp32");
  return detail::workspace_bytes(shape, deterministic);
}

namespace {

// The dense tensors of a backward call: inputs in the dtype, and the gradients either in the
// dtype (dq, dk, dv) or, with BackwardArgs::sums, as fp32 sums (dq, dk, dv then unused).
void validate_backward_tensors(const std::string& context, const BackwardArgs& args) {
  const AttentionShape& s = args.shape;
  const auto query_shaped = [&](const char* name, const TensorRef& ref, DType dtype) {
    validate_tensor(context, name, ref, s.batch, s.heads, s.seq_q, s.head_dim, dtype);
  };
  const auto key_shaped = [&](const char* name, const TensorRef& ref, DType dtype) {
    validate_tensor(context, name, ref, s.batch, s.heads_kv, s.seq_k, s.head_dim, dtype);
  };
  query_shaped("q", args.q, args.dtype);
  query_shaped("out", args.out, args.dtype);
  query_shaped("dout", args.dout, args.dtype);
  key_shaped("k", args.k, args.dtype);
  key_shaped("v", args.v, args.dtype);
  if (args.sums.enabled()) {
    query_shaped("sums.dq", args.sums.dq, DType::fp32);
    key_shaped("sums.dk", args.sums.dk, DType::fp32);
    key_shaped("sums.dv", args.sums.dv, DType::fp32);
  } else {
    query_shaped("dq", args.dq, args.dtype);
    key_shaped("dk", args.dk, args.dtype);
    key_shaped("dv", args.dv, args.dtype);
  }
}

// GradientSums are on when sums.dq is set (enabled()); dk or dv set without it would be
// ignored silently.
void validate_sums_given_whole(const std::string& context, const GradientSums& sums) {
  if (sums.any_given() && !sums.enabled()) {
    invalid(context, "sums.dk or sums.dv is set but sums.dq is null: give all three or none");
  }
}

}  // namespace

void backward(const BackwardArgs& args, cudaStream_t stream) {
  const std::string context = "backward";
  const detail::RecordedCall recorded("backward");
  const AttentionShape& s = args.shape;
  BackwardArgs resolved = args;
  resolved.scale = validate_problem_and_variants(context, args);
  validate_optional_parts_given_whole(context, args.varlen);
  validate_diagonal_offset(context, args.diagonal_offset, args.varlen.enabled(), false, false);
  validate_sums_given_whole(context, args.sums);
  if (args.sums.enabled() && args.varlen.enabled()) {
    invalid(context, "sums (fp32 gradient sums) do not combine with a varlen batch");
  }
  if (args.varlen.enabled()) {
    validate_varlen(context, s, args.dtype, args.varlen,
                    {{"q", &args.q, true}, {"out", &args.out, true}, {"dout", &args.dout, true},
                     {"dq", &args.dq, true}, {"k", &args.k, false}, {"v", &args.v, false},
                     {"dk", &args.dk, false}, {"dv", &args.dv, false}});
  } else {
    validate_backward_tensors(context, args);
  }
  validate_lse(context, args.lse);
  validate_workspace(context, args.workspace, args.workspace_bytes,
                     backward_workspace_size(s, args.dtype, args.deterministic),
                     args.deterministic ? "backward_workspace_size(shape, dtype, true)"
                                        : "backward_workspace_size()");
  // (the bytes the kernels use: a larger workspace_bytes may reach past them harmlessly)
  validate_backward_outputs_apart(
      context, args, int64_t(backward_workspace_size(s, args.dtype, args.deterministic)));

  detail::dispatch_backward(resolved, stream);
  check_cuda(cudaGetLastError(), "backward: kernel launch");
}

void check_problem_args(const ForwardArgs& args, const std::string& caller) {
  validate_problem_and_variants(caller, args);
  validate_optional_parts_given_whole(caller, args.varlen, args.paged);
  validate_diagonal_offset(caller, args.diagonal_offset, false, false, false);
}

void check_problem_args(const BackwardArgs& args, const std::string& caller) {
  validate_problem_and_variants(caller, args);
  validate_optional_parts_given_whole(caller, args.varlen);
  validate_diagonal_offset(caller, args.diagonal_offset, false, false, false);
}

void check_dense_forward_args(const ForwardArgs& args, const std::string& caller) {
  const AttentionShape& s = args.shape;
  check_problem_args(args, caller);
  validate_tensor(caller, "q", args.q, s.batch, s.heads, s.seq_q, s.head_dim, args.dtype);
  validate_tensor(caller, "k", args.k, s.batch, s.heads_kv, s.seq_k, s.head_dim, args.dtype);
  validate_tensor(caller, "v", args.v, s.batch, s.heads_kv, s.seq_k, s.head_dim, args.dtype);
  validate_tensor(caller, "out", args.out, s.batch, s.heads, s.seq_q, s.head_dim, args.dtype);
  validate_lse(caller, args.lse);
  validate_forward_outputs_apart(caller, args);
}

void check_dense_backward_args(const BackwardArgs& args, const std::string& caller) {
  check_problem_args(args, caller);
  validate_sums_given_whole(caller, args.sums);
  validate_backward_tensors(caller, args);
  validate_lse(caller, args.lse);
  validate_backward_outputs_apart(caller, args, given_workspace_bytes(args.workspace_bytes));
}

int device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the error so later calls do not report it
    return 0;
  }
  return count;
}

BackwardArgs backward_args_for(const ForwardArgs& forward) {
  BackwardArgs args;
  args.shape = forward.shape;
  args.dtype = forward.dtype;
  args.mask = forward.mask;
  args.scale = forward.scale;
  args.window = forward.window;
  args.softcap = forward.softcap;
  args.alibi = forward.alibi;
  args.varlen = forward.varlen;
  args.diagonal_offset = forward.diagonal_offset;
  args.q = forward.q;
  args.k = forward.k;
  args.v = forward.v;
  args.out = forward.out;
  args.lse = forward.lse;
  return args;
}

}  // namespace cuflash
