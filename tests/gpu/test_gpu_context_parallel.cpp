// GPU tests of context-parallel attention on one GPU (cuflash/context_parallel/single_gpu.h) and
// of the explicit diagonal offset its blocks run at (ForwardArgs::diagonal_offset):
//   - a block at an explicit offset: a range of the queries against all the keys gives the whole
//     problem's rows of O, LSE and dQ, and all the queries against a range of the keys its rows
//     of dK and dV, checked against the whole problem's float64 reference under the usual rule,
//     on the kernels the shapes take: the split-KV forward (a short range of queries, fp16 and
//     bf16), the wgmma kernels (fp16 and bf16 at head_dim 64 on Hopper) and the mma.sync ones
//     (fp32, head_dim 32, and all of it again with CUFLASH_DISABLE_WGMMA=1);
//   - forward and backward with 1, 2, 3 and 4 ranks against the float64 reference and against
//     the plain call on the whole problem, for lengths 1, 113, 1023, 113 x 1023 and 1023 x 113,
//     no mask and both causal masks, every dtype, both layouts, grouped-query attention, windows,
//     softcap and ALiBi; a NaN reaching O; the argument checks.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include "cuflash/attention.h"
#include "cuflash/context_parallel/single_gpu.h"
#include "cuflash/cuda_error.h"
#include "cuflash/device_buffer.h"
#include "cuflash/error.h"
#include "cuflash/host_runner.h"
#include "gpu_test_util.h"

namespace cuflash::gpu_test {
namespace {

constexpr DType kDtypes[] = {DType::fp16, DType::bf16, DType::fp32};
constexpr Mask kMasks[] = {Mask::none, Mask::causal_bottom_right, Mask::causal_top_left};
constexpr Layout kLayouts[] = {Layout::bhsd, Layout::bshd};
// (seq_q, seq_k): one position (most chunks empty), lengths that 2N chunks do not divide, and
// both orders of unequal lengths, where the two causal diagonals differ.
const std::vector<std::pair<int64_t, int64_t>> kLengths{
    {1, 1}, {113, 113}, {1023, 1023}, {113, 1023}, {1023, 113}};
constexpr int kMaxRanks = 4;

void check_all(const std::string& against, const std::vector<TensorCheck>& checks) {
  for (const TensorCheck& check : checks) {
    INFO(against << ": " << check.report);
    CHECK(check.pass);
  }
}

// --- A block at an explicit diagonal offset -------------------------------------------------

// Rows [begin, end) of each of `planes` [seq, width] planes (values in bhsd order).
std::vector<double> rows_of(const std::vector<double>& values, int64_t planes, int64_t seq,
                            int64_t width, int64_t begin, int64_t end) {
  std::vector<double> rows;
  for (int64_t plane = 0; plane < planes; ++plane) {
    const auto first = values.begin() + (plane * seq + begin) * width;
    rows.insert(rows.end(), first, first + (end - begin) * width);
  }
  return rows;
}

std::vector<double> as_doubles(const std::vector<float>& values) {
  return std::vector<double>(values.begin(), values.end());
}

std::vector<float> as_floats(const std::vector<double>& values) {
  return std::vector<float>(values.begin(), values.end());
}

// LSE rows [begin, end) of every (batch, head), packed [B, H, rows], on the device: the LSE a
// block of those queries takes.
DeviceBuffer lse_rows_on_device(const Problem& p, const std::vector<float>& lse, int64_t begin,
                                int64_t end) {
  const std::vector<float> rows = as_floats(
      rows_of(as_doubles(lse), p.shape.batch * p.shape.heads, p.shape.seq_q, 1, begin, end));
  DeviceBuffer buffer(rows.size() * sizeof(float));
  buffer.copy_from_host(rows.data());
  check_cuda(cudaDeviceSynchronize(), "uploading LSE rows");
  return buffer;
}

// Queries [q_begin, q_end) and keys [k_begin, k_end) of the whole problem as one block at its
// global diagonal. Args is ForwardArgs or BackwardArgs.
template <typename Args>
Args block_of(const Args& whole, const Problem& p, int64_t q_begin, int64_t q_end,
              int64_t k_begin, int64_t k_end) {
  Args block = whole;
  block.shape.seq_q = q_end - q_begin;
  block.shape.seq_k = k_end - k_begin;
  block.q = context_parallel::tensor_rows(whole.q, q_begin, p.dtype);
  block.k = context_parallel::tensor_rows(whole.k, k_begin, p.dtype);
  block.v = context_parallel::tensor_rows(whole.v, k_begin, p.dtype);
  block.diagonal_offset = p.band().offset + q_begin - k_begin;
  return block;
}

// A third of the queries from the middle on, against all the keys: O, LSE and dQ of those rows
// are the whole problem's. All the queries against half of the keys: dK and dV of those keys are
// the whole problem's. The whole problem's forward gives the O and LSE the backward blocks read.
void check_blocks_at_offsets(const Problem& p, uint64_t seed) {
  const AttentionShape& s = p.shape;
  const CaseInputs in = make_inputs(p, seed);
  const ExpectedResults e = expected_results(p, in);
  DeviceProblem device(p);
  device.upload(in);
  const int64_t q_begin = s.seq_q / 2, q_end = q_begin + (s.seq_q + 2) / 3;
  const int64_t k_begin = s.seq_k / 4, k_end = k_begin + (s.seq_k + 1) / 2;
  const int64_t q_planes = s.batch * s.heads, kv_planes = s.batch * s.heads_kv;
  const auto q_rows = [&](const std::vector<double>& values, int64_t width) {
    return rows_of(values, q_planes, s.seq_q, width, q_begin, q_end);
  };
  const auto k_rows = [&](const std::vector<double>& values) {
    return rows_of(values, kv_planes, s.seq_k, s.head_dim, k_begin, k_end);
  };

  forward(device.forward_args());
  const HostForwardResult whole = device.forward_result();
  const DeviceBuffer block_lse = lse_rows_on_device(p, whole.lse, q_begin, q_end);
  // Every output all bits set (NaN in every dtype) before a block writes its rows: rows it does
  // not write, or writes elsewhere, fail the checks below; rows past it must stay NaN.
  const auto fill_nan = [&](void* data, int64_t elements) {
    check_cuda(cudaMemset(data, 0xFF, size_t(elements) * dtype_size(p.dtype)), "filling NaN");
  };
  const auto count_nan = [](const std::vector<double>& values) {
    return std::count_if(values.begin(), values.end(), [](double x) { return x != x; });
  };

  // Backward, queries [q_begin, q_end): their dQ rows in place; dK and dV (partial) aside.
  const BackwardArgs whole_backward = device.backward_args();
  BackwardArgs queries = block_of(whole_backward, p, q_begin, q_end, 0, s.seq_k);
  queries.out = context_parallel::tensor_rows(whole_backward.out, q_begin, p.dtype);
  queries.dout = context_parallel::tensor_rows(whole_backward.dout, q_begin, p.dtype);
  queries.dq = context_parallel::tensor_rows(whole_backward.dq, q_begin, p.dtype);
  queries.lse = block_lse.as<const float>();
  const size_t kv_bytes = size_t(s.kv_elements()) * dtype_size(p.dtype);
  const DeviceBuffer partial_dk(kv_bytes), partial_dv(kv_bytes);
  queries.dk.data = partial_dk.data();
  queries.dv.data = partial_dv.data();
  fill_nan(whole_backward.dq.data, s.q_elements());
  backward(queries);
  const std::vector<double> dq = q_side_values(p, device.backward_result().dq);

  // Backward, keys [k_begin, k_end): their dK and dV rows in place; dQ (partial) aside.
  BackwardArgs keys = block_of(whole_backward, p, 0, s.seq_q, k_begin, k_end);
  keys.dk = context_parallel::tensor_rows(whole_backward.dk, k_begin, p.dtype);
  keys.dv = context_parallel::tensor_rows(whole_backward.dv, k_begin, p.dtype);
  const DeviceBuffer partial_dq(size_t(s.q_elements()) * dtype_size(p.dtype));
  keys.dq.data = partial_dq.data();
  fill_nan(whole_backward.dk.data, s.kv_elements());
  fill_nan(whole_backward.dv.data, s.kv_elements());
  backward(keys);
  const HostBackwardResult key_grads = device.backward_result();
  const std::vector<double> dk = kv_side_values(p, key_grads.dk);
  const std::vector<double> dv = kv_side_values(p, key_grads.dv);

  // Forward, queries [q_begin, q_end): their O rows in place, their LSE packed.
  ForwardArgs rows = block_of(device.forward_args(), p, q_begin, q_end, 0, s.seq_k);
  fill_nan(rows.out.data, s.q_elements());
  rows.out = context_parallel::tensor_rows(rows.out, q_begin, p.dtype);
  const DeviceBuffer rows_lse(size_t(q_planes * (q_end - q_begin)) * sizeof(float));
  rows.lse = rows_lse.as<float>();
  rows.splits = 1;
  forward(rows);
  const std::vector<double> out = q_side_values(p, device.forward_result().out);
  std::vector<float> lse(rows_lse.bytes() / sizeof(float));
  rows_lse.copy_to_host(lse.data());
  check_cuda(cudaDeviceSynchronize(), "downloading the block's LSE");

  // Every O and dQ value outside the block's query rows, and every dK and dV value outside its
  // key rows, is still NaN.
  const std::vector<double> out_rows = q_rows(out, s.head_dim);
  CHECK(count_nan(out) - count_nan(out_rows) == int64_t(out.size() - out_rows.size()));
  const std::vector<double> dq_rows = q_rows(dq, s.head_dim);
  CHECK(count_nan(dq) - count_nan(dq_rows) == int64_t(dq.size() - dq_rows.size()));
  for (const std::vector<double>* grad : {&dk, &dv}) {
    const std::vector<double> grad_rows = k_rows(*grad);
    CHECK(count_nan(*grad) - count_nan(grad_rows) == int64_t(grad->size() - grad_rows.size()));
  }
  check_all("block", {
      check_tensor("O rows", p.dtype, out_rows, q_rows(e.base_fwd.out, s.head_dim),
                   q_rows(e.ref_fwd.out, s.head_dim)),
      check_lse(p.dtype, lse, q_rows(e.ref_fwd.lse, 1)),
      check_tensor("dQ rows", p.dtype, dq_rows, q_rows(e.base_grad.dq, s.head_dim),
                   q_rows(e.ref_grad.dq, s.head_dim)),
      check_tensor("dK rows", p.dtype, k_rows(dk), k_rows(e.base_grad.dk), k_rows(e.ref_grad.dk)),
      check_tensor("dV rows", p.dtype, k_rows(dv), k_rows(e.base_grad.dv), k_rows(e.ref_grad.dv)),
  });
}

TEST_CASE("diagonal offset: blocks of queries or keys give the whole problem's rows",
          "[gpu][context_parallel]") {
  require_gpu();
  uint64_t seed = 4000;
  struct Shape {
    DType dtype;
    int64_t head_dim, seq_q, seq_k;
    const char* kernels;  // which the forward block takes (the backward: never the split one)
  };
  const Shape shapes[] = {
      {DType::fp16, 64, 150, 700, "split-KV forward: 50 queries"},
      {DType::bf16, 64, 150, 700, "split-KV forward: 50 queries"},
      {DType::fp16, 64, 700, 1023, "wgmma on Hopper"},
      {DType::bf16, 64, 1023, 300, "wgmma on Hopper"},
      {DType::fp16, 32, 700, 1023, "mma.sync"},
      {DType::fp32, 64, 1023, 700, "mma.sync"},
  };
  for (const Shape& shape : shapes) {
    for (Mask mask : kMasks) {
      Problem p = make_problem(shape.dtype, shape.head_dim, mask, shape.seq_q, shape.seq_k, 2, 4,
                               2, Layout::bshd);
      ++seed;
      DYNAMIC_SECTION(describe(p) << " (" << shape.kernels << ")") {
        check_blocks_at_offsets(p, seed);
      }
      p.window = {120, mask == Mask::none ? 30 : 0};
      p.softcap = 25.0;
      p.alibi_slopes = alibi_default_slopes(p.shape.heads);
      ++seed;
      DYNAMIC_SECTION(describe(p) << " (the variant kernels)") {
        check_blocks_at_offsets(p, seed);
      }
    }
  }
}

// --- Context parallelism on one GPU ---------------------------------------------------------

HostForwardBackwardResult run_with_ranks(const Problem& p, const CaseInputs& in, int ranks) {
  Problem with_ranks = p;
  with_ranks.ranks = ranks;
  return run_forward_backward(with_ranks, in.q_bytes, in.k_bytes, in.v_bytes, in.dout_bytes,
                              context_parallel::device_passes(with_ranks));
}

// Forward and backward of `p` with 1 to kMaxRanks ranks, each against the float64 reference and
// against the plain call. Each block's backward() adds its gradients to fp32 sums
// (BackwardArgs::sums), which are rounded to the dtype once, as the plain call's.
void check_rank_counts(const Problem& p, uint64_t seed) {
  const CaseInputs in = make_inputs(p, seed);
  const ExpectedResults expected = expected_results(p, in);
  const HostForwardBackwardResult plain =
      run_forward_backward(p, in.q_bytes, in.k_bytes, in.v_bytes, in.dout_bytes);
  const ExpectedResults like_plain = plain_as_reference(p, plain, expected);
  for (int ranks = 1; ranks <= kMaxRanks; ++ranks) {
    INFO("ranks " << ranks);
    const HostForwardBackwardResult ours = run_with_ranks(p, in, ranks);
    check_all("vs reference", check_results(p, ours, expected));
    check_all("vs plain call", check_results(p, ours, like_plain));
  }
}

TEST_CASE("context parallel on one GPU: 1 to 4 ranks vs the float64 reference and the plain call",
          "[gpu][context_parallel]") {
  require_gpu();
  uint64_t seed = 4100;
  for (DType dtype : kDtypes) {
    for (const auto& [seq_q, seq_k] : kLengths) {
      for (Mask mask : kMasks) {
        for (Layout layout : kLayouts) {
          // Grouped-query attention: 4 query heads over 2 kv heads, 2 batch entries.
          const Problem p = make_problem(dtype, 64, mask, seq_q, seq_k, 2, 4, 2, layout);
          ++seed;
          DYNAMIC_SECTION(describe(p)) { check_rank_counts(p, seed); }
        }
      }
    }
  }
}

TEST_CASE("context parallel on one GPU: windows, softcap and ALiBi, MQA",
          "[gpu][context_parallel]") {
  require_gpu();
  uint64_t seed = 4300;
  for (DType dtype : kDtypes) {
    for (Mask mask : kMasks) {
      // A window bounded on both sides reaches a few chunks only: whole ranks' steps drop out.
      Problem window = make_problem(dtype, 64, mask, 1023, 1023, 1, 4, 2, Layout::bhsd);
      window.window = {100, 40};
      ++seed;
      DYNAMIC_SECTION("window " << describe(window)) { check_rank_counts(window, seed); }
      // Bounded on the right only: the default kernels, the causal bound moved.
      Problem right = make_problem(dtype, 64, mask, 113, 1023, 1, 4, 1, Layout::bshd);
      right.window = {-1, 17};
      ++seed;
      DYNAMIC_SECTION("right-bounded window, MQA " << describe(right)) {
        check_rank_counts(right, seed);
      }
    }
    Problem variants = make_problem(dtype, 64, Mask::causal_bottom_right, 1023, 113, 2, 4, 2,
                                    Layout::bshd);
    variants.softcap = 30.0;
    variants.alibi_slopes = alibi_default_slopes(variants.shape.heads);
    ++seed;
    DYNAMIC_SECTION("softcap and ALiBi " << describe(variants)) {
      check_rank_counts(variants, seed);
    }
  }
}

TEST_CASE("context parallel on one GPU: the deterministic backward is the same bits twice",
          "[gpu][context_parallel][deterministic]") {
  require_gpu();
  Problem p = make_problem(DType::bf16, 64, Mask::causal_bottom_right, 1023, 1023, 1, 4, 2,
                           Layout::bhsd);
  p.deterministic = true;
  const CaseInputs in = make_inputs(p, 4400);
  const HostForwardBackwardResult first = run_with_ranks(p, in, 3);
  const HostForwardBackwardResult again = run_with_ranks(p, in, 3);
  CHECK(again.backward.dq == first.backward.dq);
  CHECK(again.backward.dk == first.backward.dk);
  CHECK(again.backward.dv == first.backward.dv);
  Problem with_ranks = p;
  with_ranks.ranks = 3;
  check_all("vs reference", check_results(with_ranks, first, expected_results(p, in)));
}

TEST_CASE("context parallel on one GPU: a NaN in V reaches O through the merges and fails",
          "[gpu][context_parallel]") {
  require_gpu();
  const Problem p = make_problem(DType::fp16, 64, Mask::none, 113, 113, 1, 2, 2, Layout::bhsd);
  CaseInputs in = make_inputs(p, 4500);
  const ExpectedResults expected = expected_results(p, in);  // of the finite inputs
  // Key 50 of kv head 0: every element NaN (0xFF bytes are a NaN in every dtype). Without a
  // mask every query of head 0 sees it, whichever rank holds it.
  const int64_t key = 50;
  const size_t row_bytes = size_t(p.shape.head_dim) * dtype_size(p.dtype);
  std::memset(in.v_bytes.data() + size_t(key) * row_bytes, 0xFF, row_bytes);
  Problem with_ranks = p;
  with_ranks.ranks = 3;
  const HostForwardResult ours = run_forward(with_ranks, in.q_bytes, in.k_bytes, in.v_bytes,
                                             context_parallel::device_passes(with_ranks));
  const std::vector<double> out = q_side_values(p, ours.out);  // [B=1, H=2, S, D]
  const auto head_elements = size_t(p.shape.seq_q * p.shape.head_dim);
  const auto nans_in = [&](size_t head) {
    return std::count_if(out.begin() + head * head_elements,
                         out.begin() + (head + 1) * head_elements,
                         [](double x) { return std::isnan(x); });
  };
  CHECK(size_t(nans_in(0)) == head_elements);  // every row of head 0
  CHECK(nans_in(1) == 0);                      // no row of head 1
  CHECK_FALSE(check_tensor("O", p.dtype, out, expected.base_fwd.out, expected.ref_fwd.out).pass);
}

// --- Arguments --------------------------------------------------------------------------------

TEST_CASE("context parallel on one GPU and the diagonal offset refuse what they do not serve",
          "[gpu][context_parallel][arguments]") {
  require_gpu();
  const Problem p = make_problem(DType::fp16, 64, Mask::causal_bottom_right, 100, 100, 1, 4, 2,
                                 Layout::bhsd);
  const DeviceProblem device(p);
  const DeviceBuffer workspace(context_parallel::single_gpu_forward_workspace_size(
      p.shape, p.dtype, 2));
  ForwardArgs args = device.forward_args();
  args.workspace = workspace.data();
  args.workspace_bytes = workspace.bytes();
  using Kind = Error::Kind;
  SECTION("the valid arguments run") {
    CHECK_NOTHROW(context_parallel::single_gpu_forward(args, 2));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
  }
  SECTION("ranks below 1") {
    require_error([&] { context_parallel::single_gpu_forward(args, 0); }, Kind::invalid_argument,
                  "ranks");
    require_error([&] { context_parallel::single_gpu_passes(-1); }, Kind::invalid_argument,
                  "ranks");
  }
  SECTION("a workspace one byte too small") {
    args.workspace_bytes -= 1;
    require_error([&] { context_parallel::single_gpu_forward(args, 2); }, Kind::invalid_argument,
                  "workspace_bytes");
  }
  SECTION("key splits above 1") {
    args.splits = 2;
    require_error([&] { context_parallel::single_gpu_forward(args, 2); }, Kind::unsupported,
                  "splits");
  }
  SECTION("a diagonal offset of its own") {
    args.diagonal_offset = 0;
    require_error([&] { context_parallel::single_gpu_forward(args, 2); }, Kind::invalid_argument,
                  "diagonal_offset");
  }
  SECTION("a backward workspace one byte too small") {
    BackwardArgs backward_args = device.backward_args();
    const DeviceBuffer backward_workspace(
        context_parallel::single_gpu_backward_workspace_size(p.shape, p.dtype, 2));
    backward_args.workspace = backward_workspace.data();
    backward_args.workspace_bytes = backward_workspace.bytes() - 1;
    require_error([&] { context_parallel::single_gpu_backward(backward_args, 2); },
                  Kind::invalid_argument, "workspace_bytes");
  }
  SECTION("forward() and backward(): an offset beyond +-2^32") {
    ForwardArgs far = device.forward_args();
    far.diagonal_offset = (int64_t{1} << 32) + 1;
    require_error([&] { forward(far); }, Kind::invalid_argument, "diagonal_offset");
    BackwardArgs far_backward = device.backward_args();
    far_backward.diagonal_offset = -(int64_t{1} << 32) - 1;
    require_error([&] { backward(far_backward); }, Kind::invalid_argument, "diagonal_offset");
  }
  SECTION("forward(): an offset with cache_seqlens or paged K/V") {
    const Problem decode = make_problem(DType::fp16, 64, Mask::causal_bottom_right, 1, 300, 2, 4,
                                        2, Layout::bhsd);
    const DeviceProblem decode_device(decode);
    const std::vector<int32_t> lengths{100, 300};
    DeviceBuffer device_lengths(lengths.size() * sizeof(int32_t));
    device_lengths.copy_from_host(lengths.data());
    check_cuda(cudaDeviceSynchronize(), "uploading the key lengths");
    ForwardArgs with_lengths = decode_device.forward_args();
    with_lengths.cache_seqlens = device_lengths.as<const int32_t>();
    with_lengths.diagonal_offset = 5;
    require_error([&] { forward(with_lengths); }, Kind::unsupported, "diagonal_offset");
  }
  SECTION("forward() and backward(): an offset with a varlen batch") {
    const Problem varlen =
        make_varlen_problem(DType::fp16, 64, Mask::causal_bottom_right, {5, 9}, {5, 9}, 4, 2);
    const DeviceProblem varlen_device(varlen);
    ForwardArgs forward_varlen = varlen_device.forward_args();
    forward_varlen.diagonal_offset = 0;
    require_error([&] { forward(forward_varlen); }, Kind::unsupported, "diagonal_offset");
    BackwardArgs backward_varlen = varlen_device.backward_args();
    backward_varlen.diagonal_offset = 0;
    require_error([&] { backward(backward_varlen); }, Kind::unsupported, "diagonal_offset");
    ForwardArgs ring_varlen = forward_varlen;
    ring_varlen.diagonal_offset.reset();
    ring_varlen.workspace = workspace.data();
    ring_varlen.workspace_bytes = workspace.bytes();
    require_error([&] { context_parallel::single_gpu_forward(ring_varlen, 2); },
                  Kind::unsupported, "varlen");
  }
}

}  // namespace
}  // namespace cuflash::gpu_test
