// GPU tests of variable-length packed batches (ForwardArgs::varlen, BackwardArgs::varlen; layout
// thd): forward and backward against the float64 reference under the accuracy rule of the other
// GPU tests, for sequences of 1, 113, 1023 and 2048 tokens mixed (a one-token sequence, lengths
// that end inside a block, the longest sequence not last), with GQA and MQA, both causal
// alignments (whose diagonal is each sequence's own), windows, softcap and ALiBi with a slope row
// per sequence, every dtype, tuned and padded head dims, the deterministic backward, and the
// argument checks.
// On Hopper fp16/bf16 varlen batches run on the wgmma kernels (dispatch.cuh; the backward up to
// head_dim 128); the second registration with CUFLASH_DISABLE_WGMMA=1 (tests/CMakeLists.txt)
// runs these tests on the mma.sync kernels too.
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>

#include "cuflash/attention.h"
#include "cuflash/cuda_error.h"
#include "cuflash/device_buffer.h"
#include "cuflash/error.h"
#include "cuflash/host_runner.h"
#include "cuflash/reference/attention_ref.h"
#include "cuflash/reference/baseline.h"
#include "gpu_test_util.h"

namespace cuflash::gpu_test {
namespace {

constexpr std::array<DType, 3> kDtypes{DType::fp16, DType::bf16, DType::fp32};
// The tuned kernels of the common head dims with every mask; the others (padded columns: 40 on
// 64's kernels; their own kernels with column-split backwards: 96, 192, 256) once each.
const std::vector<int> kHeadDims{32, 64, 128};
const std::vector<int> kOtherHeadDims{40, 96, 192, 256};
constexpr std::array<Mask, 3> kMasks{Mask::none, Mask::causal_bottom_right,
                                     Mask::causal_top_left};

// Query lengths; the keys either as long, or of other lengths so that the bottom-right and
// top-left diagonals differ in every sequence (longer and shorter keys, and a sequence whose
// queries outnumber its keys, where bottom-right leaves rows without keys).
const std::vector<int64_t> kLengths{113, 1, 2048, 1023};
const std::vector<int64_t> kOtherKeyLengths{1023, 113, 1, 2048};
// fp32 pairs the one-key sequence with the one-query one instead. With 2048 queries on one key,
// that key's dK sums 2048 x (heads per kv head) terms dS = P (dP - D) that cancel exactly (P = 1):
// the split-TF32 dP against the fp32 D leaves about 2^-21 |dO| |V| in each, 1.9e-4 in all at
// D=128, where the fp32 rule allows 9.8e-5. The dense kernels show the same on a dense 2048 x 1
// problem (cuflash verify -s 2048 --seq-k 1 -d 128 --dtype fp32 --backward): a limit of the fp32
// products, not of the packed batches, recorded in the performance log.
const std::vector<int64_t> kOtherKeyLengthsFp32{1023, 1, 113, 2048};

const std::vector<int64_t>& other_key_lengths(DType dtype) {
  return dtype == DType::fp32 ? kOtherKeyLengthsFp32 : kOtherKeyLengths;
}

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
    for (int head_dim : kHeadDims) {
      for (Mask mask : kMasks) {
        for (const bool same_keys : {true, false}) {
          // GQA (4 query heads over 2) with equal lengths, MQA (over 1) with other key lengths.
          const Problem p = make_varlen_problem(dtype, head_dim, mask, kLengths,
                                                same_keys ? kLengths : other_key_lengths(dtype),
                                                4, same_keys ? 2 : 1);
          ++seed;
          DYNAMIC_SECTION(describe(p)) { check_all(run_and_check(p, seed)); }
        }
      }
    }
  }
}

TEST_CASE("varlen: the other head dims vs float64 reference", "[gpu][varlen]") {
  require_gpu();
  uint64_t seed = 2150;
  for (DType dtype : kDtypes) {
    for (int head_dim : kOtherHeadDims) {
      const Problem p = make_varlen_problem(dtype, head_dim, Mask::causal_bottom_right, kLengths,
                                            kOtherKeyLengths, 4, 2);
      ++seed;
      DYNAMIC_SECTION(describe(p)) { check_all(run_and_check(p, seed)); }
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
      Problem p =
          make_varlen_problem(dtype, 128, mask, kLengths, other_key_lengths(dtype), 4, 2);
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

// Token rows [begin, begin + count) of a packed [tokens, heads, head_dim] tensor, appended.
void append_rows(HostBytes& to, const HostBytes& from, int64_t row_bytes, int64_t begin,
                 int64_t count) {
  to.insert(to.end(), from.begin() + begin * row_bytes, from.begin() + (begin + count) * row_bytes);
}

// The rows of `packed` outside [begin, begin + count), and whether the rows inside are all zero.
HostBytes without_rows(const HostBytes& packed, int64_t row_bytes, int64_t begin, int64_t count,
                       bool& inside_zero) {
  HostBytes kept(packed.begin(), packed.begin() + begin * row_bytes);
  kept.insert(kept.end(), packed.begin() + (begin + count) * row_bytes, packed.end());
  inside_zero = true;
  for (int64_t i = begin * row_bytes; i < (begin + count) * row_bytes; ++i) {
    inside_zero = inside_zero && packed[size_t(i)] == 0;
  }
  return kept;
}

TEST_CASE("varlen: an empty sequence and queries without keys, through the API",
          "[gpu][varlen]") {
  require_gpu();
  // The batch {5, 9} checked against the reference, run with two sequences inserted between
  // its two: 0 queries over 4 keys (no CTA has work; its keys get dK = dV = 0) and 3 queries
  // over 0 keys (O = 0, LSE = +inf, dQ = 0).
  const Problem p =
      make_varlen_problem(DType::fp16, 64, Mask::causal_bottom_right, {5, 9}, {5, 9}, 4, 2);
  const CaseInputs in = make_inputs(p, 2500);
  const AttentionShape& s = p.shape;
  const int64_t q_row = s.heads * s.head_dim * 2, kv_row = s.heads_kv * s.head_dim * 2;
  const auto packed = [&](const HostBytes& from, int64_t row, int64_t inserted) {
    HostBytes to;
    append_rows(to, from, row, 0, 5);
    append_rows(to, from, row, 0, inserted);  // the inserted sequences' tokens: any values
    append_rows(to, from, row, 5, 9);
    return to;
  };
  const HostBytes q = packed(in.q_bytes, q_row, 3), dout = packed(in.dout_bytes, q_row, 3);
  const HostBytes k = packed(in.k_bytes, kv_row, 4), v = packed(in.v_bytes, kv_row, 4);
  const int64_t total_q = 17, total_k = 18;
  const std::vector<int32_t> cu_q{0, 5, 5, 8, 17}, cu_k{0, 5, 9, 9, 18};

  const auto upload = [](const auto& host, size_t bytes) {
    DeviceBuffer buffer(bytes);
    buffer.copy_from_host(host.data());
    return buffer;
  };
  const DeviceBuffer q_in = upload(q, q.size()), k_in = upload(k, k.size()),
                     v_in = upload(v, v.size()), dout_in = upload(dout, dout.size());
  const DeviceBuffer dcu_q = upload(cu_q, cu_q.size() * 4), dcu_k = upload(cu_k, cu_k.size() * 4);
  DeviceBuffer out(q.size()), lse(size_t(s.heads * total_q) * sizeof(float));
  DeviceBuffer dq(q.size()), dk(k.size()), dv(k.size());
  for (DeviceBuffer* b : {&out, &lse, &dq, &dk, &dv}) b->fill(0xFF);  // NaN where nothing wrote

  ForwardArgs args;
  args.shape = AttentionShape{4, s.heads, s.heads_kv, 9, 9, s.head_dim};
  args.dtype = p.dtype;
  args.mask = p.mask;
  const auto ref = [&](const DeviceBuffer& b, int64_t heads, int64_t tokens) {
    return make_tensor_ref(b.data(), Layout::thd, 1, heads, tokens, s.head_dim);
  };
  args.q = ref(q_in, s.heads, total_q);
  args.k = ref(k_in, s.heads_kv, total_k);
  args.v = ref(v_in, s.heads_kv, total_k);
  args.out = ref(out, s.heads, total_q);
  args.lse = lse.as<float>();
  args.varlen = {dcu_q.as<const int32_t>(), dcu_k.as<const int32_t>(), total_q, total_k};
  BackwardArgs bwd = backward_args_for(args);
  bwd.dout = ref(dout_in, s.heads, total_q);
  bwd.dq = ref(dq, s.heads, total_q);
  bwd.dk = ref(dk, s.heads_kv, total_k);
  bwd.dv = ref(dv, s.heads_kv, total_k);
  DeviceBuffer workspace(backward_workspace_size(args.shape, p.dtype));
  bwd.workspace = workspace.data();
  bwd.workspace_bytes = workspace.bytes();
  forward(args);
  backward(bwd);

  const auto download = [](const DeviceBuffer& b) {
    HostBytes host(b.bytes());
    b.copy_to_host(host.data());
    return host;
  };
  std::vector<float> lse_host(size_t(s.heads * total_q));
  lse.copy_to_host(lse_host.data());
  const HostBytes out_host = download(out), dq_host = download(dq), dk_host = download(dk),
                  dv_host = download(dv);
  check_cuda(cudaDeviceSynchronize(), "the varlen test's copies");

  bool zero_o = false, zero_dq = false, zero_dk = false, zero_dv = false;
  const HostBytes o_kept = without_rows(out_host, q_row, 5, 3, zero_o);
  const HostBytes dq_kept = without_rows(dq_host, q_row, 5, 3, zero_dq);
  const HostBytes dk_kept = without_rows(dk_host, kv_row, 5, 4, zero_dk);
  const HostBytes dv_kept = without_rows(dv_host, kv_row, 5, 4, zero_dv);
  CHECK(zero_o);
  CHECK(zero_dq);
  CHECK(zero_dk);
  CHECK(zero_dv);
  std::vector<float> lse_kept;
  for (int64_t h = 0; h < s.heads; ++h) {
    for (int64_t t = 0; t < total_q; ++t) {
      const float value = lse_host[size_t(h * total_q + t)];
      if (t >= 5 && t < 8) {
        CHECK(value == std::numeric_limits<float>::infinity());
      } else {
        lse_kept.push_back(value);
      }
    }
  }

  const reference::ForwardResult ref_fwd = reference::forward(p, in.q, in.k, in.v);
  const reference::Gradients ref_grad = reference::backward(p, in.q, in.k, in.v, ref_fwd, in.dout);
  const reference::ForwardResult base_fwd = reference::baseline::forward(p, in.q, in.k, in.v);
  const reference::Gradients base_grad =
      reference::baseline::backward(p, in.q, in.k, in.v, base_fwd, in.dout);
  check_all({
      check_tensor("O", p.dtype, q_side_values(p, o_kept), base_fwd.out, ref_fwd.out),
      check_lse(p.dtype, lse_kept, ref_fwd.lse),
      check_tensor("dQ", p.dtype, q_side_values(p, dq_kept), base_grad.dq, ref_grad.dq),
      check_tensor("dK", p.dtype, kv_side_values(p, dk_kept), base_grad.dk, ref_grad.dk),
      check_tensor("dV", p.dtype, kv_side_values(p, dv_kept), base_grad.dv, ref_grad.dv),
  });
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
