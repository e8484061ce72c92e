// Context-parallel (ring) attention over several GPUs of one host, one process driving all of
// them through NCCL's single-process communicators (ncclCommInitAll).
//
// The plan (plan.h) cuts both sequences into 2N chunks; rank r keeps its shard of each tensor on
// its own GPU: chunks r and 2N-1-r, one after the other (ShardRows), in the whole problem's
// layout (bhsd [B, heads, rows, D] or bshd [B, rows, heads, D], dense). At each of the N ring
// steps a rank computes the blocks of its two query chunks against the K/V shard it holds, each
// through forward() or backward() at the block's global diagonal (ForwardArgs::diagonal_offset),
// while NCCL passes the shards one rank on (send to r + 1, receive from r - 1, on a stream of
// its own, overlapped with the blocks). The forward merges each query chunk's partial results
// as they come (merge_attention_partials()); the backward adds each block's dK and dV into fp32
// sums that travel with the shard and reach their owner after the last step, and its dQ into a
// local fp32 sum; the gradients are rounded to the dtype once per rank at the end.
//
// Dense problems only, as the single-GPU mode (single_gpu.h): no varlen batch, paged K/V,
// cache_seqlens, key splits, diagonal_offset or gradient sums of the caller's. Built when CMake
// finds NCCL (option CUFLASH_NCCL); ring_available() says whether this build has it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuflash/attention.h"
#include "cuflash/host_runner.h"
#include "cuflash/types.h"

namespace cuflash::context_parallel {

// Whether this build has NCCL (otherwise Ring's constructor and ring_passes() throw
// cuflash::Error of kind unsupported).
bool ring_available();
// "NCCL 2.28.9" (the library loaded at run time), or "" without NCCL.
std::string nccl_version();

// One rank's tensors, on its GPU: shards of `rows` rows (shard_rows()) in the whole problem's
// layout, dense. ALiBi slopes, when the problem has them, are the rank's own copy.
struct RankForward {
  TensorRef q, k, v, out;
  float* lse = nullptr;                  // [B, H, query shard rows] fp32
  const float* alibi_slopes = nullptr;   // as ForwardArgs::alibi.data, on this rank's GPU
};

struct RankBackward {
  TensorRef q, k, v, out, dout, dq, dk, dv;
  const float* lse = nullptr;            // the forward's, [B, H, query shard rows]
  const float* alibi_slopes = nullptr;
};

class Ring {
 public:
  // One rank per device, devices distinct. Creates the NCCL communicators and, per rank, a
  // compute stream and a transfer stream. Throws cuflash::Error.
  explicit Ring(const std::vector<int>& devices);
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  int ranks() const;
  int device(int rank) const;
  // Each rank's compute stream: forward() and backward() start after the work already on it
  // and end on it (the transfer streams join it).
  cudaStream_t stream(int rank) const;

  // forward() of the whole problem `problem` (its shape, dtype, mask, window, scale, softcap
  // and whether it has ALiBi slopes; its tensors, lse and workspace are not read) with each
  // rank's shards in `tensors`, all dense in `layout` (bhsd or bshd). Asynchronous; scratch is
  // allocated on each GPU at its first use for a shape and kept for the next calls. Throws
  // cuflash::Error for what it does not serve, before any transfer: the whole problem is checked
  // as one call would be (check_problem_args(): its sequence lengths within a call's limits, an
  // ALiBi pointer aligned), then every rank's tensors.
  void forward(const ForwardArgs& problem, Layout layout, const std::vector<RankForward>& tensors);
  // backward() likewise, from the forward's O and LSE shards.
  void backward(const BackwardArgs& problem, Layout layout,
                const std::vector<RankBackward>& tensors);

  // The communication of the last forward() or backward(), per rank, averaged over the ranks:
  // the time of its NCCL groups on the transfer streams (from when the rank could start them:
  // waiting for the neighbours counts too), and how long the compute streams waited for a
  // transfer after their own blocks were done. Waits for the ring's streams. Zero with one rank
  // (nothing travels). Of a call made directly: a call replayed from a CUDA graph records none.
  CommunicationTimes last_communication() const;

  struct Impl;  // the communicators, streams, events and scratch (ring.cpp)

 private:
  std::unique_ptr<Impl> impl_;
};

// Device memory one rank of a Ring holds for a problem besides the whole tensors (the largest
// rank's: its shards, as ring_passes() keeps them, and the ring's scratch), in bytes; in every
// build, so that a caller can check a case before it runs. `backward`: a forward and a backward
// call on the same shape (the ring keeps both calls' scratch).
size_t ring_rank_device_bytes(const AttentionShape& shape, DType dtype, int gpus, bool backward);

// When ring_passes() copy the whole problem's tensors to the ranks' shards and the results back.
enum class ShardCopies {
  every_call,  // each call: the whole tensors may change between calls (the host runner)
  first_call,  // the first call with these tensors and shape only; later calls leave the
               // whole outputs as the first call wrote them and compute on the shards: a timing
               // of them is the ring's own, transfers and attention (the benchmark, whose inputs
               // stay the same)
};

// The passes of the host runner and the benchmark (host_runner.h) over `gpus` GPUs (devices 0
// to gpus - 1): the whole problem's tensors, on the caller's device, are copied into each
// rank's shards as `copies` says, computed by a Ring and the results copied back; the shards
// and the Ring are kept for the next call of the same shape. last_communication is set.
DevicePasses ring_passes(int gpus, ShardCopies copies = ShardCopies::every_call);

}  // namespace cuflash::context_parallel
