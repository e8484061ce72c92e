#include "cuflash/context_parallel/ring.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include <nccl.h>

#include "cuflash/context_parallel/plan.h"
#include "cuflash/context_parallel/single_gpu.h"
#include "cuflash/cuda_error.h"
#include "cuflash/device_buffer.h"
#include "cuflash/error.h"
#include "chunk_merge.h"
#include "rows.h"

namespace cuflash::context_parallel {
namespace {

constexpr const char* kContext = "context_parallel::Ring";

[[noreturn]] void refuse(Error::Kind kind, const std::string& what) {
  throw Error(kind, std::string(kContext) + ": " + what);
}

void check_nccl(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) {
    refuse(Error::Kind::cuda, std::string(what) + ": " + ncclGetErrorString(result));
  }
}

// Makes `device` current for the lifetime of the guard, then restores the previous one.
// `quiet` (for destructors) ignores failures instead of throwing.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device, bool quiet = false) {
    if (quiet) {
      cudaGetDevice(&previous_);
      cudaSetDevice(device);
      return;
    }
    check_cuda(cudaGetDevice(&previous_), "context parallelism: cudaGetDevice");
    check_cuda(cudaSetDevice(device), "context parallelism: cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// An NCCL group that is closed whatever happens inside it (a failed call throws).
class NcclGroup {
 public:
  NcclGroup() { check_nccl(ncclGroupStart(), "ncclGroupStart"); }
  void end() {
    open_ = false;
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  }
  ~NcclGroup() {
    if (open_) ncclGroupEnd();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

 private:
  bool open_ = true;
};

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::fp16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::fp32: return ncclFloat32;
  }
  return ncclFloat32;
}

size_t element_bytes(int64_t count, DType dtype) { return size_t(count) * dtype_size(dtype); }

// Whether `t` has the strides of a dense tensor in `layout` (a stride over a size of 1 is free).
bool dense_in(const TensorRef& t, Layout layout, int64_t batch, int64_t heads, int64_t rows,
              int64_t head_dim) {
  const TensorRef dense = make_tensor_ref(t.data, layout, batch, heads, rows, head_dim);
  return (batch == 1 || dense.batch_stride == t.batch_stride) &&
         (heads == 1 || dense.head_stride == t.head_stride) &&
         (rows == 1 || dense.seq_stride == t.seq_stride);
}

// A dense shard of `rows` rows in `layout`; a rank whose chunks are empty (shorter sequences
// than 2N) has a shard of none, which no block reads.
TensorRef shard_tensor(void* data, Layout layout, int64_t batch, int64_t heads, int64_t rows,
                       int64_t head_dim) {
  if (rows == 0) return TensorRef{data, 0, 0, 0};
  return make_tensor_ref(data, layout, batch, heads, rows, head_dim);
}

// Refuses a rank's tensor that is null, misaligned or not a dense shard of `rows` rows in
// `layout`.
void require_shard(const std::string& name, int rank, const TensorRef& t, Layout layout,
                   int64_t batch, int64_t heads, int64_t rows, int64_t head_dim) {
  const std::string what = name + " of rank " + std::to_string(rank);
  if (t.data == nullptr) refuse(Error::Kind::invalid_argument, what + " is null");
  if (reinterpret_cast<uintptr_t>(t.data) % kTensorAlignment != 0) {  // as forward() asks
    refuse(Error::Kind::invalid_argument,
           what + " must be " + std::to_string(kTensorAlignment) + "-byte aligned");
  }
  if (rows > 0 && !dense_in(t, layout, batch, heads, rows, head_dim)) {
    refuse(Error::Kind::invalid_argument,
           what + " is not a dense " + (layout == Layout::bhsd ? "bhsd" : "bshd") + " shard of " +
               std::to_string(rows) + " rows");
  }
}

// One rank's device scratch for a problem shape: the ring's K/V buffers, and the forward's and
// the backward's own room, each allocated on the rank's GPU at its first use for the shape.
struct RankScratch {
  DeviceBuffer kv[2][2];          // [buffer][K or V]: the held shard and the one arriving
  // Forward
  DeviceBuffer block_out;         // a block's O in the dtype
  DeviceBuffer slots_out[2];      // ChunkMerge's fp32 partial O slots, per query chunk
  DeviceBuffer slots_lse[2];
  // Backward
  // [buffer][dK or dV], fp32: the sums a rank adds the held shard's terms to (zero at each
  // step), and the sums of the shard's earlier holders arriving meanwhile; the one is added to
  // the other after the step's blocks and passed on with the shard.
  DeviceBuffer grad_sums[2][2];
  DeviceBuffer grad_arrived[2][2];
  DeviceBuffer dq_sum;            // fp32 [B, H, query shard rows, D]
  DeviceBuffer chunk_lse[2];      // packed LSE rows of each query chunk
  DeviceBuffer block_workspace;   // backward()'s, deterministic or not
};


}  // namespace

bool ring_available() { return true; }

std::string nccl_version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "NCCL (version unknown)";
  // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z since 2.9.
  return "NCCL " + std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

struct Ring::Impl {
  std::vector<int> devices;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> compute, transfer;
  // Per rank and ring step: the step's blocks done; the K/V shard of the next step arrived
  // (pass_kv()); in the backward the step's sums complete (summed) and passed on, the next
  // shard's earlier sums arrived (sums_arrived).
  std::vector<std::vector<cudaEvent_t>> computed, kv_arrived, summed, sums_arrived;
  // For last_communication(): the begin and end events of each NCCL group of the last call, per
  // rank in issue order (group g: 2g, 2g + 1), and each wait of a compute stream for a
  // transfer (wait w: the stream's position before it is wait_events[r][w], the awaited event
  // awaited[r][w]); made as needed, counted per call.
  std::vector<std::vector<cudaEvent_t>> group_events, wait_events, awaited;
  int groups = 0;
  std::vector<int> waits;
  // Scratch per rank for the shape and dtype of scratch_key.
  std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int> scratch_key{};
  std::vector<RankScratch> scratch;

  ~Impl();
  int ranks() const { return int(devices.size()); }
  int next(int r) const { return (r + 1) % ranks(); }
  int previous(int r) const { return (r + ranks() - 1) % ranks(); }

  void synchronize_quietly() const;
  void make_scratch(const AttentionShape& s, DType dtype, bool backward);
  void wait(int rank, cudaStream_t stream, cudaEvent_t event) const;
  void record(int rank, cudaEvent_t event, cudaStream_t stream) const;
  // Rank `rank`'s compute stream waits for a transfer's event; timed for last_communication().
  void wait_for_transfer(int rank, cudaEvent_t transfer_event);
  void start_call() {
    groups = 0;
    waits.assign(size_t(ranks()), 0);
  }
  // Marks the start (end) of the next NCCL group on every rank's transfer stream.
  void mark_group(bool end);
};

// Releases what the constructor made, also when it stopped half-way: streams are drained,
// scratch freed on its own devices, the communicators finalized together (one thread holds
// all of them, so their finalization is one group) and destroyed.
Ring::Impl::~Impl() {
  synchronize_quietly();
  for (size_t r = 0; r < scratch.size(); ++r) {
    DeviceGuard guard(devices[r], true);
    scratch[r] = RankScratch{};
  }
  for (size_t r = 0; r < compute.size(); ++r) {
    DeviceGuard guard(devices[r], true);
    for (auto* events :
         {&computed[r], &kv_arrived[r], &summed[r], &sums_arrived[r], &group_events[r],
          &wait_events[r]}) {
      for (cudaEvent_t e : *events) {
        if (e != nullptr) cudaEventDestroy(e);
      }
    }
    if (compute[r] != nullptr) cudaStreamDestroy(compute[r]);
    if (transfer[r] != nullptr) cudaStreamDestroy(transfer[r]);
  }
  if (!comms.empty() && comms[0] != nullptr) {
    ncclGroupStart();
    for (ncclComm_t comm : comms) ncclCommFinalize(comm);
    ncclGroupEnd();
    for (ncclComm_t comm : comms) ncclCommDestroy(comm);
  }
}

void Ring::Impl::synchronize_quietly() const {
  for (size_t r = 0; r < compute.size(); ++r) {
    DeviceGuard guard(devices[r], true);
    if (compute[r] != nullptr) cudaStreamSynchronize(compute[r]);
    if (transfer[r] != nullptr) cudaStreamSynchronize(transfer[r]);
  }
}

void Ring::Impl::wait(int rank, cudaStream_t stream, cudaEvent_t event) const {
  DeviceGuard guard(devices[size_t(rank)]);
  check_cuda(cudaStreamWaitEvent(stream, event, 0), "context parallelism: a stream waits");
}

void Ring::Impl::record(int rank, cudaEvent_t event, cudaStream_t stream) const {
  DeviceGuard guard(devices[size_t(rank)]);
  check_cuda(cudaEventRecord(event, stream), "context parallelism: recording an event");
}

namespace {

// An event of `events` at `index`, made (with timing) when the list is shorter.
cudaEvent_t pooled_event(std::vector<cudaEvent_t>& events, size_t index) {
  while (events.size() <= index) {
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreate(&e), "context parallelism: creating an event");
    events.push_back(e);
  }
  return events[index];
}

}  // namespace

void Ring::Impl::wait_for_transfer(int rank, cudaEvent_t transfer_event) {
  DeviceGuard guard(devices[size_t(rank)]);
  const size_t index = size_t(waits[size_t(rank)]++);
  record(rank, pooled_event(wait_events[size_t(rank)], index), compute[size_t(rank)]);
  std::vector<cudaEvent_t>& list = awaited[size_t(rank)];
  if (list.size() <= index) list.resize(index + 1, nullptr);
  list[index] = transfer_event;
  wait(rank, compute[size_t(rank)], transfer_event);
}

void Ring::Impl::mark_group(bool end) {
  const size_t index = size_t(2 * groups + (end ? 1 : 0));
  for (int r = 0; r < ranks(); ++r) {
    DeviceGuard guard(devices[size_t(r)]);
    record(r, pooled_event(group_events[size_t(r)], index), transfer[size_t(r)]);
  }
  if (end) ++groups;
}

void Ring::Impl::make_scratch(const AttentionShape& s, DType dtype, bool backward) {
  const auto key = std::make_tuple(s.batch, s.heads, s.heads_kv, s.seq_q, s.seq_k, s.head_dim,
                                   int(dtype));
  if (scratch.empty() || key != scratch_key) {
    synchronize_quietly();  // earlier calls may still use the buffers about to go
    for (size_t r = 0; r < scratch.size(); ++r) {
      DeviceGuard guard(devices[r]);
      scratch[r] = RankScratch{};
    }
    scratch.clear();
    scratch.resize(size_t(ranks()));
    scratch_key = key;
  }
  const int n = ranks();
  const std::vector<Chunk> q_chunks = split_into_chunks(s.seq_q, 2 * n);
  const std::vector<Chunk> k_chunks = split_into_chunks(s.seq_k, 2 * n);
  const int64_t kv_shard = s.batch * s.heads_kv * largest_shard(k_chunks) * s.head_dim;
  int64_t largest_q_chunk = 0, largest_k_chunk = 0;
  for (const Chunk& c : q_chunks) largest_q_chunk = std::max(largest_q_chunk, c.size());
  for (const Chunk& c : k_chunks) largest_k_chunk = std::max(largest_k_chunk, c.size());
  const int64_t chunk_rows = s.batch * s.heads * largest_q_chunk;
  for (int r = 0; r < n; ++r) {
    DeviceGuard guard(devices[size_t(r)]);
    RankScratch& rank = scratch[size_t(r)];
    if (rank.kv[0][0].data() == nullptr) {
      for (auto& buffer : rank.kv) {
        for (auto& tensor : buffer) tensor = DeviceBuffer(element_bytes(kv_shard, dtype));
      }
    }
    if (!backward && rank.block_out.data() == nullptr) {
      rank.block_out = DeviceBuffer(element_bytes(chunk_rows * s.head_dim, dtype));
      for (int c = 0; c < 2; ++c) {
        rank.slots_out[c] =
            DeviceBuffer(size_t(detail::ChunkMerge::out_floats(s, largest_q_chunk)) * 4);
        rank.slots_lse[c] =
            DeviceBuffer(size_t(detail::ChunkMerge::lse_floats(s, largest_q_chunk)) * 4);
      }
    }
    if (backward && rank.dq_sum.data() == nullptr) {
      for (auto& buffer : rank.grad_sums) {
        for (auto& tensor : buffer) tensor = DeviceBuffer(size_t(kv_shard) * 4);
      }
      if (n > 1) {  // with one rank nothing arrives
        for (auto& buffer : rank.grad_arrived) {
          for (auto& tensor : buffer) tensor = DeviceBuffer(size_t(kv_shard) * 4);
        }
      }
      const int64_t q_shard = shard_rows(q_chunks, r).size();
      rank.dq_sum = DeviceBuffer(size_t(s.batch * s.heads * q_shard * s.head_dim) * 4);
      for (auto& lse : rank.chunk_lse) lse = DeviceBuffer(size_t(chunk_rows) * 4);
      AttentionShape block = s;
      block.seq_q = std::max<int64_t>(largest_q_chunk, 1);
      block.seq_k = std::max<int64_t>(largest_k_chunk, 1);
      // Sized for the deterministic backward, which takes the most: either mode fits.
      rank.block_workspace = DeviceBuffer(backward_workspace_size(block, dtype, true));
    }
  }
}

Ring::Ring(const std::vector<int>& devices) : impl_(std::make_unique<Impl>()) {
  if (devices.empty() || int(devices.size()) > kMaxRanks) {
    refuse(Error::Kind::invalid_argument,
           "takes 1 to " + std::to_string(kMaxRanks) + " devices, got " +
               std::to_string(devices.size()));
  }
  int count = 0;
  check_cuda(cudaGetDeviceCount(&count), "context parallelism: counting the GPUs");
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] < 0 || devices[i] >= count) {
      refuse(Error::Kind::no_device, "device " + std::to_string(devices[i]) + " does not exist (" +
                                         std::to_string(count) + " GPUs)");
    }
    if (std::count(devices.begin(), devices.end(), devices[i]) > 1) {
      refuse(Error::Kind::invalid_argument,
             "device " + std::to_string(devices[i]) + " is given twice: one rank per GPU");
    }
  }
  // Filled step by step: a failure half-way leaves Impl's destructor what exists to release.
  Impl& ring = *impl_;
  ring.devices = devices;
  const int n = ring.ranks();
  std::vector<ncclComm_t> comms(static_cast<size_t>(n), nullptr);
  check_nccl(ncclCommInitAll(comms.data(), n, ring.devices.data()),
             "creating the NCCL communicators");
  ring.comms = comms;
  ring.compute.assign(size_t(n), nullptr);
  ring.transfer.assign(size_t(n), nullptr);
  ring.computed.assign(size_t(n), std::vector<cudaEvent_t>(size_t(n) + 1, nullptr));
  for (auto* events : {&ring.kv_arrived, &ring.summed, &ring.sums_arrived}) {
    events->assign(size_t(n), std::vector<cudaEvent_t>(size_t(n) + 1, nullptr));
  }
  for (auto* events : {&ring.group_events, &ring.wait_events, &ring.awaited}) {
    events->assign(size_t(n), {});
  }
  ring.waits.assign(size_t(n), 0);
  for (int r = 0; r < n; ++r) {
    DeviceGuard guard(ring.devices[size_t(r)]);
    check_cuda(cudaStreamCreateWithFlags(&ring.compute[size_t(r)], cudaStreamNonBlocking),
               "context parallelism: creating a stream");
    check_cuda(cudaStreamCreateWithFlags(&ring.transfer[size_t(r)], cudaStreamNonBlocking),
               "context parallelism: creating a stream");
    // With timing: last_communication() measures the waits between them.
    for (auto* events : {&ring.computed[size_t(r)], &ring.kv_arrived[size_t(r)],
                         &ring.summed[size_t(r)], &ring.sums_arrived[size_t(r)]}) {
      for (cudaEvent_t& e : *events) {
        check_cuda(cudaEventCreate(&e), "context parallelism: creating an event");
      }
    }
  }
}

Ring::~Ring() = default;  // Impl's destructor drains the streams and releases everything

int Ring::ranks() const { return impl_->ranks(); }
int Ring::device(int rank) const { return impl_->devices.at(size_t(rank)); }
cudaStream_t Ring::stream(int rank) const { return impl_->compute.at(size_t(rank)); }

CommunicationTimes Ring::last_communication() const {
  const Impl& ring = *impl_;
  const auto elapsed_ms = [](cudaEvent_t from, cudaEvent_t to) {
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, from, to), "context parallelism: reading an event");
    return double(ms);
  };
  CommunicationTimes times;
  for (int r = 0; r < ring.ranks(); ++r) {
    DeviceGuard guard(ring.devices[size_t(r)]);
    check_cuda(cudaStreamSynchronize(ring.transfer[size_t(r)]), "context parallelism: a stream");
    check_cuda(cudaStreamSynchronize(ring.compute[size_t(r)]), "context parallelism: a stream");
    const std::vector<cudaEvent_t>& groups = ring.group_events[size_t(r)];
    for (int g = 0; g < ring.groups; ++g) {
      times.transfer_ms += elapsed_ms(groups[size_t(2 * g)], groups[size_t(2 * g + 1)]);
    }
    // A transfer that ends after the compute stream reached its wait is waited for from there.
    for (int w = 0; w < ring.waits[size_t(r)]; ++w) {
      times.exposed_ms += std::max(0.0, elapsed_ms(ring.wait_events[size_t(r)][size_t(w)],
                                                   ring.awaited[size_t(r)][size_t(w)]));
    }
  }
  times.transfer_ms /= ring.ranks();
  times.exposed_ms /= ring.ranks();
  return times;
}

namespace {

// What every step of either direction shares: the plan, each rank's shards and where the K/V
// shard a rank holds at a step lives.
struct RingLayout {
  Plan plan;
  Layout layout = Layout::bhsd;  // of every shard
  std::vector<ShardRows> q_shards, k_shards;

  // The K or V shard of `owner` in ring buffer `data`, as a tensor of its rows.
  TensorRef held(void* data, const AttentionShape& s, int owner) const {
    return shard_tensor(data, layout, s.batch, s.heads_kv, k_shards[size_t(owner)].size(),
                        s.head_dim);
  }
};

RingLayout ring_layout(const AttentionShape& s, Mask mask, Window window, int ranks,
                       Layout layout) {
  if (layout != Layout::bhsd && layout != Layout::bshd) {
    refuse(Error::Kind::invalid_argument, "the shards' layout must be bhsd or bshd");
  }
  RingLayout l;
  l.layout = layout;
  try {
    l.plan = make_plan(s.seq_q, s.seq_k, mask, window, ranks);
  } catch (const std::invalid_argument& e) {
    refuse(Error::Kind::invalid_argument, e.what());
  }
  for (int r = 0; r < ranks; ++r) {
    l.q_shards.push_back(shard_rows(l.plan.query_chunks, r));
    l.k_shards.push_back(shard_rows(l.plan.key_chunks, r));
  }
  return l;
}

// The tensors of a rank that have query rows, and those with key rows.
std::vector<std::pair<const char*, const TensorRef*>> query_tensors(const RankForward& t) {
  return {{"q", &t.q}, {"out", &t.out}};
}
std::vector<std::pair<const char*, const TensorRef*>> key_tensors(const RankForward& t) {
  return {{"k", &t.k}, {"v", &t.v}};
}
std::vector<std::pair<const char*, const TensorRef*>> query_tensors(const RankBackward& t) {
  return {{"q", &t.q}, {"out", &t.out}, {"dout", &t.dout}, {"dq", &t.dq}};
}
std::vector<std::pair<const char*, const TensorRef*>> key_tensors(const RankBackward& t) {
  return {{"k", &t.k}, {"v", &t.v}, {"dk", &t.dk}, {"dv", &t.dv}};
}

// Refuses rank tensors that are null or not dense shards of their rows. Tensors: RankForward
// or RankBackward; `alibi`: whether the problem has ALiBi slopes (each rank then gives its own).
template <typename Tensors>
void check_rank_tensors(const RingLayout& l, const AttentionShape& s,
                        const std::vector<Tensors>& tensors, bool alibi) {
  for (int r = 0; r < int(tensors.size()); ++r) {
    const Tensors& t = tensors[size_t(r)];
    const int64_t q_rows = l.q_shards[size_t(r)].size();
    const int64_t k_rows = l.k_shards[size_t(r)].size();
    for (const auto& [name, tensor] : query_tensors(t)) {
      require_shard(name, r, *tensor, l.layout, s.batch, s.heads, q_rows, s.head_dim);
    }
    for (const auto& [name, tensor] : key_tensors(t)) {
      require_shard(name, r, *tensor, l.layout, s.batch, s.heads_kv, k_rows, s.head_dim);
    }
    if (t.lse == nullptr) {
      refuse(Error::Kind::invalid_argument, "lse of rank " + std::to_string(r) + " is null");
    }
    if (alibi && t.alibi_slopes == nullptr) {
      refuse(Error::Kind::invalid_argument,
             "the problem has ALiBi slopes but rank " + std::to_string(r) + " gives none");
    }
    if (alibi && reinterpret_cast<uintptr_t>(t.alibi_slopes) % alignof(float) != 0) {
      refuse(Error::Kind::invalid_argument,
             "alibi_slopes of rank " + std::to_string(r) + " must be 4-byte aligned");
    }
  }
}



// The element count of owner's K (or V) shard.
int64_t shard_elements(const RingLayout& l, const AttentionShape& s, int owner) {
  return s.batch * s.heads_kv * l.k_shards[size_t(owner)].size() * s.head_dim;
}

void check_problem(const std::string& direction, const AttentionShape& s, int ranks,
                   const VarlenBatch& varlen, const std::optional<int64_t>& diagonal_offset,
                   size_t tensors) {
  if (int(tensors) != ranks) {
    refuse(Error::Kind::invalid_argument, direction + ": " + std::to_string(tensors) +
                                              " ranks' tensors for " + std::to_string(ranks) +
                                              " ranks");
  }
  if (varlen.any_given()) {
    refuse(Error::Kind::unsupported, direction + ": a varlen batch (dense only)");
  }
  if (diagonal_offset) {
    refuse(Error::Kind::invalid_argument,
           direction + ": diagonal_offset is set: the blocks' diagonals come from the plan");
  }
  if (s.batch < 1 || s.heads < 1 || s.heads_kv < 1 || s.seq_q < 1 || s.seq_k < 1) {
    refuse(Error::Kind::invalid_argument, direction + ": every size of the shape must be >= 1");
  }
}

// Moves a pair of buffers one rank along the ring, every rank at once, on the transfer
// streams (one NCCL group): rank r sends `buffers(rs).sent` (what it holds at step `step`, sized
// for the shard it holds) to the next rank and receives `buffers(rs).received` (sized for the
// shard it holds next) from the previous one. `what` names the buffers in errors.
struct BufferPair {
  DeviceBuffer* sent;      // [2]: K and V, or dK and dV
  DeviceBuffer* received;  // [2]
};

template <typename Buffers>
void rotate(Ring::Impl& ring, const RingLayout& l, const AttentionShape& s, int step,
            ncclDataType_t type, const char* what, Buffers&& buffers) {
  const int n = ring.ranks();
  const std::string send_error = std::string("ncclSend of ") + what;
  const std::string receive_error = std::string("ncclRecv of ") + what;
  ring.mark_group(false);
  NcclGroup group;
  for (int r = 0; r < n; ++r) {
    const BufferPair pair = buffers(ring.scratch[size_t(r)]);
    const size_t held = size_t(shard_elements(l, s, (r - step % n + n) % n));
    const size_t next = size_t(shard_elements(l, s, (r - (step + 1) % n + n) % n));
    for (int i = 0; i < 2; ++i) {
      check_nccl(ncclSend(pair.sent[i].data(), held, type, ring.next(r), ring.comms[size_t(r)],
                          ring.transfer[size_t(r)]),
                 send_error.c_str());
      check_nccl(ncclRecv(pair.received[i].data(), next, type, ring.previous(r),
                          ring.comms[size_t(r)], ring.transfer[size_t(r)]),
                 receive_error.c_str());
    }
  }
  group.end();
  ring.mark_group(true);
}

// Starts the transfer of step `step` on every rank: each sends the shard it holds (buffer
// step % 2) to the next rank and receives the next one into the other buffer, once its own
// blocks of the previous step no longer read that buffer; kv_arrived[step] follows it.
void pass_kv(Ring::Impl& ring, const RingLayout& l, const AttentionShape& s, DType dtype,
             int step) {
  const int n = ring.ranks();
  for (int r = 0; r < n; ++r) {
    if (step > 0) {
      ring.wait(r, ring.transfer[size_t(r)], ring.computed[size_t(r)][size_t(step - 1)]);
    }
  }
  rotate(ring, l, s, step, nccl_type(dtype), "a K/V shard", [&](RankScratch& rs) {
    return BufferPair{rs.kv[step % 2], rs.kv[(step + 1) % 2]};
  });
  for (int r = 0; r < n; ++r) {
    ring.record(r, ring.kv_arrived[size_t(r)][size_t(step)], ring.transfer[size_t(r)]);
  }
}

// Copies each rank's own K and V shard into its ring buffer 0 (the shard held at step 0), after
// the work already on its compute stream.
template <typename RankTensors>
void load_own_shards(Ring::Impl& ring, const RingLayout& l, const AttentionShape& s, DType dtype,
                     const std::vector<RankTensors>& tensors) {
  for (int r = 0; r < ring.ranks(); ++r) {
    DeviceGuard guard(ring.devices[size_t(r)]);
    const RankTensors& t = tensors[size_t(r)];
    const size_t bytes = element_bytes(shard_elements(l, s, r), dtype);
    RankScratch& rs = ring.scratch[size_t(r)];
    check_cuda(cudaMemcpyAsync(rs.kv[0][0].data(), t.k.data, bytes, cudaMemcpyDeviceToDevice,
                               ring.compute[size_t(r)]),
               "context parallelism: copying K into the ring");
    check_cuda(cudaMemcpyAsync(rs.kv[0][1].data(), t.v.data, bytes, cudaMemcpyDeviceToDevice,
                               ring.compute[size_t(r)]),
               "context parallelism: copying V into the ring");
    ring.record(r, ring.computed[size_t(r)][size_t(ring.ranks())], ring.compute[size_t(r)]);
    ring.wait(r, ring.transfer[size_t(r)], ring.computed[size_t(r)][size_t(ring.ranks())]);
  }
}

// Rows [first_row, ...) of every (batch, head) of a dense fp32 [batch, heads, seq, head_dim]
// sum, as the tensor a block's backward() adds to (BackwardArgs::sums).
TensorRef sum_rows(float* sums, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim,
                   int64_t first_row) {
  TensorRef rows = shard_tensor(sums, Layout::bhsd, batch, heads, seq, head_dim);
  rows.data = sums + first_row * head_dim;
  return rows;
}

// The arguments of one block of rank r: its query chunk's rows of the rank's shards, the held
// K/V shard's rows of the key chunk, the block's global diagonal. Args: ForwardArgs or
// BackwardArgs with the whole problem's options.
template <typename Args>
Args block_args(const Args& problem, const RingLayout& l, int r, int owner, const Block& block,
                const TensorRef& q, const TensorRef& k, const TensorRef& v) {
  const Chunk& queries = l.plan.query_chunks[size_t(block.query_chunk)];
  const Chunk& keys = l.plan.key_chunks[size_t(block.key_chunk)];
  Args args = problem;
  args.shape.seq_q = queries.size();
  args.shape.seq_k = keys.size();
  args.q = tensor_rows(q, l.q_shards[size_t(r)].local_begin(block.query_chunk), problem.dtype);
  const int64_t key_row = l.k_shards[size_t(owner)].local_begin(block.key_chunk);
  args.k = tensor_rows(k, key_row, problem.dtype);
  args.v = tensor_rows(v, key_row, problem.dtype);
  args.diagonal_offset = l.plan.band.offset + queries.begin - keys.begin;
  return args;
}

// Passes the dK/dV sums of the shard each rank held at step `step` (complete up to it: summed)
// to the next rank, and receives the sums of the shard it holds next (grad_arrived); after the
// last step that shard is the rank's own, and its sums are whole. sums_arrived[step] follows.
void pass_sums(Ring::Impl& ring, const RingLayout& l, const AttentionShape& s, int step) {
  const int n = ring.ranks();
  for (int r = 0; r < n; ++r) {
    ring.wait(r, ring.transfer[size_t(r)], ring.summed[size_t(r)][size_t(step)]);
  }
  rotate(ring, l, s, step, ncclFloat32, "dK/dV sums", [&](RankScratch& rs) {
    return BufferPair{rs.grad_sums[step % 2], rs.grad_arrived[(step + 1) % 2]};
  });
  for (int r = 0; r < n; ++r) {
    ring.record(r, ring.sums_arrived[size_t(r)][size_t(step)], ring.transfer[size_t(r)]);
  }
}

}  // namespace

void Ring::forward(const ForwardArgs& problem, Layout layout,
                   const std::vector<RankForward>& tensors) {
  Impl& ring = *impl_;
  const AttentionShape& s = problem.shape;
  const int n = ring.ranks();
  check_problem("forward", s, n, problem.varlen, problem.diagonal_offset, tensors.size());
  check_problem_args(problem, std::string(kContext) + ": forward");  // before any transfer
  if (problem.paged.any_given() || problem.cache_seqlens != nullptr || problem.splits > 1 ||
      problem.splits < 0) {
    refuse(Error::Kind::unsupported, "forward: paged K/V, cache_seqlens and key splits other "
                                     "than 0 or 1 are not supported (dense K/V, unsplit blocks)");
  }
  const RingLayout l = ring_layout(s, problem.mask, problem.window, n, layout);
  check_rank_tensors(l, s, tensors, problem.alibi.data != nullptr);
  ring.make_scratch(s, problem.dtype, false);
  ring.start_call();
  load_own_shards(ring, l, s, problem.dtype, tensors);

  // Per rank, the running merge of each of its two query chunks.
  std::vector<std::vector<detail::ChunkMerge>> merges(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    RankScratch& rs = ring.scratch[size_t(r)];
    for (int which = 0; which < 2; ++which) {
      const int64_t rows = l.q_shards[size_t(r)].chunks[size_t(which)].size();
      merges[size_t(r)].emplace_back(rs.slots_out[which].as<float>(),
                                     rs.slots_lse[which].as<float>(), s, rows);
    }
  }
  for (int step = 0; step < n; ++step) {
    if (step + 1 < n) pass_kv(ring, l, s, problem.dtype, step);
    for (int r = 0; r < n; ++r) {
      DeviceGuard guard(ring.devices[size_t(r)]);
      cudaStream_t stream = ring.compute[size_t(r)];
      if (step > 0) ring.wait_for_transfer(r, ring.kv_arrived[size_t(r)][size_t(step - 1)]);
      RankScratch& rs = ring.scratch[size_t(r)];
      const RingStep& plan_step = l.plan.rank_plans[size_t(r)].steps[size_t(step)];
      const int owner = plan_step.kv_owner;
      const TensorRef k = l.held(rs.kv[step % 2][0].data(), s, owner);
      const TensorRef v = l.held(rs.kv[step % 2][1].data(), s, owner);
      for (const Block& block : plan_step.blocks) {  // none where the held shard is empty
        const int which = block.query_chunk == l.q_shards[size_t(r)].chunk_ids[0] ? 0 : 1;
        detail::ChunkMerge& merge = merges[size_t(r)][size_t(which)];
        ForwardArgs args = block_args(problem, l, r, owner, block, tensors[size_t(r)].q, k, v);
        const AttentionShape& b = args.shape;
        if (problem.alibi.data != nullptr) args.alibi.data = tensors[size_t(r)].alibi_slopes;
        args.out = make_tensor_ref(rs.block_out.data(), Layout::bhsd, b.batch, b.heads, b.seq_q,
                                   b.head_dim);
        args.lse = merge.next_lse();
        args.splits = 1;  // the block is one chunk of keys already: no workspace of its own
        args.workspace = nullptr;
        args.workspace_bytes = 0;
        cuflash::forward(args, stream);
        detail::widen_to_fp32(rs.block_out.data(), problem.dtype, merge.next_out(),
                              b.q_elements(), stream);
        merge.add(stream);
      }
      ring.record(r, ring.computed[size_t(r)][size_t(step)], stream);
    }
  }
  // Each query chunk's result into its rows of O and LSE.
  for (int r = 0; r < n; ++r) {
    DeviceGuard guard(ring.devices[size_t(r)]);
    cudaStream_t stream = ring.compute[size_t(r)];
    const RankForward& t = tensors[size_t(r)];
    const ShardRows& shard = l.q_shards[size_t(r)];
    for (int which = 0; which < 2; ++which) {
      const int64_t rows = shard.chunks[size_t(which)].size();
      if (rows == 0) continue;
      const int64_t local = shard.local_begin(shard.chunk_ids[size_t(which)]);
      const float* lse = merges[size_t(r)][size_t(which)].finish(
          tensor_rows(t.out, local, problem.dtype), problem.dtype, stream);
      detail::copy_lse_rows(t.lse + local, shard.size(), lse, rows, rows, s.batch * s.heads,
                            stream);
    }
  }
  // Every transfer was waited for by the step after it: the compute streams hold all the work.
}

void Ring::backward(const BackwardArgs& problem, Layout layout,
                    const std::vector<RankBackward>& tensors) {
  Impl& ring = *impl_;
  const AttentionShape& s = problem.shape;
  const int n = ring.ranks();
  check_problem("backward", s, n, problem.varlen, problem.diagonal_offset, tensors.size());
  check_problem_args(problem, std::string(kContext) + ": backward");  // before any transfer
  if (problem.sums.any_given()) {  // a partial set is not "off" either
    refuse(Error::Kind::unsupported,
           "backward: sums (fp32 gradient sums) are not supported: the "
           "ranks' gradients are summed in the ring's scratch");
  }
  const RingLayout l = ring_layout(s, problem.mask, problem.window, n, layout);
  check_rank_tensors(l, s, tensors, problem.alibi.data != nullptr);
  ring.make_scratch(s, problem.dtype, true);
  ring.start_call();
  load_own_shards(ring, l, s, problem.dtype, tensors);
  const int64_t q_planes = s.batch * s.heads;

  for (int r = 0; r < n; ++r) {  // the dQ sum starts at zero; LSE rows packed per chunk
    DeviceGuard guard(ring.devices[size_t(r)]);
    cudaStream_t stream = ring.compute[size_t(r)];
    RankScratch& rs = ring.scratch[size_t(r)];
    check_cuda(cudaMemsetAsync(rs.dq_sum.data(), 0, rs.dq_sum.bytes(), stream), "zeroing dQ sums");
    const ShardRows& shard = l.q_shards[size_t(r)];
    for (int which = 0; which < 2; ++which) {
      const int64_t rows = shard.chunks[size_t(which)].size();
      if (rows == 0) continue;
      detail::copy_lse_rows(rs.chunk_lse[which].as<float>(), rows,
                    tensors[size_t(r)].lse + shard.local_begin(shard.chunk_ids[size_t(which)]),
                    shard.size(), rows, q_planes, stream);
    }
  }

  // At each step a rank adds its blocks' dK/dV terms to zeroed sums of the held shard
  // (grad_sums[step % 2]) while the sums of the shard's earlier holders arrive
  // (grad_arrived[step % 2], passed on at the end of the step before); after the blocks it adds
  // those in and passes the shard's sums on. The transfer overlaps the next step's blocks, which
  // add to the other buffer; after the last step each shard's sums reach their owner.
  for (int step = 0; step < n; ++step) {
    if (step + 1 < n) pass_kv(ring, l, s, problem.dtype, step);
    for (int r = 0; r < n; ++r) {
      DeviceGuard guard(ring.devices[size_t(r)]);
      cudaStream_t stream = ring.compute[size_t(r)];
      if (step > 0) ring.wait_for_transfer(r, ring.kv_arrived[size_t(r)][size_t(step - 1)]);
      RankScratch& rs = ring.scratch[size_t(r)];
      const RankBackward& t = tensors[size_t(r)];
      // Sent at the end of step - 2, which the adding of step - 1 waited for.
      for (auto& sum : rs.grad_sums[step % 2]) {
        check_cuda(cudaMemsetAsync(sum.data(), 0, sum.bytes(), stream), "zeroing dK/dV sums");
      }
      const RingStep& plan_step = l.plan.rank_plans[size_t(r)].steps[size_t(step)];
      const int owner = plan_step.kv_owner;
      const int64_t owner_rows = l.k_shards[size_t(owner)].size();
      const TensorRef k = l.held(rs.kv[step % 2][0].data(), s, owner);
      const TensorRef v = l.held(rs.kv[step % 2][1].data(), s, owner);
      const ShardRows& shard = l.q_shards[size_t(r)];
      for (const Block& block : plan_step.blocks) {
        const int which = block.query_chunk == shard.chunk_ids[0] ? 0 : 1;
        const int64_t q_local = shard.local_begin(block.query_chunk);
        BackwardArgs args = block_args(problem, l, r, owner, block, t.q, k, v);
        const AttentionShape& b = args.shape;
        if (problem.alibi.data != nullptr) args.alibi.data = t.alibi_slopes;
        args.out = tensor_rows(t.out, q_local, problem.dtype);
        args.dout = tensor_rows(t.dout, q_local, problem.dtype);
        args.lse = rs.chunk_lse[which].as<float>();
        // The block's terms go straight into the fp32 sums (rounded once, at the end): dQ into
        // its query chunk's rows of the rank's, dK and dV into its key chunk's rows of the
        // held shard's, which travel with it.
        const int64_t key_local = l.k_shards[size_t(owner)].local_begin(block.key_chunk);
        args.dq = args.dk = args.dv = TensorRef{};
        args.sums.dq = sum_rows(rs.dq_sum.as<float>(), b.batch, b.heads, shard.size(), b.head_dim,
                                q_local);
        args.sums.dk = sum_rows(rs.grad_sums[step % 2][0].as<float>(), b.batch, b.heads_kv,
                                owner_rows, b.head_dim, key_local);
        args.sums.dv = sum_rows(rs.grad_sums[step % 2][1].as<float>(), b.batch, b.heads_kv,
                                owner_rows, b.head_dim, key_local);
        args.workspace = rs.block_workspace.data();
        args.workspace_bytes = rs.block_workspace.bytes();
        cuflash::backward(args, stream);
      }
      ring.record(r, ring.computed[size_t(r)][size_t(step)], stream);
      if (step > 0) {  // the earlier holders' sums of this shard
        ring.wait_for_transfer(r, ring.sums_arrived[size_t(r)][size_t(step - 1)]);
        for (int g = 0; g < 2; ++g) {
          detail::add_fp32(rs.grad_sums[step % 2][g].as<float>(),
                           rs.grad_arrived[step % 2][g].as<float>(),
                           shard_elements(l, s, owner), stream);
        }
      }
      ring.record(r, ring.summed[size_t(r)][size_t(step)], stream);
    }
    if (n > 1) pass_sums(ring, l, s, step);
  }
  // Each rank's own sums (arrived after the last step; with one rank, its own step's) into its
  // gradients.
  for (int r = 0; r < n; ++r) {
    DeviceGuard guard(ring.devices[size_t(r)]);
    cudaStream_t stream = ring.compute[size_t(r)];
    if (n > 1) ring.wait_for_transfer(r, ring.sums_arrived[size_t(r)][size_t(n - 1)]);
    RankScratch& rs = ring.scratch[size_t(r)];
    const RankBackward& t = tensors[size_t(r)];
    auto& own = n > 1 ? rs.grad_arrived[n % 2] : rs.grad_sums[0];
    const int64_t k_rows = l.k_shards[size_t(r)].size();
    detail::store_sums(rs.dq_sum.as<float>(), t.dq, problem.dtype, s.batch, s.heads,
                       l.q_shards[size_t(r)].size(), s.head_dim, stream);
    detail::store_sums(own[0].as<float>(), t.dk, problem.dtype, s.batch, s.heads_kv, k_rows,
                       s.head_dim, stream);
    detail::store_sums(own[1].as<float>(), t.dv, problem.dtype, s.batch, s.heads_kv, k_rows,
                       s.head_dim, stream);
  }
}

}  // namespace cuflash::context_parallel

// --- The host runner's passes over a Ring -----------------------------------------------------

namespace cuflash::context_parallel {
namespace {

// A tensor seen as [outer, seq, inner] elements: [B * H, S, D] in bhsd, [B, S, H * D] in bshd.
struct RowPlanes {
  int64_t outer, inner;
};

RowPlanes row_planes(Layout layout, int64_t batch, int64_t heads, int64_t head_dim) {
  return layout == Layout::bhsd ? RowPlanes{batch * heads, head_dim}
                                : RowPlanes{batch, heads * head_dim};
}

// Rows [from_row, from_row + rows) of every plane of `from` (seq `from_seq`) into rows
// [to_row, ...) of `to` (seq `to_seq`), `element` bytes each, across GPUs where they differ.
void copy_rows(void* to, int64_t to_seq, int64_t to_row, const void* from, int64_t from_seq,
               int64_t from_row, int64_t rows, RowPlanes planes, size_t element,
               cudaStream_t stream) {
  if (rows == 0) return;
  const size_t row_bytes = size_t(planes.inner) * element;
  check_cuda(cudaMemcpy2DAsync(static_cast<unsigned char*>(to) + size_t(to_row) * row_bytes,
                               size_t(to_seq) * row_bytes,
                               static_cast<const unsigned char*>(from) +
                                   size_t(from_row) * row_bytes,
                               size_t(from_seq) * row_bytes, size_t(rows) * row_bytes,
                               size_t(planes.outer), cudaMemcpyDefault, stream),
             "context parallelism: copying rows between GPUs");
}

// Each rank's shards of the whole problem's tensors, on its GPU, kept for the next call.
struct RankShards {
  DeviceBuffer q, k, v, out, lse, dout, dq, dk, dv, alibi;
};

class RingPasses {
 public:
  RingPasses(int gpus, ShardCopies copies) : gpus_(gpus), copies_(copies) {}
  ~RingPasses() {
    synchronize();
    for (auto* events : {&started_, &finished_}) {
      for (const auto& [device, event] : *events) {
        DeviceGuard guard(device, true);
        cudaEventDestroy(event);
      }
    }
    for (int r = 0; r < int(shards_.size()); ++r) {
      DeviceGuard guard(ring_->device(r), true);
      shards_[size_t(r)] = RankShards{};
    }
  }
  RingPasses(const RingPasses&) = delete;
  RingPasses& operator=(const RingPasses&) = delete;

  void forward(const ForwardArgs& whole, cudaStream_t stream) {
    const Shapes sh = prepare(whole.shape, whole.dtype, whole.q, whole.k, whole.mask,
                              whole.window, whole.alibi, false, stream);
    const TensorKey key = tensor_key(sh.layout, {whole.q.data, whole.k.data, whole.v.data,
                                                 whole.out.data, whole.lse});
    const bool copy = must_copy(forward_tensors_, key);
    std::vector<RankForward> tensors(static_cast<size_t>(gpus_));
    for (int r = 0; r < gpus_; ++r) {
      DeviceGuard guard(ring_->device(r));
      RankShards& rs = shards_[size_t(r)];
      cudaStream_t rank_stream = ring_->stream(r);
      if (copy) {
        scatter_query_rows(sh, r, rs.q.data(), whole.q.data, whole.dtype, whole.shape.heads,
                           rank_stream);
        scatter_key_rows(sh, r, rs.k.data(), whole.k.data, whole.dtype, rank_stream);
        scatter_key_rows(sh, r, rs.v.data(), whole.v.data, whole.dtype, rank_stream);
      }
      RankForward& t = tensors[size_t(r)];
      t.q = query_tensor(sh, r, rs.q.data());
      t.k = key_tensor(sh, r, rs.k.data());
      t.v = key_tensor(sh, r, rs.v.data());
      t.out = query_tensor(sh, r, rs.out.data());
      t.lse = rs.lse.as<float>();
      t.alibi_slopes = whole.alibi.data != nullptr ? rs.alibi.as<float>() : nullptr;
    }
    ring_->forward(whole, sh.layout, tensors);
    for (int r = 0; r < gpus_ && copy; ++r) {
      DeviceGuard guard(ring_->device(r));
      RankShards& rs = shards_[size_t(r)];
      gather_query_rows(sh, r, whole.out.data, rs.out.data(), whole.dtype, whole.shape.heads,
                        ring_->stream(r));
      gather_lse(sh, r, whole.lse, rs.lse.as<float>(), ring_->stream(r));
    }
    join(stream);
    copied(forward_tensors_, backward_tensors_, key, copy);
  }

  void backward(const BackwardArgs& whole, cudaStream_t stream) {
    const Shapes sh = prepare(whole.shape, whole.dtype, whole.q, whole.k, whole.mask,
                              whole.window, whole.alibi, true, stream);
    std::vector<RankBackward> tensors(static_cast<size_t>(gpus_));
    const int64_t heads = whole.shape.heads;
    const TensorKey key =
        tensor_key(sh.layout, {whole.q.data, whole.k.data, whole.v.data, whole.out.data,
                               whole.dout.data, whole.lse, whole.dq.data, whole.dk.data,
                               whole.dv.data});
    const bool copy = must_copy(backward_tensors_, key);
    for (int r = 0; r < gpus_; ++r) {
      DeviceGuard guard(ring_->device(r));
      RankShards& rs = shards_[size_t(r)];
      cudaStream_t rank_stream = ring_->stream(r);
      if (copy) {
        scatter_query_rows(sh, r, rs.q.data(), whole.q.data, whole.dtype, heads, rank_stream);
        scatter_query_rows(sh, r, rs.out.data(), whole.out.data, whole.dtype, heads,
                           rank_stream);
        scatter_query_rows(sh, r, rs.dout.data(), whole.dout.data, whole.dtype, heads,
                           rank_stream);
        scatter_key_rows(sh, r, rs.k.data(), whole.k.data, whole.dtype, rank_stream);
        scatter_key_rows(sh, r, rs.v.data(), whole.v.data, whole.dtype, rank_stream);
        scatter_lse(sh, r, rs.lse.as<float>(), whole.lse, rank_stream);
      }
      RankBackward& t = tensors[size_t(r)];
      t.q = query_tensor(sh, r, rs.q.data());
      t.out = query_tensor(sh, r, rs.out.data());
      t.dout = query_tensor(sh, r, rs.dout.data());
      t.dq = query_tensor(sh, r, rs.dq.data());
      t.k = key_tensor(sh, r, rs.k.data());
      t.v = key_tensor(sh, r, rs.v.data());
      t.dk = key_tensor(sh, r, rs.dk.data());
      t.dv = key_tensor(sh, r, rs.dv.data());
      t.lse = rs.lse.as<float>();
      t.alibi_slopes = whole.alibi.data != nullptr ? rs.alibi.as<float>() : nullptr;
    }
    ring_->backward(whole, sh.layout, tensors);
    for (int r = 0; r < gpus_ && copy; ++r) {
      DeviceGuard guard(ring_->device(r));
      RankShards& rs = shards_[size_t(r)];
      cudaStream_t rank_stream = ring_->stream(r);
      gather_query_rows(sh, r, whole.dq.data, rs.dq.data(), whole.dtype, heads, rank_stream);
      gather_key_rows(sh, r, whole.dk.data, rs.dk.data(), whole.dtype, rank_stream);
      gather_key_rows(sh, r, whole.dv.data, rs.dv.data(), whole.dtype, rank_stream);
    }
    join(stream);
    copied(backward_tensors_, forward_tensors_, key, copy);
  }

  CommunicationTimes last_communication() const {
    return ring_ ? ring_->last_communication() : CommunicationTimes{};
  }

 private:
  // Which whole tensors, in which layout, the shards were last copied from for a direction.
  using TensorKey = std::vector<uintptr_t>;
  static TensorKey tensor_key(Layout layout, std::initializer_list<const void*> tensors) {
    TensorKey key{uintptr_t(layout)};
    for (const void* t : tensors) key.push_back(reinterpret_cast<uintptr_t>(t));
    return key;
  }

  // Whether this call copies between the whole tensors and the shards (ShardCopies): always,
  // or when the shards do not hold `key`'s tensors for this direction (`held`).
  bool must_copy(TensorKey& held, const TensorKey& key) const {
    if (copies_ == ShardCopies::every_call || key != held) {
      held.clear();  // until the call has finished: one that throws leaves nothing held
      return true;
    }
    return false;
  }
  // After a call that finished: one that copied makes its tensors the held ones, and the other
  // direction's no longer held (both directions share the shards of Q, K, V, O and LSE).
  static void copied(TensorKey& held, TensorKey& other, const TensorKey& key, bool copy) {
    if (!copy) return;
    held = key;
    other.clear();
  }

  struct Shapes {
    AttentionShape shape;
    Layout layout;
    std::vector<Chunk> q_chunks, k_chunks;
    std::vector<ShardRows> q_shards, k_shards;
  };

  // The Ring, the plan's shards and their buffers (made again when the shape changes), and
  // every rank's stream waiting for the work already on the caller's `stream`.
  Shapes prepare(const AttentionShape& s, DType dtype, const TensorRef& whole_q,
                 const TensorRef& whole_k, Mask mask, Window window, const AlibiSlopes& alibi,
                 bool backward, cudaStream_t stream) {
    if (!ring_) {
      std::vector<int> devices(static_cast<size_t>(gpus_));
      for (int r = 0; r < gpus_; ++r) devices[size_t(r)] = r;
      ring_ = std::make_unique<Ring>(devices);
    }
    Shapes sh;
    sh.shape = s;
    sh.layout = whole_layout(whole_q, whole_k, s);
    try {
      const Plan plan = make_plan(s.seq_q, s.seq_k, mask, window, gpus_);
      sh.q_chunks = plan.query_chunks;
      sh.k_chunks = plan.key_chunks;
    } catch (const std::invalid_argument& e) {
      refuse(Error::Kind::invalid_argument, e.what());
    }
    for (int r = 0; r < gpus_; ++r) {
      sh.q_shards.push_back(shard_rows(sh.q_chunks, r));
      sh.k_shards.push_back(shard_rows(sh.k_chunks, r));
    }
    const int64_t slopes = alibi.data == nullptr ? 0
                           : alibi.batch_stride == 0 ? s.heads
                                                     : s.batch * s.heads;
    const auto key = std::make_tuple(s.batch, s.heads, s.heads_kv, s.seq_q, s.seq_k, s.head_dim,
                                     int(dtype), slopes);
    if (shards_.empty() || key != shards_key_) {
      synchronize();  // earlier calls may still use the buffers about to go
      for (int r = 0; r < int(shards_.size()); ++r) {
        DeviceGuard guard(ring_->device(r));
        shards_[size_t(r)] = RankShards{};
      }
      shards_.clear();
      shards_.resize(size_t(gpus_));
      shards_key_ = key;
      forward_tensors_.clear();  // new shards hold nothing yet
      backward_tensors_.clear();
    }
    for (int r = 0; r < gpus_; ++r) {  // what this direction needs, at its first use
      DeviceGuard guard(ring_->device(r));
      const int64_t q_elements = s.batch * s.heads * sh.q_shards[size_t(r)].size() * s.head_dim;
      const int64_t k_elements = s.batch * s.heads_kv * sh.k_shards[size_t(r)].size() * s.head_dim;
      RankShards& rs = shards_[size_t(r)];
      if (rs.q.data() == nullptr) {
        rs.q = DeviceBuffer(element_bytes(q_elements, dtype));
        rs.k = DeviceBuffer(element_bytes(k_elements, dtype));
        rs.v = DeviceBuffer(element_bytes(k_elements, dtype));
        rs.out = DeviceBuffer(element_bytes(q_elements, dtype));
        rs.lse = DeviceBuffer(size_t(s.batch * s.heads * sh.q_shards[size_t(r)].size()) * 4);
        if (slopes > 0) rs.alibi = DeviceBuffer(size_t(slopes) * 4);
      }
      if (backward && rs.dout.data() == nullptr) {
        rs.dout = DeviceBuffer(element_bytes(q_elements, dtype));
        rs.dq = DeviceBuffer(element_bytes(q_elements, dtype));
        rs.dk = DeviceBuffer(element_bytes(k_elements, dtype));
        rs.dv = DeviceBuffer(element_bytes(k_elements, dtype));
      }
    }
    // Every rank starts after the caller's work (its inputs) on `stream`.
    int caller = 0;
    check_cuda(cudaGetDevice(&caller), "context parallelism: cudaGetDevice");
    check_cuda(cudaEventRecord(started(caller), stream), "context parallelism: an event");
    for (int r = 0; r < gpus_; ++r) {
      DeviceGuard guard(ring_->device(r));
      check_cuda(cudaStreamWaitEvent(ring_->stream(r), started(caller), 0),
                 "context parallelism: a stream waits");
      if (slopes > 0) {
        check_cuda(cudaMemcpyAsync(shards_[size_t(r)].alibi.data(), alibi.data,
                                   size_t(slopes) * 4, cudaMemcpyDefault, ring_->stream(r)),
                   "context parallelism: copying ALiBi slopes");
      }
    }
    return sh;
  }

  void synchronize() const {
    if (!ring_) return;
    for (int r = 0; r < gpus_; ++r) {
      DeviceGuard guard(ring_->device(r), true);
      cudaStreamSynchronize(ring_->stream(r));
    }
  }

  // The layout of the whole problem's tensors: the one in which q and k are both dense. Where
  // both layouts fit both (a sequence of one row, one head), they describe the same memory.
  static Layout whole_layout(const TensorRef& q, const TensorRef& k, const AttentionShape& s) {
    for (const Layout layout : {Layout::bhsd, Layout::bshd}) {
      if (dense_in(q, layout, s.batch, s.heads, s.seq_q, s.head_dim) &&
          dense_in(k, layout, s.batch, s.heads_kv, s.seq_k, s.head_dim)) {
        return layout;
      }
    }
    refuse(Error::Kind::invalid_argument, "q and k are not both dense bhsd or bshd tensors");
  }

  // The caller's stream waits for every rank's last work.
  void join(cudaStream_t stream) {
    for (int r = 0; r < gpus_; ++r) {
      DeviceGuard guard(ring_->device(r));
      check_cuda(cudaEventRecord(finished(r), ring_->stream(r)), "context parallelism: an event");
    }
    for (int r = 0; r < gpus_; ++r) {
      check_cuda(cudaStreamWaitEvent(stream, finished(r), 0),
                 "context parallelism: a stream waits");
    }
  }

  cudaEvent_t started(int device) { return event(started_, device); }
  cudaEvent_t finished(int rank) { return event(finished_, ring_->device(rank)); }
  static cudaEvent_t event(std::map<int, cudaEvent_t>& events, int device) {
    auto it = events.find(device);
    if (it != events.end()) return it->second;
    DeviceGuard guard(device);
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
               "context parallelism: creating an event");
    events[device] = e;
    return e;
  }

  TensorRef query_tensor(const Shapes& sh, int r, void* data) const {
    const AttentionShape& s = sh.shape;
    return shard_tensor(data, sh.layout, s.batch, s.heads, sh.q_shards[size_t(r)].size(),
                        s.head_dim);
  }
  TensorRef key_tensor(const Shapes& sh, int r, void* data) const {
    const AttentionShape& s = sh.shape;
    return shard_tensor(data, sh.layout, s.batch, s.heads_kv, sh.k_shards[size_t(r)].size(),
                        s.head_dim);
  }

  // Moves rank r's chunks between the whole tensor (seq rows) and its shard, both ways.
  static void move_chunks(const ShardRows& shard, int64_t seq, RowPlanes planes, size_t element,
                          void* shard_data, const void* whole_from, void* whole_to,
                          cudaStream_t stream) {
    for (int which = 0; which < 2; ++which) {
      const Chunk& chunk = shard.chunks[size_t(which)];
      const int64_t local = shard.local_begin(shard.chunk_ids[size_t(which)]);
      if (whole_from != nullptr) {
        copy_rows(shard_data, shard.size(), local, whole_from, seq, chunk.begin, chunk.size(),
                  planes, element, stream);
      } else {
        copy_rows(whole_to, seq, chunk.begin, shard_data, shard.size(), local, chunk.size(),
                  planes, element, stream);
      }
    }
  }
  void scatter_query_rows(const Shapes& sh, int r, void* shard, const void* whole, DType dtype,
                          int64_t heads, cudaStream_t stream) const {
    move_chunks(sh.q_shards[size_t(r)], sh.shape.seq_q,
                row_planes(sh.layout, sh.shape.batch, heads, sh.shape.head_dim),
                dtype_size(dtype), shard, whole, nullptr, stream);
  }
  void gather_query_rows(const Shapes& sh, int r, void* whole, void* shard, DType dtype,
                         int64_t heads, cudaStream_t stream) const {
    move_chunks(sh.q_shards[size_t(r)], sh.shape.seq_q,
                row_planes(sh.layout, sh.shape.batch, heads, sh.shape.head_dim),
                dtype_size(dtype), shard, nullptr, whole, stream);
  }
  void scatter_key_rows(const Shapes& sh, int r, void* shard, const void* whole, DType dtype,
                        cudaStream_t stream) const {
    move_chunks(sh.k_shards[size_t(r)], sh.shape.seq_k,
                row_planes(sh.layout, sh.shape.batch, sh.shape.heads_kv, sh.shape.head_dim),
                dtype_size(dtype), shard, whole, nullptr, stream);
  }
  void gather_key_rows(const Shapes& sh, int r, void* whole, void* shard, DType dtype,
                       cudaStream_t stream) const {
    move_chunks(sh.k_shards[size_t(r)], sh.shape.seq_k,
                row_planes(sh.layout, sh.shape.batch, sh.shape.heads_kv, sh.shape.head_dim),
                dtype_size(dtype), shard, nullptr, whole, stream);
  }
  // LSE is [B, H, seq] fp32 in every layout.
  void scatter_lse(const Shapes& sh, int r, float* shard, const float* whole,
                   cudaStream_t stream) const {
    move_chunks(sh.q_shards[size_t(r)], sh.shape.seq_q, {sh.shape.batch * sh.shape.heads, 1}, 4,
                shard, whole, nullptr, stream);
  }
  void gather_lse(const Shapes& sh, int r, float* whole, float* shard, cudaStream_t stream) const {
    move_chunks(sh.q_shards[size_t(r)], sh.shape.seq_q, {sh.shape.batch * sh.shape.heads, 1}, 4,
                shard, nullptr, whole, stream);
  }

  int gpus_;
  ShardCopies copies_;
  TensorKey forward_tensors_, backward_tensors_;
  std::unique_ptr<Ring> ring_;
  std::vector<RankShards> shards_;
  std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int64_t> shards_key_{};
  std::map<int, cudaEvent_t> started_, finished_;
};

}  // namespace

DevicePasses ring_passes(int gpus, ShardCopies copies) {
  if (gpus < 1 || gpus > kMaxRanks) {
    refuse(Error::Kind::invalid_argument,
           "gpus must be from 1 to " + std::to_string(kMaxRanks) + ", got " + std::to_string(gpus));
  }
  auto state = std::make_shared<RingPasses>(gpus, copies);
  DevicePasses passes;
  passes.gpus = gpus;
  passes.forward_workspace_bytes = [](const Problem&) { return size_t(0); };
  passes.backward_workspace_bytes = [](const Problem&) { return size_t(0); };
  passes.forward = [state](const ForwardArgs& args, cudaStream_t stream) {
    state->forward(args, stream);
  };
  passes.backward = [state](const BackwardArgs& args, cudaStream_t stream) {
    state->backward(args, stream);
  };
  passes.last_communication = [state] { return state->last_communication(); };
  return passes;
}

}  // namespace cuflash::context_parallel
