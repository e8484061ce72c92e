// Convenience layer over attention.h for host data: uploads inputs, poisons the outputs (so an
// element a kernel forgot to write shows up as NaN), runs the kernels, downloads the results and
// frees everything. Used by the CLI, the GPU tests and the examples; not for hot paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "cuflash/attention.h"
#include "cuflash/device_buffer.h"

namespace cuflash {

// Host tensors hold raw elements of the problem's dtype (2 or 4 bytes each) densely packed in
// its layout: bhsd = [batch, heads, seq, head_dim], bshd = [batch, seq, heads, head_dim], thd =
// [tokens, heads, head_dim] for a varlen problem (Problem::seqlens_q; LSE [heads, total_q]). The
// kernels take the problem's scale as float (0 means 1/sqrt(head_dim)).
using HostBytes = std::vector<unsigned char>;

struct HostForwardResult {
  HostBytes out;           // like q
  std::vector<float> lse;  // [batch, heads, seq_q] ([heads, total_q] varlen)
};

struct HostBackwardResult {
  HostBytes dq, dk, dv;  // like q, k, v
};

// The device side of the forward options that live in device memory: with problem.page_size > 0,
// K and V moved (on the device) into a paged cache of that many keys per page, every batch
// entry's pages in a shuffled order (a fixed seed) in pools of [num_pages, page_size, heads_kv,
// head_dim] that also hold unused pages; the unused pages and the slots past seq_k hold NaN, so
// that a kernel reading a wrong page or slot gives NaN. With problem.cache_seqlens, the key
// lengths. `k` and `v` are the problem's dense K and V on the device (bhsd or bshd; read only
// with a page size); the object no longer needs them once constructed.
// Throws cuflash::Error (invalid_argument for lengths of the wrong count or outside [1, seq_k]).
class DeviceForwardExtras {
 public:
  DeviceForwardExtras(const Problem& problem, const void* k, const void* v, cudaStream_t stream);
  void apply(ForwardArgs& args) const;  // sets args.paged and args.cache_seqlens
  size_t bytes() const;                 // of the device buffers

 private:
  DeviceBuffer k_pages_, v_pages_, block_table_, cache_seqlens_;
  PagedKV paged_;
};

// Communication of one pass over several GPUs, per GPU (the mean over the GPUs): the time of its
// transfers (from the moment a GPU could start them, so waiting for its neighbours to reach the
// same transfer counts too), and the part of that time during which the GPU had no attention
// left to compute and waited (the rest was hidden behind the attention).
struct CommunicationTimes {
  double transfer_ms = 0;
  double exposed_ms = 0;
};

// How a problem is computed on the device, for the host runner below and the benchmark:
// library_passes() are forward() and backward() with their workspaces; another computation of the
// same attention on the same arguments brings its own (the single-GPU mode of context
// parallelism: cuflash/context_parallel/single_gpu.h, device_passes()).
struct DevicePasses {
  int ranks = 0;  // the Problem::ranks these passes compute (0: the attention in one piece)
  int gpus = 0;   // the Problem::gpus they compute over (0: the current GPU alone)
  // The communication of the last forward or backward pass (waits for it to finish); set only
  // by passes over several GPUs (context_parallel::ring_passes()).
  std::function<CommunicationTimes()> last_communication;
  // Bytes of the workspace each pass takes for a problem (ForwardArgs / BackwardArgs::workspace).
  std::function<size_t(const Problem&)> forward_workspace_bytes;
  std::function<size_t(const Problem&)> backward_workspace_bytes;
  std::function<void(const ForwardArgs&, cudaStream_t)> forward;
  std::function<void(const BackwardArgs&, cudaStream_t)> backward;
};
DevicePasses library_passes();

// Throws cuflash::Error (invalid_argument when a buffer's size does not match the problem, or
// when `passes` compute other ranks than problem.ranks). A problem with page_size or
// cache_seqlens runs through DeviceForwardExtras.
HostForwardResult run_forward(const Problem& problem, const HostBytes& q, const HostBytes& k,
                              const HostBytes& v, const DevicePasses& passes = library_passes());

// Runs forward (for O and LSE) and then backward. Refuses (invalid_argument) a problem with
// page_size or cache_seqlens: those are forward only.
struct HostForwardBackwardResult {
  HostForwardResult forward;
  HostBackwardResult backward;
};
HostForwardBackwardResult run_forward_backward(const Problem& problem, const HostBytes& q,
                                               const HostBytes& k, const HostBytes& v,
                                               const HostBytes& dout,
                                               const DevicePasses& passes = library_passes());

}  // namespace cuflash
