// merge_attention_partials() behind its validation (api.cu): the merge kernel of
// kernels/split/merge.cuh, compiled here once per element type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "dispatch.h"
#include "kernels/split/merge.cuh"

namespace cuflash::detail {
namespace split {

template void launch_merge<__half>(MergeParams<__half>, cudaStream_t);
template void launch_merge<__nv_bfloat16>(MergeParams<__nv_bfloat16>, cudaStream_t);
template void launch_merge<float>(MergeParams<float>, cudaStream_t);

}  // namespace split

namespace {

template <typename Element>
void merge_as(const MergePartialsArgs& args, cudaStream_t stream) {
  split::MergeParams<Element> params{};
  params.splits = args.splits;
  params.heads = args.heads;
  params.seq_q = args.seq_q;
  params.rows = args.batch * args.heads * args.seq_q;
  params.head_dim = args.head_dim;
  params.partial_out = args.partial_out;
  params.partial_lse = args.partial_lse;
  params.out = global_tensor<Element>(args.out);
  params.lse = args.lse;
  split::launch_merge(params, stream);
}

}  // namespace

void dispatch_merge(const MergePartialsArgs& args, cudaStream_t stream) {
  switch (args.dtype) {
    case DType::fp16: return merge_as<__half>(args, stream);
    case DType::bf16: return merge_as<__nv_bfloat16>(args, stream);
    case DType::fp32: return merge_as<float>(args, stream);
  }
}

}  // namespace cuflash::detail
