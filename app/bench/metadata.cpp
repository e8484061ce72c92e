#include "bench/metadata.h"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <cuda_runtime_api.h>

#include "cuflash/attention.h"
#include "cuflash/version.h"

// Build facts recorded by CMake when it configured the build (app/CMakeLists.txt); a build
// that did not record them says "unknown".
#ifndef CUFLASH_GIT_COMMIT
#define CUFLASH_GIT_COMMIT "unknown"
#endif
#ifndef CUFLASH_GIT_DIRTY
#define CUFLASH_GIT_DIRTY -1  // 0 clean, 1 modified tracked files, -1 unknown
#endif
#ifndef CUFLASH_BUILD_TYPE
#define CUFLASH_BUILD_TYPE "unknown"
#endif
#ifndef CUFLASH_CUDA_COMPILER_VERSION
#define CUFLASH_CUDA_COMPILER_VERSION "unknown"
#endif
#ifndef CUFLASH_CXX_COMPILER
#define CUFLASH_CXX_COMPILER "unknown"
#endif
#ifndef CUFLASH_CXX_FLAGS
#define CUFLASH_CXX_FLAGS "unknown"
#endif
#ifndef CUFLASH_CUDA_FLAGS
#define CUFLASH_CUDA_FLAGS "unknown"
#endif

namespace cuflash::bench {

namespace fs = std::filesystem;

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer;
}

double unix_seconds() {
  using std::chrono::duration;
  return duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::vector<std::string> process_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  std::string arg;
  for (const char c : raw) {
    if (c == '\0') {
      args.push_back(arg);
      arg.clear();
    } else {
      arg += c;
    }
  }
  if (!arg.empty()) args.push_back(arg);
  return args;
}

Json build_metadata() {
  const int dirty = CUFLASH_GIT_DIRTY;
  return Json{{"version", CUFLASH_VERSION},
              {"git_commit", CUFLASH_GIT_COMMIT},
              {"git_dirty", dirty < 0 ? Json() : Json(dirty > 0)},
              {"build_type", CUFLASH_BUILD_TYPE},
              {"cuda_architectures", CUFLASH_CUDA_ARCHITECTURES},
              {"cxx_compiler", CUFLASH_CXX_COMPILER},
              {"cxx_flags", CUFLASH_CXX_FLAGS},
              {"cuda_compiler_version", CUFLASH_CUDA_COMPILER_VERSION},
              {"cuda_flags", CUFLASH_CUDA_FLAGS}};
}

namespace {

std::string cuda_version_text(int version) {
  if (version <= 0) return "none";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", the form nvidia-smi prints.
std::string uuid_text(const cudaUUID_t& uuid) {
  static const int kGroups[] = {4, 2, 2, 2, 6};
  std::string text = "GPU";
  int byte = 0;
  for (const int group : kGroups) {
    text += '-';
    for (int i = 0; i < group; ++i, ++byte) {
      char hex[3];
      std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(uuid.bytes[byte]));
      text += hex;
    }
  }
  return text;
}

int attribute(cudaDeviceAttr attr, int device) {
  int value = 0;
  if (cudaDeviceGetAttribute(&value, attr, device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return value;
}

std::string pci_text(const cudaDeviceProp& p) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%04x:%02x:%02x.0", p.pciDomainID, p.pciBusID,
                p.pciDeviceID);
  return buffer;
}

std::string host_name() {
  char buffer[256] = {};
  if (gethostname(buffer, sizeof buffer - 1) != 0) return "unknown";
  return buffer;
}

}  // namespace

Json cuda_metadata() {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);  // 0 when no driver is installed
  cudaGetLastError();
  return Json{{"driver_version", cuda_version_text(driver)},
              {"runtime_version", cuda_version_text(runtime)}};
}

Json device_metadata(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    return Json{{"index", device}, {"name", "none"}};
  }
  const int sm_khz = attribute(cudaDevAttrClockRate, device);
  const int memory_khz = attribute(cudaDevAttrMemoryClockRate, device);
  return Json{{"index", device},
              {"name", std::string(p.name)},
              {"uuid", uuid_text(p.uuid)},
              {"pci_bus_id", pci_text(p)},
              {"compute_capability", std::to_string(p.major) + "." + std::to_string(p.minor)},
              {"sm_count", p.multiProcessorCount},
              {"memory_bytes", static_cast<int64_t>(p.totalGlobalMem)},
              {"l2_cache_bytes", p.l2CacheSize},
              {"max_sm_clock_mhz", sm_khz < 0 ? Json() : Json(sm_khz / 1000)},
              {"max_memory_clock_mhz", memory_khz < 0 ? Json() : Json(memory_khz / 1000)},
              {"memory_bus_width_bits", attribute(cudaDevAttrGlobalMemoryBusWidth, device)},
              {"ecc_enabled", p.ECCEnabled != 0},
              {"fp16_bf16_kernels", cuflash::tensor_core_kernels(device)}};
}

Json run_metadata(int device, const Json& protocol) {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const fs::path cwd = fs::current_path(ec);
  return Json{{"schema", "cuflash-bench-package/1"},
              {"status", "running"},
              {"started_utc", utc_now_iso8601()},
              {"finished_utc", nullptr},
              {"host_name", host_name()},
              {"num_cpus", static_cast<int64_t>(std::thread::hardware_concurrency())},
              {"executable", exe.string()},
              {"working_directory", cwd.string()},
              {"command_line", process_command_line()},
              {"cuflash", build_metadata()},
              {"cuda", cuda_metadata()},
              {"device", device_metadata(device)},
              {"protocol", protocol}};
}

}  // namespace cuflash::bench
