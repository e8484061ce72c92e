// `cuflash info`: version, how this binary was built, and the CUDA devices it can see.
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "cli/exit_codes.h"
#include "commands/commands.h"
#include "cuflash/attention.h"
#include "cuflash/context_parallel/ring.h"
#include "cuflash/version.h"

namespace cuflash::cli {

namespace {

std::string cuda_version_text(int version) {
  if (version <= 0) return "none";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// What the GPU kernels take: "8-256 in steps of 8 (tuned: 32, 64, 96, 128, 192, 256)"; the
// CPU backend takes any head_dim.
std::string head_dims_text() {
  const std::vector<int> supported = cuflash::supported_head_dims();
  std::string tuned;
  for (int d : cuflash::tuned_head_dims()) tuned += (tuned.empty() ? "" : ", ") + std::to_string(d);
  return std::to_string(supported.front()) + "-" + std::to_string(supported.back()) +
         " in steps of " + std::to_string(supported.front()) + " (tuned: " + tuned + ")";
}

Record build_record() {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);  // 0 when no driver is installed
  Record r;
  r.add("item", "build")
      .add("version", CUFLASH_VERSION)
      .add("build_type", CUFLASH_BUILD_TYPE)
      .add("cuda_architectures", CUFLASH_CUDA_ARCHITECTURES)
      .add("nvcc", CUFLASH_CUDA_COMPILER_VERSION)
      .add("cuda_runtime", cuda_version_text(runtime))
      .add("cuda_driver", cuda_version_text(driver))
      .add("devices", int64_t(device_count()))
      .add("head_dims", head_dims_text())
      .add("backward_dq", "arrival order (default); fixed order with --deterministic")
      .add("multi_gpu", context_parallel::ring_available()
                            ? "--gpus through " + context_parallel::nccl_version()
                            : std::string("none (built without NCCL)"));
  return r;
}

// What the runtime says of the path between two GPUs: whether each can address the other's
// memory directly (peer access: NVLink or PCIe peer-to-peer), its relative performance rank
// (0 is the best the system has) and whether atomics cross it natively.
Record link_record(int a, int b) {
  Record r;
  r.add("item", "link " + std::to_string(a) + "-" + std::to_string(b));
  int forward = 0, backward = 0, rank = 0, atomics = 0;
  cudaDeviceCanAccessPeer(&forward, a, b);
  cudaDeviceCanAccessPeer(&backward, b, a);
  r.add("peer_access", forward && backward ? "both ways" : forward || backward ? "one way" : "no");
  if (forward && cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, a, b) ==
                     cudaSuccess) {
    r.add("performance_rank", int64_t(rank));
  }
  if (forward && cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, a, b) ==
                     cudaSuccess) {
    r.add("native_atomics", atomics ? "yes" : "no");
  }
  return r;
}

Record device_record(int index) {
  cudaDeviceProp prop{};
  Record r;
  r.add("item", "device " + std::to_string(index));
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    r.add("name", "unavailable");
    return r;
  }
  r.add("name", prop.name)
      .add("compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor))
      .add("sms", int64_t(prop.multiProcessorCount))
      .add("memory_gib", double(prop.totalGlobalMem) / double(1ull << 30), 4)
      .add("l2_mib", double(prop.l2CacheSize) / double(1 << 20), 4)
      .add("fp16_bf16_kernels", cuflash::tensor_core_kernels(index));
  return r;
}

}  // namespace

void setup_info(CLI::App& app, const GlobalOptions& global, CommandResult& result) {
  CLI::App* cmd = app.add_subcommand(
      "info", "Version, build settings, the visible CUDA devices and the links between them");
  cmd->footer(kInfoExitCodeHelp);
  cmd->callback([&global, &result] {
    // Build facts first, then one record per device; different keys, so print separately.
    print_records({build_record()}, global.output_format());
    for (int i = 0; i < device_count(); ++i) {
      print_records({device_record(i)}, global.output_format());
    }
    for (int a = 0; a < device_count(); ++a) {  // the links between them, each pair once
      for (int b = a + 1; b < device_count(); ++b) {
        print_records({link_record(a, b)}, global.output_format());
      }
    }
    result.exit_code = 0;
  });
}

}  // namespace cuflash::cli
