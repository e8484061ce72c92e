#include "bench/metadata.h"

#include <unistd.h>

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
  Json j = Json::object();
  const int dirty = CUFLASH_GIT_DIRTY;
  j.set("version", CUFLASH_VERSION)
      .set("git_commit", CUFLASH_GIT_COMMIT)
      .set("git_dirty", dirty < 0 ? Json() : Json(dirty > 0))
      .set("build_type", CUFLASH_BUILD_TYPE)
      .set("cuda_architectures", CUFLASH_CUDA_ARCHITECTURES)
      .set("cxx_compiler", CUFLASH_CXX_COMPILER)
      .set("cxx_flags", CUFLASH_CXX_FLAGS)
      .set("cuda_compiler_version", CUFLASH_CUDA_COMPILER_VERSION)
      .set("cuda_flags", CUFLASH_CUDA_FLAGS);
  return j;
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
  Json j = Json::object();
  j.set("driver_version", cuda_version_text(driver))
      .set("runtime_version", cuda_version_text(runtime));
  return j;
}

Json device_metadata(int device) {
  Json j = Json::object();
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    j.set("index", device).set("name", "none");
    return j;
  }
  const int sm_khz = attribute(cudaDevAttrClockRate, device);
  const int memory_khz = attribute(cudaDevAttrMemoryClockRate, device);
  j.set("index", device)
      .set("name", p.name)
      .set("uuid", uuid_text(p.uuid))
      .set("pci_bus_id", pci_text(p))
      .set("compute_capability", std::to_string(p.major) + "." + std::to_string(p.minor))
      .set("sm_count", p.multiProcessorCount)
      .set("memory_bytes", static_cast<int64_t>(p.totalGlobalMem))
      .set("l2_cache_bytes", p.l2CacheSize)
      .set("max_sm_clock_mhz", sm_khz < 0 ? Json() : Json(sm_khz / 1000))
      .set("max_memory_clock_mhz", memory_khz < 0 ? Json() : Json(memory_khz / 1000))
      .set("memory_bus_width_bits", attribute(cudaDevAttrGlobalMemoryBusWidth, device))
      .set("ecc_enabled", p.ECCEnabled != 0)
      .set("fp16_bf16_kernels", cuflash::tensor_core_kernels(device));
  return j;
}

Json run_metadata(int device, const Json& protocol) {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const fs::path cwd = fs::current_path(ec);
  Json j = Json::object();
  j.set("schema", "cuflash-bench-package/1")
      .set("status", "running")
      .set("started_utc", utc_now_iso8601())
      .set("finished_utc", Json())
      .set("host_name", host_name())
      .set("num_cpus", static_cast<int64_t>(std::thread::hardware_concurrency()))
      .set("executable", exe.string())
      .set("working_directory", cwd.string())
      .set("command_line", Json::array_of(process_command_line()))
      .set("cuflash", build_metadata())
      .set("cuda", cuda_metadata())
      .set("device", device_metadata(device))
      .set("protocol", protocol);
  return j;
}

}  // namespace cuflash::bench
