#include "cuflash/device_buffer.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "cuflash/cuda_error.h"
#include "cuflash/error.h"

namespace cuflash {

namespace {

// "1073741824 bytes (1 GiB)": exact for scripts, rounded for people.
std::string byte_text(size_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char rounded[32];
  std::snprintf(rounded, sizeof rounded, "%.3g %s", value, kUnits[unit]);
  return std::to_string(bytes) + " bytes (" + rounded + ")";
}

[[noreturn]] void throw_out_of_memory(size_t bytes) {
  cudaGetLastError();  // a failed allocation is not sticky: clear it before asking for more
  std::string message = "cudaMalloc of " + byte_text(bytes) + ": out of device memory";
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
    message += "; " + byte_text(free) + " free of " + byte_text(total);
  } else {
    cudaGetLastError();
  }
  throw Error(Error::Kind::out_of_memory, message);
}

}  // namespace

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  const cudaError_t status = cudaMalloc(&data_, std::max<size_t>(bytes, 1));
  if (status == cudaErrorMemoryAllocation) {
    data_ = nullptr;
    throw_out_of_memory(bytes);
  }
  if (status != cudaSuccess) data_ = nullptr;
  check_cuda(status, "cudaMalloc");
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::copy_from_host(const void* host, cudaStream_t stream) {
  check_cuda(cudaMemcpyAsync(data_, host, bytes_, cudaMemcpyHostToDevice, stream),
             "cudaMemcpyAsync (host to device)");
}

void DeviceBuffer::copy_to_host(void* host, cudaStream_t stream) const {
  check_cuda(cudaMemcpyAsync(host, data_, bytes_, cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (device to host)");
}

void DeviceBuffer::fill(unsigned char value, cudaStream_t stream) {
  check_cuda(cudaMemsetAsync(data_, value, bytes_, stream), "cudaMemsetAsync");
}

}  // namespace cuflash
