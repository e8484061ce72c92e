// GPU tests of variable-length packed batches (ForwardArgs::varlen, BackwardArgs::varlen; layout
// thd): forward and backward against the float64 reference under the accuracy rule of the other
// GPU tests, for sequences of 1, 113, 1023 and 2048 tokens mixed (a one-token sequence, lengths
// that end inside a block, the longest sequence not last), with GQA and MQA, both causal
// alignments (whose diagonal is each sequence's own), windows, softcap and ALiBi with a slope row
// per sequence, every dtype and head_dim, the deterministic backward, and the argument checks.
// Varlen batches run on the mma.sync kernels on every device (dispatch.cuh), so the second
// registration with CUFLASH_DISABLE_WGMMA=1 would run the same kernels again and is not made.
#include <array>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cuflash/attention.h"
#include "cuflash/error.h"
#include "cuflash/host_runner.h"
#include "gpu_test_util.h"

namespace cuflash::gpu_test {
namespace {

constexpr std::array<DType, 3> kDtypes{DType::fp16, DType::bf16, DType::fp32};
constexpr std::array<Mask, 3> kMasks{Mask::none, Mask::causal_bottom_right,
                                     Mask::causal_top_left};

// Query lengths; the keys either as long, or of other lengths so that the bottom-right and
// top-left diagonals differ in every sequence (longer and shorter keys, and a sequence whose
// queries outnumber its keys, where bottom-right leaves rows without keys).
const std::vector<int64_t> kLengths{113, 1, 2048, 1023};
const std::vector<int64_t> kOtherKeyLengths{1023, 113, 1, 2048};

void check_all(const std::vector<TensorCheck>& checks) {
  for (const TensorCheck& check : checks) {
    INFO(check.report);
    CHECK(check.pass);
  }
}

TEST_CASE("varlen: forward and backward vs float64 reference, lengths 1, 113, 1023, 2048",
          "[gpu][varlen]") {
  require_gpu();
  uint64_t seed = 2100;
  for (DType dtype : kDtypes) {
    for (int head_dim : supported_head_dims()) {
      for (Mask mask : kMasks) {
        for (const bool same_keys : {true, false}) {
          // GQA (4 query heads over 2) with equal lengths, MQA (over 1) with other key lengths.
          const Problem p = make_varlen_problem(dtype, head_dim, mask, kLengths,
                                                same_keys ? kLengths : kOtherKeyLengths, 4,
                                                same_keys ? 2 : 1);
          ++seed;
          DYNAMIC_SECTION(describe(p)) { check_all(run_and_check(p, seed)); }
        }
      }
    }
  }
}

TEST_CASE("varlen: windows, softcap and per-sequence ALiBi slopes vs float64 reference",
          "[gpu][varlen]") {
  require_gpu();
  uint64_t seed = 2200;
  for (DType dtype : kDtypes) {
    for (Mask mask : kMasks) {
      Problem p = make_varlen_problem(dtype, 64, mask, kLengths, kOtherKeyLengths, 4, 2);
      SECTION("window " + describe(p)) {
        p.window = {100, 40};  // the kernels with a left bound (kVariants)
        check_all(run_and_check(p, ++seed));
      }
      SECTION("right-bounded window " + describe(p)) {
        p.window = {-1, 17};  // the default kernels, the causal bound moved
        check_all(run_and_check(p, ++seed));
      }
      SECTION("softcap and [sequences, heads] ALiBi " + describe(p)) {
        p.softcap = 20.0;
        for (int64_t i = 0; i < p.sequences() * p.shape.heads; ++i) {
          p.alibi_slopes.push_back(0.02f * float(i % 7 + 1));
        }
        check_all(run_and_check(p, ++seed));
      }
    }
  }
}

TEST_CASE("varlen: deterministic backward is accurate and the same bits on two runs",
          "[gpu][varlen]") {
  require_gpu();
  uint64_t seed = 2300;
  for (DType dtype : kDtypes) {
    for (Mask mask : kMasks) {
      Problem p = make_varlen_problem(dtype, 128, mask, kLengths, kOtherKeyLengths, 4, 2);
      p.deterministic = true;
      ++seed;
      DYNAMIC_SECTION(describe(p)) {
        const CaseInputs in = make_inputs(p, seed);
        check_all(run_and_check(p, in));
        const HostBackwardResult first =
            run_forward_backward(p, in.q_bytes, in.k_bytes, in.v_bytes, in.dout_bytes).backward;
        const HostBackwardResult again =
            run_forward_backward(p, in.q_bytes, in.k_bytes, in.v_bytes, in.dout_bytes).backward;
        CHECK(again.dq == first.dq);
        CHECK(again.dk == first.dk);
        CHECK(again.dv == first.dv);
      }
    }
  }
}

// A small case for the compute-sanitizer runs (share/scripts/gpu_check.sh): every kernel of a
// varlen forward and deterministic backward, with CTAs past the ends of the shorter sequences.
TEST_CASE("varlen: small forward and backward for the sanitizers", "[gpu][varlen][sanitizer]") {
  require_gpu();
  for (DType dtype : {DType::fp16, DType::fp32}) {
    Problem p = make_varlen_problem(dtype, 64, Mask::causal_bottom_right, {1, 113, 200},
                                    {70, 113, 1}, 4, 2);
    p.deterministic = true;
    DYNAMIC_SECTION(describe(p)) { check_all(run_and_check(p, 2400)); }
  }
}

TEST_CASE("varlen: forward() and backward() refuse inconsistent arguments", "[gpu][varlen]") {
  require_gpu();
  const Problem p = make_varlen_problem(DType::fp16, 64, Mask::none, {5, 9}, {5, 9}, 4, 2);
  const DeviceProblem device(p);
  const auto refuses = [](auto&& call, const std::string& message) {
    try {
      call();
      FAIL("accepted; expected: " << message);
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(message) != std::string::npos);
    }
  };
  SECTION("the valid arguments run") {
    CHECK_NOTHROW(forward(device.forward_args()));
    CHECK_NOTHROW(backward(device.backward_args()));
  }
  SECTION("missing key offsets") {
    ForwardArgs args = device.forward_args();
    args.varlen.cu_seqlens_k = nullptr;
    refuses([&] { forward(args); }, "varlen.cu_seqlens_k is null");
  }
  SECTION("a batch stride") {
    BackwardArgs args = device.backward_args();
    args.dq.batch_stride = 8 * 64;
    refuses([&] { backward(args); }, "dq.batch_stride must be 0");
  }
  SECTION("totals below the longest sequence") {
    ForwardArgs args = device.forward_args();
    args.varlen.total_q = 8;  // shape.seq_q is 9
    refuses([&] { forward(args); }, "varlen.total_q");
  }
  SECTION("key splits") {
    ForwardArgs args = device.forward_args();
    args.splits = 2;
    refuses([&] { forward(args); }, "varlen batch does not combine");
  }
}

}  // namespace
}  // namespace cuflash::gpu_test
