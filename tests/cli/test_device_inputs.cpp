// `cuflash bench` makes its seeded inputs on the GPU (bench/device_inputs.h): the bytes must be
// those of the host generator (io::random_input_bytes) that `run` and `verify` use, for every
// dtype, layout and input tensor, so that a bench case and a run of the same problem and seed
// compute on the same data. Needs a GPU: label gpu.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <vector>

#include "bench/device_inputs.h"
#include "cuflash/device_buffer.h"
#include "cuflash/io/random_inputs.h"

using namespace cuflash;

namespace {

// Elements where two byte strings of `element` bytes each differ.
size_t differing_elements(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b,
                          size_t element) {
  size_t differing = 0;
  for (size_t i = 0; i + element <= a.size(); i += element) {
    differing += std::memcmp(a.data() + i, b.data() + i, element) != 0;
  }
  return differing;
}

}  // namespace

TEST_CASE("device inputs: the GPU makes the host generator's bytes", "[gpu]") {
  const bench::DeviceNormalTables tables;
  // Odd sequence lengths, seq_q != seq_k, GQA, a head_dim that is not a power of two, and one
  // tensor of more pairs than the kernel's grid holds (its grid-stride loop).
  const AttentionShape shapes[] = {
      {1, 1, 1, 1, 113, 8}, {2, 8, 2, 113, 1023, 72}, {1, 8, 8, 1, 40000, 128}};
  for (const AttentionShape& shape : shapes) {
    for (const DType dtype : {DType::fp16, DType::bf16, DType::fp32}) {
      for (const Layout layout : {Layout::bhsd, Layout::bshd, Layout::thd}) {
        Problem p;
        p.shape = shape;
        p.dtype = dtype;
        p.layout = layout;
        for (const io::InputTensor tensor :
             {io::InputTensor::q, io::InputTensor::k, io::InputTensor::v, io::InputTensor::dout}) {
          const uint64_t seed = 11 + uint64_t(tensor);
          const std::vector<unsigned char> host = io::random_input_bytes(p, tensor, seed);
          DeviceBuffer buffer(host.size());
          buffer.fill(0xff);  // NaN in every dtype: a position the kernel missed shows
          tables.generate(p, tensor, seed, buffer);
          std::vector<unsigned char> device(host.size());
          buffer.copy_to_host(device.data());
          REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
          INFO("shape " << shape.batch << "x" << shape.heads << "/" << shape.heads_kv << "x"
                        << shape.seq_q << "x" << shape.seq_k << "x" << shape.head_dim << ", dtype "
                        << int(dtype) << ", layout " << int(layout) << ", tensor " << int(tensor));
          CHECK(differing_elements(host, device, size_t(dtype_size(dtype))) == 0);
        }
      }
    }
  }
}
