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
// whose size backward_workspace_size() gives.
#pragma once

#include <cstddef>
#include <cstdint>
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
struct TensorRef {
  void* data = nullptr;
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
  int64_t seq_stride = 0;
};

// Strides of a densely packed tensor in the given layout.
TensorRef make_tensor_ref(void* data, Layout layout, int64_t batch, int64_t heads, int64_t seq,
                          int64_t head_dim);

// ALiBi slopes in device memory, fp32: the slope of (batch b, query head h) is
// data[b * batch_stride + h]. batch_stride is 0 for one set of [heads] slopes shared by every
// batch, `heads` for [batch, heads]. data == nullptr: no ALiBi. Slopes must be finite (not
// checked: they are on the device).
struct AlibiSlopes {
  const float* data = nullptr;
  int64_t batch_stride = 0;
};

// The variants of the scores, in the order they apply (problem.h has the semantics): the scaled
// score s = scale * q.k, then softcap * tanh(s / softcap) when softcap > 0, then minus the ALiBi
// bias, then the causal mask and the window.
struct ForwardArgs {
  AttentionShape shape;
  DType dtype = DType::fp16;
  Mask mask = Mask::none;
  float scale = 0.f;  // softmax scale: finite and >= 0; 0 means 1/sqrt(head_dim)
  Window window;      // bounds >= -1 (-1: unbounded)
  float softcap = 0.f;  // finite and >= 0; 0: off
  AlibiSlopes alibi;
  TensorRef q, k, v;  // inputs
  TensorRef out;      // output O, same shape as q
  float* lse = nullptr;  // output [batch, heads, seq_q] fp32, contiguous: natural-log sum-exp of
                         // the scaled scores; +inf for rows that see no key
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
  void* workspace = nullptr;     // at least backward_workspace_size() bytes, 256-byte aligned
  size_t workspace_bytes = 0;
};

// The backward arguments that restate the forward call's: shape, dtype, mask, scale, window,
// softcap, alibi, q, k, v, out and lse. The caller adds dout, dq, dk, dv and the workspace.
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
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // The problem's ALiBi slopes copied to the device (problem.alibi_slopes, [heads] or
  // [batch, heads]); read when the problem has slopes.
  const float* alibi_slopes = nullptr;
};

// The forward() arguments of `problem` on `tensors`: shape, dtype, mask, the scale and softcap
// as float, window, ALiBi slopes, and make_tensor_ref() views in problem.layout. Throws
// cuflash::Error (invalid_argument) when the problem has ALiBi slopes and tensors.alibi_slopes
// is null, rather than silently leaving the bias out.
inline ForwardArgs forward_args(const Problem& problem, const DenseTensors& tensors) {
  const AttentionShape& s = problem.shape;
  ForwardArgs args;
  args.shape = s;
  args.dtype = problem.dtype;
  args.mask = problem.mask;
  args.scale = static_cast<float>(problem.scale);
  args.window = problem.window;
  args.softcap = static_cast<float>(problem.softcap);
  if (!problem.alibi_slopes.empty()) {
    if (tensors.alibi_slopes == nullptr) {
      throw Error(Error::Kind::invalid_argument,
                  "forward_args: the problem has ALiBi slopes but tensors.alibi_slopes is null");
    }
    args.alibi = {tensors.alibi_slopes, problem.alibi_batch_stride()};
  }
  args.q = make_tensor_ref(tensors.q, problem.layout, s.batch, s.heads, s.seq_q, s.head_dim);
  args.k = make_tensor_ref(tensors.k, problem.layout, s.batch, s.heads_kv, s.seq_k, s.head_dim);
  args.v = make_tensor_ref(tensors.v, problem.layout, s.batch, s.heads_kv, s.seq_k, s.head_dim);
  args.out = make_tensor_ref(tensors.out, problem.layout, s.batch, s.heads, s.seq_q, s.head_dim);
  args.lse = tensors.lse;
  return args;
}

// The backward() arguments: those of forward_args() plus dout, dq, dk, dv and the workspace.
inline BackwardArgs backward_args(const Problem& problem, const DenseTensors& tensors) {
  const AttentionShape& s = problem.shape;
  BackwardArgs args = backward_args_for(forward_args(problem, tensors));
  args.dout = make_tensor_ref(tensors.dout, problem.layout, s.batch, s.heads, s.seq_q, s.head_dim);
  args.dq = make_tensor_ref(tensors.dq, problem.layout, s.batch, s.heads, s.seq_q, s.head_dim);
  args.dk = make_tensor_ref(tensors.dk, problem.layout, s.batch, s.heads_kv, s.seq_k, s.head_dim);
  args.dv = make_tensor_ref(tensors.dv, problem.layout, s.batch, s.heads_kv, s.seq_k, s.head_dim);
  args.workspace = tensors.workspace;
  args.workspace_bytes = tensors.workspace_bytes;
  return args;
}

// Head dimensions with compiled kernels, for every dtype, in increasing order.
std::vector<int> supported_head_dims();
bool is_supported_head_dim(int64_t head_dim);

// The kernels forward() and backward() run for fp16/bf16 at head_dim 64 and 128 on `device`:
// "wgmma" (Hopper's warpgroup instructions and TMA loads; needs a build for sm_90a and a compute
// capability 9.0 device, and is off when the environment variable CUFLASH_DISABLE_WGMMA is set
// to anything but 0; the variable is read once per process, at the first call) or "mma.sync"
// (everywhere else; also always at head_dim 32 and for fp32, and for tensors whose strides TMA
// cannot describe).
const char* tensor_core_kernels(int device);

void forward(const ForwardArgs& args, cudaStream_t stream = nullptr);

// Bytes of device scratch backward() needs: an fp32 dQ accumulator of batch*heads*seq_q*head_dim
// and the row sums D_i = rowsum(dO_i * O_i) of batch*heads*seq_q, each rounded up to 256 bytes.
size_t backward_workspace_size(const AttentionShape& shape, DType dtype);

void backward(const BackwardArgs& args, cudaStream_t stream = nullptr);

// Number of CUDA devices usable by this process; 0 (never an exception) when there is none or
// no driver.
int device_count() noexcept;

}  // namespace cuflash
