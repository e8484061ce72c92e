// GPU tests of context parallelism over the GPUs of the host (cuflash/context_parallel/ring.h):
// forward and backward through ring_passes() with 1 GPU and, where the machine has them, 2, 3
// and 4, against the float64 reference and against the plain call on the whole problem, over
// the masks, both layouts, grouped-query attention, lengths that 2N chunks do not divide, a
// window, softcap and ALiBi. Skipped (visibly) in a build without NCCL.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include "cuflash/attention.h"
#include "cuflash/context_parallel/ring.h"
#include "cuflash/context_parallel/single_gpu.h"
#include "cuflash/error.h"
#include "cuflash/host_runner.h"
#include "gpu_test_util.h"

namespace cuflash::gpu_test {
namespace {

constexpr int kMostGpus = 4;

int gpus_present() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

// Whether the ring can run here; says why not (a build without NCCL) where the log shows it.
bool ring_here() {
  require_gpu();
  if (context_parallel::ring_available()) return true;
  WARN("skipped: this build has no NCCL, so no ring over GPUs");
  return false;
}

void check_all(const std::string& against, const std::vector<TensorCheck>& checks) {
  for (const TensorCheck& check : checks) {
    INFO(against << ": " << check.report);
    CHECK(check.pass);
  }
}

// `p` over 1 to min(kMostGpus, GPUs present) GPUs against the plain call and the reference
// (the blocks' gradients reach fp32 sums unrounded: BackwardArgs::sums).
void check_gpu_counts(const Problem& p, uint64_t seed) {
  const CaseInputs in = make_inputs(p, seed);
  const ExpectedResults expected = expected_results(p, in);
  const HostForwardBackwardResult plain =
      run_forward_backward(p, in.q_bytes, in.k_bytes, in.v_bytes, in.dout_bytes);
  const ExpectedResults like_plain = plain_as_reference(p, plain, expected);
  const int most = std::min(kMostGpus, gpus_present());
  if (most < 2) WARN("one GPU present: the ring ran on 1 GPU only, no transfer between ranks");
  for (int gpus = 1; gpus <= most; ++gpus) {
    INFO("gpus " << gpus);
    Problem over = p;
    over.gpus = gpus;
    const DevicePasses passes = context_parallel::device_passes(over);
    const HostForwardBackwardResult ours =
        run_forward_backward(over, in.q_bytes, in.k_bytes, in.v_bytes, in.dout_bytes, passes);
    // The same passes again (the ring, its scratch and the shards kept from the first call):
    // the forward, which sums in a fixed order, gives the same bits.
    const HostForwardResult again = run_forward(over, in.q_bytes, in.k_bytes, in.v_bytes, passes);
    CHECK(again.out == ours.forward.out);
    CHECK(again.lse == ours.forward.lse);
    check_all("vs reference", check_results(p, ours, expected));
    check_all("vs plain call", check_results(p, ours, like_plain));
  }
}

}  // namespace

TEST_CASE("context parallel over GPUs: 1 to 4 GPUs vs the float64 reference and the plain call",
          "[gpu][ring]") {
  if (!ring_here()) return;
  INFO(gpus_present() << " GPUs present");
  uint64_t seed = 8100;
  const std::vector<std::pair<int64_t, int64_t>> lengths{{1, 1}, {113, 1023}, {1023, 113},
                                                          {1023, 1023}};
  for (const DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
    for (const auto& [seq_q, seq_k] : lengths) {
      for (const Mask mask : {Mask::none, Mask::causal_bottom_right, Mask::causal_top_left}) {
        const Layout layout = seed % 2 ? Layout::bshd : Layout::bhsd;
        const Problem p = make_problem(dtype, 64, mask, seq_q, seq_k, 2, 4, 2, layout);
        ++seed;
        DYNAMIC_SECTION(describe(p)) { check_gpu_counts(p, seed); }
      }
    }
  }
}

TEST_CASE("context parallel over GPUs: a window, softcap and ALiBi, MQA, head_dim 128",
          "[gpu][ring]") {
  if (!ring_here()) return;
  uint64_t seed = 8200;
  for (const DType dtype : {DType::bf16, DType::fp32}) {
    for (const Mask mask : {Mask::none, Mask::causal_bottom_right}) {
      Problem p = make_problem(dtype, 128, mask, 300, 700, 2, 4, 1, Layout::bhsd);
      p.window = {200, mask == Mask::none ? 50 : 0};
      p.softcap = 30.0;
      p.alibi_slopes = alibi_default_slopes(p.shape.heads);
      ++seed;
      DYNAMIC_SECTION(describe(p)) { check_gpu_counts(p, seed); }
    }
  }
}

TEST_CASE("context parallel over GPUs: more GPUs than present are refused", "[gpu][ring]") {
  if (!ring_here()) return;
  Problem p = make_problem(DType::bf16, 64, Mask::none, 64, 64, 1, 2, 2, Layout::bhsd);
  p.gpus = gpus_present() + 1;
  const CaseInputs in = make_inputs(p, 8300);
  CHECK_THROWS_WITH(run_forward(p, in.q_bytes, in.k_bytes, in.v_bytes,
                                context_parallel::device_passes(p)),
                    Catch::Contains("does not exist"));
}

}  // namespace cuflash::gpu_test
