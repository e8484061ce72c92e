// Host side of tma.cuh: building CUtensorMaps through the driver entry point the CUDA runtime
// hands out, so that the library needs no link to the driver library itself.
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <cuda_runtime_api.h>

#include "kernels/sm90/tma.cuh"

namespace cuflash::detail::sm90 {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
    const cudaError_t status = cudaGetDriverEntryPointByVersion(
        "cuTensorMapEncodeTiled", &function, 12000, cudaEnableDefault, &found);
#else  // the versioned lookup arrived in CUDA 12.5
    const cudaError_t status =
        cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &function, cudaEnableDefault, &found);
#endif
    if (status != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      return PFN_cuTensorMapEncodeTiled_v12000{nullptr};
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
  }();
  return encoder;
}

}  // namespace

bool make_tile_tensor_map(CUtensorMap& map, const TensorRef& tensor, DType dtype, int64_t batch,
                          int64_t heads, int64_t seq, int64_t head_dim, int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr || dtype == DType::fp32) return false;
  constexpr cuuint64_t kElementBytes = 2;
  // Dimensions innermost first: (head_dim, seq, heads, batch); strides of the outer three.
  const cuuint64_t sizes[4] = {cuuint64_t(head_dim), cuuint64_t(seq), cuuint64_t(heads),
                               cuuint64_t(batch)};
  // A varlen batch's tensors have batch stride 0 and are mapped as one batch entry: any valid
  // stride serves a dimension of size 1.
  const int64_t batch_stride =
      batch == 1 && tensor.batch_stride == 0 ? tensor.seq_stride * seq : tensor.batch_stride;
  const cuuint64_t strides[3] = {cuuint64_t(tensor.seq_stride) * kElementBytes,
                                 cuuint64_t(tensor.head_stride) * kElementBytes,
                                 cuuint64_t(batch_stride) * kElementBytes};
  const cuuint32_t box[4] = {cuuint32_t(kTmaBoxColumns), cuuint32_t(box_rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult status = encode(
      &map, dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
      4, tensor.data, sizes, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return status == CUDA_SUCCESS;
}

}  // namespace cuflash::detail::sm90
