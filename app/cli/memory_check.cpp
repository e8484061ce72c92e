#include "cli/memory_check.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include <cuda_runtime_api.h>

#include "cli/byte_size.h"
#include "cli/exit_codes.h"
#include "cuflash/attention.h"
#include "cuflash/context_parallel/single_gpu.h"
#include "cuflash/io/convert.h"
#include "cuflash/io/npy.h"
#include "cuflash/reference/attention_ref.h"

namespace cuflash::cli {

namespace {

// The first number of a file such as memory.max ("max" or missing: nullopt).
std::optional<double> read_number(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    return std::stod(text);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<double> mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    double kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return double(pages) * double(page);
  return std::nullopt;
}

// What the process's control group still allows (cgroup v2, else v1); nullopt without a limit.
std::optional<double> cgroup_headroom() {
  for (const auto& [limit, usage] :
       {std::pair{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
        std::pair{"/sys/fs/cgroup/memory/memory.limit_in_bytes",
                  "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
    const std::optional<double> max = read_number(limit), used = read_number(usage);
    // cgroup v1 reports "no limit" as a huge number near 2^63.
    if (max && used && *max < 1e18) return std::max(*max - *used, 0.0);
  }
  return std::nullopt;
}

std::string case_options(const Problem& p) {
  const AttentionShape& s = p.shape;
  std::ostringstream text;
  if (p.varlen()) {
    const auto list = [](const std::vector<int64_t>& lengths) {
      std::string out;
      for (const int64_t length : lengths) out += (out.empty() ? "" : ",") + std::to_string(length);
      return out;
    };
    text << "--layout thd --seqlens " << list(p.seqlens_q);
    if (p.seqlens_k != p.seqlens_q) text << " --seqlens-k " << list(p.seqlens_k);
    text << " --heads " << s.heads << " --heads-kv " << s.heads_kv;
  } else {
    text << "-b " << s.batch << " --heads " << s.heads << " --heads-kv " << s.heads_kv << " -s "
         << s.seq_q << " --seq-k " << s.seq_k;
  }
  text << " -d " << s.head_dim << " --dtype " << to_string(p.dtype);
  if (p.splits != 0) text << " --splits " << p.splits;
  if (p.page_size != 0) text << " --page-size " << p.page_size;
  return text.str();
}

constexpr const char* kShrink =
    "make -b/--batch, --heads, -s/--seq, --seq-k or -d/--head-dim smaller";

}  // namespace

MemoryNeed run_memory_need(const Problem& p, bool backward, Backend backend) {
  const AttentionShape& s = p.shape;
  const double q = double(s.batch) * double(s.heads) * double(s.seq_q) * double(s.head_dim);
  const double kv = double(s.batch) * double(s.heads_kv) * double(s.seq_k) * double(s.head_dim);
  const double rows = double(s.batch) * double(s.heads) * double(s.seq_q);
  const double element = io::element_size(io::element_type(p.dtype));
  // Tensors are held in their stored form (the dtype's bytes), all alive when the files are
  // written: Q, K, V (and dO) in, O, LSE (and dQ, dK, dV) out; LSE also once as it came back.
  const double in_elements = q + 2 * kv + (backward ? q : 0);
  const double out_elements = q + (backward ? q + 2 * kv : 0);
  // The program itself (code, CUDA runtime, allocator) holds some too.
  constexpr double kProcessBytes = 256.0 * (1 << 20);
  const double stored = element * (in_elements + out_elements) + 2 * 4 * rows + kProcessBytes;
  MemoryNeed need;
  if (backend == Backend::cpu) {
    // The reference's float64 copy of each input, its float64 outputs and working memory.
    const double scratch = double(reference::scratch_bytes(p, backward));
    need.host_bytes = stored + 8 * (in_elements + out_elements + rows) + scratch;
  } else {
    need.host_bytes = stored;
    // The workspaces as the passes that compute the case size them (the library's: a varlen
    // batch's for its sequences and their longest lengths, attention.h; context parallelism's
    // on one GPU: its partials and gradient sums).
    const DevicePasses passes = context_parallel::device_passes(p);
    need.device_bytes = element * (q + 2 * kv + q) + 4 * rows +
                        double(passes.forward_workspace_bytes(p));
    if (p.page_size != 0) {
      // The page pools (a quarter more pages than used), made on the device from the
      // contiguous K and V beside them.
      need.device_bytes += 2 * 1.25 * element * kv;
    }
    if (backward) {
      need.device_bytes += element * (q + q + 2 * kv) + double(passes.backward_workspace_bytes(p));
    }
    if (p.gpus > 0) {
      // GPU 0 holds the whole tensors and rank 0's shards and scratch; the others less.
      need.device_bytes +=
          double(context_parallel::ring_rank_device_bytes(s, p.dtype, p.gpus, backward));
    }
  }
  return need;
}

std::optional<double> host_available_bytes() {
  std::optional<double> available = mem_available();
  if (const std::optional<double> headroom = cgroup_headroom()) {
    available = available ? std::min(*available, *headroom) : *headroom;
  }
  return available;
}

double peak_host_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return double(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::optional<double> device_free_bytes() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();  // clear the error for the calls that follow
    return std::nullopt;
  }
  return double(free);
}

void check_run_memory(const Problem& p, bool backward, Backend backend) {
  const MemoryNeed need = run_memory_need(p, backward, backend);
  const std::string what = backend == Backend::cpu ? "on the CPU backend" : "on the GPU";
  if (const std::optional<double> host = host_available_bytes(); host && need.host_bytes > *host) {
    throw RuntimeFailure(case_options(p) + (backward ? " --backward" : "") + " " + what +
                         " needs about " + format_bytes(need.host_bytes) + " of host memory, " +
                         format_bytes(*host) + " available; " + kShrink);
  }
  if (need.device_bytes > 0) {
    if (const std::optional<double> device = device_free_bytes();
        device && need.device_bytes > *device) {
      throw RuntimeFailure(case_options(p) + (backward ? " --backward" : "") + " needs " +
                           format_bytes(need.device_bytes) + " of GPU memory, " +
                           format_bytes(*device) + " free on the device; " + kShrink);
    }
  }
}

}  // namespace cuflash::cli
