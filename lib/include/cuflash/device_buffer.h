// One device allocation, freed with the object: the RAII buffer of the host runner, the
// benchmark, the tests and the examples. Not used by forward()/backward(), which allocate
// nothing.
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

namespace cuflash {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;  // holds nothing: data() is null, bytes() 0

  // cudaMalloc of `bytes` (of at least one byte, so that data() is never null). Throws
  // cuflash::Error: out_of_memory when the device cannot hold it, with the size asked and the
  // device's free and total memory in the message; no_device or cuda for other failures.
  explicit DeviceBuffer(size_t bytes);

  // cudaFree, which waits for pending work on the memory; errors are not reported (they
  // surface at the next CUDA call).
  ~DeviceBuffer();

  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const noexcept { return data_; }
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(data_);
  }
  size_t bytes() const noexcept { return bytes_; }  // the size asked for

  // Asynchronous on `stream` (the legacy default stream when null); each moves or sets all
  // bytes() bytes and throws cuflash::Error (check_cuda) when CUDA refuses. The caller keeps
  // `host` alive and synchronizes the stream before reading what copy_to_host() wrote.
  void copy_from_host(const void* host, cudaStream_t stream = nullptr);
  void copy_to_host(void* host, cudaStream_t stream = nullptr) const;
  void fill(unsigned char value, cudaStream_t stream = nullptr);

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace cuflash
