#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "bench/device_inputs.h"
#include "cuflash/cuda_error.h"
#include "cuflash/error.h"

namespace cuflash::bench {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;  // grid-stride beyond this

template <typename Element>
__device__ void store(Element* out, uint64_t position, float value) {
  if constexpr (sizeof(Element) == 4) {
    out[position] = value;
  } else if constexpr (std::is_same_v<Element, __half>) {
    out[position] = __float2half_rn(value);
  } else {
    out[position] = __float2bfloat16_rn(value);
  }
}

// One thread per pair of elements (2k, 2k + 1): the host generator's arithmetic, the factors
// read from its tables; __dmul_rn and __double2float_rn keep the product and the rounding the
// IEEE operations of the host (no contraction).
template <typename Element>
__global__ void __launch_bounds__(kThreads)
    generate_kernel(Element* out, uint64_t pairs, uint64_t key, io::InputDims dims, bool bhsd,
                    const double* radius, const double* cosine, const double* sine) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t pair = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; pair < pairs;
       pair += stride) {
    const uint64_t bits = io::splitmix64(key + pair);
    const double r = radius[io::radius_index(bits)];
    const uint32_t angle = io::angle_index(bits);
    // head_dim is even: both elements of a pair lie in one row, at consecutive positions.
    const uint64_t position = io::input_position(dims, bhsd, 2 * pair);
    store(out, position, __double2float_rn(__dmul_rn(r, cosine[angle])));
    store(out, position + 1, __double2float_rn(__dmul_rn(r, sine[angle])));
  }
}

DeviceBuffer upload(const std::vector<double>& table) {
  DeviceBuffer buffer(table.size() * sizeof(double));
  buffer.copy_from_host(table.data());
  return buffer;
}

}  // namespace

DeviceNormalTables::DeviceNormalTables() {
  const io::NormalTables& tables = io::normal_tables();
  radius_ = upload(tables.radius);
  cosine_ = upload(tables.cosine);
  sine_ = upload(tables.sine);
}

void DeviceNormalTables::generate(const Problem& problem, io::InputTensor tensor, uint64_t seed,
                                  DeviceBuffer& out) const {
  const io::InputDims d = io::input_dims(problem, tensor);
  const size_t bytes = d.elements() * size_t(dtype_size(problem.dtype));
  if (d.head_dim % 2 != 0 || out.bytes() != bytes) {
    throw Error(Error::Kind::invalid_argument,
                "device inputs: a buffer of " + std::to_string(bytes) +
                    " bytes and an even head_dim are needed (got " +
                    std::to_string(out.bytes()) + " bytes, head_dim " +
                    std::to_string(d.head_dim) + ")");
  }
  const uint64_t pairs = d.elements() / 2;  // both elements of a pair lie in one row
  const uint64_t key = io::stream_key(seed, uint64_t(tensor));
  const bool bhsd = problem.layout == Layout::bhsd;
  const unsigned blocks =
      unsigned(std::min<uint64_t>(kMaxBlocks, (pairs + kThreads - 1) / kThreads));
  const auto* r = radius_.as<const double>();
  const auto* c = cosine_.as<const double>();
  const auto* s = sine_.as<const double>();
  switch (problem.dtype) {
    case DType::fp32:
      generate_kernel<<<blocks, kThreads>>>(out.as<float>(), pairs, key, d, bhsd, r, c, s);
      break;
    case DType::fp16:
      generate_kernel<<<blocks, kThreads>>>(out.as<__half>(), pairs, key, d, bhsd, r, c, s);
      break;
    case DType::bf16:
      generate_kernel<<<blocks, kThreads>>>(out.as<__nv_bfloat16>(), pairs, key, d, bhsd, r, c,
                                            s);
      break;
  }
  check_cuda(cudaGetLastError(), "generating the inputs");
}

}  // namespace cuflash::bench
