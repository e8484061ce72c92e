// The seeded inputs of io/random_inputs.h made on the GPU: the same bytes as
// io::random_input_bytes(), without generating gigabytes on the host and copying them over
// (a decode case of 64 sequences against 32k keys holds 8 GB of K and V).
#pragma once

#include <cstdint>

#include "cuflash/device_buffer.h"
#include "cuflash/io/random_inputs.h"
#include "cuflash/problem.h"

namespace cuflash::bench {

// The generator's three factor tables (io::normal_tables(), 384 MB) on the device, for as long
// as the object lives.
class DeviceNormalTables {
 public:
  // Throws cuflash::Error (out_of_memory when the device cannot hold them).
  DeviceNormalTables();

  // Writes io::random_input_bytes(problem, tensor, seed) into `out` on the legacy default
  // stream; the caller synchronizes before reading it. Throws cuflash::Error
  // (invalid_argument) unless `out` has exactly that size and head_dim is even.
  void generate(const Problem& problem, io::InputTensor tensor, uint64_t seed,
                DeviceBuffer& out) const;

 private:
  DeviceBuffer radius_, cosine_, sine_;
};

}  // namespace cuflash::bench
