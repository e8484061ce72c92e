// GPU tests of the split-KV forward (ctest label `gpu`): short queries against long keys with
// grouped-query head packing, forced and automatic key splits against the unsplit result and
// the float64 reference, merge_attention_partials() on hand-made partials, and the argument
// checks of splits and the forward workspace.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

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

// O and LSE of the GPU forward against the float64 reference (the backward is not the split
// kernel's: the pairwise matrix covers it).
void check_forward(const Problem& c, uint64_t seed) {
  INFO(describe(c) << " splits=" << c.splits);
  for (const TensorCheck& check : run_and_check_forward(c, seed)) {
    INFO(check.report);
    CHECK(check.pass);
  }
}

// A split result equals the unsplit one up to the rounding of the merge: O within a few units
// in the last place of the dtype (|O| <= max |V| of standard-normal values), LSE within 1e-5
// relative (fp32 sums in another order).
void check_same_as_unsplit(const Problem& c, uint64_t seed) {
  INFO(describe(c) << " splits=" << c.splits << " vs splits=1");
  const CaseInputs in = make_inputs(c, seed);
  Problem unsplit = c;
  unsplit.splits = 1;
  const HostForwardResult a = run_forward(c, in.q_bytes, in.k_bytes, in.v_bytes);
  const HostForwardResult b = run_forward(unsplit, in.q_bytes, in.k_bytes, in.v_bytes);
  const std::vector<double> oa = q_side_values(c, a.out);
  const std::vector<double> ob = q_side_values(c, b.out);
  const double ulp = c.dtype == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;  // at |O| ~ 1
  CHECK(max_abs_difference(oa, ob) <= 4 * ulp);
  REQUIRE(a.lse.size() == b.lse.size());
  for (size_t i = 0; i < a.lse.size(); ++i) {
    INFO("lse row " << i << ": " << a.lse[i] << " vs " << b.lse[i]);
    if (std::isinf(b.lse[i])) {
      CHECK(a.lse[i] == b.lse[i]);
    } else {
      CHECK(std::abs(a.lse[i] - b.lse[i]) <= 1e-5 * std::max(1.0f, std::abs(b.lse[i])));
    }
  }
}

// Runs the forward of `c` once and checks that it split the keys: its last launch merges the
// partials (the split kernel's and the sm90 forward's key splits alike).
void check_keys_split(const Problem& c, uint64_t seed) {
  const CaseInputs in = make_inputs(c, seed);
  LaunchRecord record;
  run_forward(c, in.q_bytes, in.k_bytes, in.v_bytes);
  REQUIRE(!record.launches().empty());
  INFO(record.launches().size() << " launches, the last " << record.launches().back().kernel);
  CHECK(starts_with(record.launches().back().kernel, "split::merge_partials_kernel<"));
}

// Runs the forward of `c` once and, where the plan's choices are known
// (launch_choices_known_here()), checks that the split kernel ran on `config`
// ("split::SplitConfig<64, 1, 4>").
void check_split_config(const Problem& c, uint64_t seed, const std::string& config) {
  if (!launch_choices_known_here()) {
    WARN("the split kernel's configuration is not checked: it is known on 132 SMs");
    return;
  }
  const CaseInputs in = make_inputs(c, seed);
  LaunchRecord record;
  run_forward(c, in.q_bytes, in.k_bytes, in.v_bytes);
  REQUIRE(!record.launches().empty());
  const std::string& kernel = record.launches().front().kernel;
  INFO("the first launch: " << kernel);
  CHECK(starts_with(kernel, "split::split_forward_kernel<"));
  CHECK(kernel.find(", " + config + ", ") != std::string::npos);
}

Problem decode_case(DType dtype, int64_t head_dim, Mask mask, int64_t seq_q, int64_t seq_k,
                    int64_t batch, int64_t heads, int64_t heads_kv, Layout layout,
                    int64_t splits) {
  Problem c = make_problem(dtype, head_dim, mask, seq_q, seq_k, batch, heads, heads_kv, layout);
  c.splits = std::min(splits, max_forward_splits(c.shape));
  return c;
}

TEST_CASE("split-KV: splits 1, 2, 7 and automatic vs the reference and the unsplit result",
          "[gpu][split]") {
  require_gpu();
  uint64_t seed = 7000;
  for (DType dtype : {DType::fp16, DType::bf16}) {
    for (int64_t splits : {1, 2, 7, 0}) {
      const Problem c = decode_case(dtype, 128, Mask::causal_bottom_right, 1, 1023, 2, 8, 2,
                                    Layout::bshd, splits);
      DYNAMIC_SECTION(describe(c) << " splits=" << splits) {
        check_forward(c, seed);
        if (splits != 1) check_same_as_unsplit(c, seed);
      }
      ++seed;
    }
  }
}

// GQA groups 1, 4, 8 and MQA, seq_q 1, 3, 64 (up to 512 packed rows: several row blocks),
// odd seq_k, both layouts, the three masks and every head_dim, each with the automatic split
// count and with 7 splits (or as many as there are key blocks).
TEST_CASE("split-KV: short queries x long keys x GQA groups vs the float64 reference",
          "[gpu][split]") {
  require_gpu();
  struct Heads {
    int64_t heads, heads_kv;
  };
  const std::array<Heads, 4> groups{{{4, 4}, {8, 2}, {16, 2}, {8, 1}}};  // 1, 4, 8, MQA
  const std::array<int64_t, 3> seq_qs{1, 3, 64};
  const std::array<int64_t, 4> seq_ks{1, 113, 1023, 8191};
  const std::array<Mask, 3> masks{Mask::none, Mask::causal_bottom_right, Mask::causal_top_left};
  // The tuned head dims and, between them, padded ones (on the next tuned one's kernels).
  const std::vector<int> head_dims{32, 64, 128, 40, 96, 192, 256, 8, 136, 248};
  uint64_t seed = 7100;
  int index = 0;
  for (int64_t seq_q : seq_qs) {
    for (int64_t seq_k : seq_ks) {
      for (int64_t splits : {0, 7}) {
        const Heads h = groups[index % groups.size()];
        const Problem c = decode_case(index % 2 ? DType::bf16 : DType::fp16,
                                      head_dims[index % head_dims.size()], masks[index % 3],
                                      seq_q, seq_k, 2, h.heads, h.heads_kv,
                                      index % 2 ? Layout::bhsd : Layout::bshd, splits);
        DYNAMIC_SECTION("case " << index << ": " << describe(c) << " splits=" << c.splits) {
          check_forward(c, seed);
        }
        ++index;
        ++seed;
      }
    }
  }
}

// 17 to 32 packed rows run on the Medium configuration (two row groups of two warps): one
// decoded token of 32 query heads on one kv head, 20 heads (rows past the group's end in the
// block) and 2 tokens of 12 heads; the head dims whose Wide block has 64 rows.
TEST_CASE("split-KV: 17 to 32 packed rows per kv head vs the float64 reference",
          "[gpu][split]") {
  require_gpu();
  struct Rows {
    int64_t heads, seq_q;
  };
  uint64_t seed = 7300;
  int index = 0;
  for (const Rows r : {Rows{32, 1}, Rows{20, 1}, Rows{12, 2}}) {
    for (int64_t head_dim : {64, 128, 96}) {
      for (int64_t splits : {0, 3}) {
        const Problem c = decode_case(index % 2 ? DType::bf16 : DType::fp16, head_dim,
                                      Mask::causal_bottom_right, r.seq_q, 2049, 2, r.heads, 1,
                                      index % 3 ? Layout::bhsd : Layout::bshd, splits);
        DYNAMIC_SECTION(describe(c) << " splits=" << c.splits) { check_forward(c, seed); }
        ++index;
        ++seed;
      }
    }
  }
}

// Head_dim 64's Narrow rows (<= 16 a kv head) on 600 kv heads: more than one wave of four CTAs
// an SM on 132 SMs, so the plan runs them on NarrowDeep (four stages, three CTAs: split_count.h),
// which the smaller grids of the other cases do not reach; head_dim 40 on the same kernels,
// padded. The automatic count, one split and three.
TEST_CASE("split-KV: head_dim 64's deep pipeline on grids of several waves vs the reference",
          "[gpu][split]") {
  require_gpu();
  struct Heads {
    int64_t heads, heads_kv;
  };
  uint64_t seed = 7330;
  int index = 0;
  for (const Heads h : {Heads{4, 4}, Heads{16, 4}}) {
    for (int64_t head_dim : {64, 40}) {
      for (int64_t splits : {0, 1, 3}) {
        const Problem c =
            decode_case(index % 2 ? DType::bf16 : DType::fp16, head_dim,
                        index % 3 ? Mask::causal_bottom_right : Mask::none, index % 2 ? 1 : 3, 517,
                        150, h.heads, h.heads_kv, index % 2 ? Layout::bhsd : Layout::bshd, splits);
        DYNAMIC_SECTION(describe(c) << " splits=" << c.splits) {
          check_forward(c, seed);
          check_split_config(c, seed, "split::SplitConfig<64, 1, 4>");  // NarrowDeep
          if (splits == 3) check_same_as_unsplit(c, seed);
        }
        ++index;
        ++seed;
      }
    }
  }
}

TEST_CASE("split-KV: a small grid over long keys (B=1, H=8, 300 x 16384) splits and is right",
          "[gpu][split]") {
  require_gpu();
  const Problem c = decode_case(DType::bf16, 64, Mask::causal_bottom_right, 300, 16384, 1, 8, 8,
                                Layout::bhsd, 0);
  CHECK(forward_workspace_size(c.shape, c.dtype, 0) > 0);  // the automatic count splits
  check_keys_split(c, 7300);
  check_forward(c, 7300);
}

// On an H100/H200 these grids are split by the sm90 forward itself (the key_splits kernel: each
// tile's key blocks in even shares, empty ones under the top-left mask, where 300 queries see
// at most 300 of the 9000 keys), elsewhere by the split kernel; either way the automatic count
// splits and the merge gives the unsplit result.
TEST_CASE("split-KV: small grids over long keys at head dims 64 to 256 match the reference",
          "[gpu][split]") {
  require_gpu();
  uint64_t seed = 7350;
  int index = 0;
  for (int64_t head_dim : {64, 128, 192, 256}) {
    for (Mask mask : {Mask::none, Mask::causal_bottom_right, Mask::causal_top_left}) {
      const DType dtype = index % 2 ? DType::fp16 : DType::bf16;
      const Problem c = decode_case(dtype, head_dim, mask, 300, 9000, 1, 4, 2,
                                    index % 3 ? Layout::bhsd : Layout::bshd, 0);
      DYNAMIC_SECTION(describe(c)) {
        CHECK(forward_workspace_size(c.shape, c.dtype, 0) > 0);
        check_keys_split(c, seed);
        check_forward(c, seed);
        check_same_as_unsplit(c, seed);
      }
      ++index;
      ++seed;
    }
  }
}

TEST_CASE("split-KV: decoding at B=1 splits automatically, is right and is reproducible",
          "[gpu][split]") {
  require_gpu();
  const Problem c = decode_case(DType::fp16, 128, Mask::causal_bottom_right, 1, 8191, 1, 32, 8,
                                Layout::bhsd, 0);
  CHECK(forward_workspace_size(c.shape, c.dtype, 0) > 0);
  check_keys_split(c, 7400);
  const CaseInputs in = make_inputs(c, 7400);
  const HostForwardResult first = run_forward(c, in.q_bytes, in.k_bytes, in.v_bytes);
  for (int run = 0; run < 5; ++run) {
    const HostForwardResult again = run_forward(c, in.q_bytes, in.k_bytes, in.v_bytes);
    CHECK(again.out == first.out);
    CHECK(again.lse == first.lse);
  }
  check_forward(c, 7400);
}

// --- merge_attention_partials ------------------------------------------------------------------

TEST_CASE("merge_attention_partials combines partials, skipping the empty ones", "[gpu][split]") {
  require_gpu();
  constexpr int64_t kSplits = 3, kRows = 4, kDim = 8;
  const float inf = std::numeric_limits<float>::infinity();
  // Row 0: three partials; row 1: one empty (-inf) and one +inf partial among them; row 2: one
  // partial only; row 3: none at all.
  const std::vector<float> lse{0.5f, 1.5f, 2.0f, -inf,   // split 0, rows 0..3
                               -1.0f, -inf, -inf, inf,   // split 1
                               2.5f, inf, -inf, -inf};   // split 2
  std::vector<float> out(kSplits * kRows * kDim);
  for (size_t i = 0; i < out.size(); ++i) out[i] = float(int(i % 7) - 3) * 0.25f;

  DeviceBuffer partial_out(out.size() * sizeof(float));
  DeviceBuffer partial_lse(lse.size() * sizeof(float));
  DeviceBuffer merged(kRows * kDim * sizeof(float));
  DeviceBuffer merged_lse(kRows * sizeof(float));
  partial_out.copy_from_host(out.data());
  partial_lse.copy_from_host(lse.data());
  MergePartialsArgs args;
  args.splits = kSplits;
  args.batch = 1;
  args.heads = 2;
  args.seq_q = 2;
  args.head_dim = kDim;
  args.dtype = DType::fp32;
  args.partial_out = partial_out.as<float>();
  args.partial_lse = partial_lse.as<float>();
  args.out = make_tensor_ref(merged.data(), Layout::bhsd, 1, 2, 2, kDim);
  args.lse = merged_lse.as<float>();
  merge_attention_partials(args);
  std::vector<float> got(kRows * kDim);
  std::vector<float> got_lse(kRows);
  merged.copy_to_host(got.data());
  merged_lse.copy_to_host(got_lse.data());
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);

  for (int64_t row = 0; row < kRows; ++row) {
    INFO("row " << row);
    double total = 0.0;
    double max_lse = -inf;
    for (int64_t s = 0; s < kSplits; ++s) {
      const double l = lse[s * kRows + row];
      if (std::isfinite(l)) max_lse = std::max(max_lse, l);
    }
    for (int64_t s = 0; s < kSplits; ++s) {
      const double l = lse[s * kRows + row];
      if (std::isfinite(l)) total += std::exp(l - max_lse);
    }
    if (total == 0.0) {
      CHECK(got_lse[row] == inf);
      for (int64_t d = 0; d < kDim; ++d) CHECK(got[row * kDim + d] == 0.f);
      continue;
    }
    const double expected_lse = max_lse + std::log(total);
    CHECK(got_lse[row] == Approx(expected_lse).epsilon(1e-5));
    for (int64_t d = 0; d < kDim; ++d) {
      double expected = 0.0;
      for (int64_t s = 0; s < kSplits; ++s) {
        const double l = lse[s * kRows + row];
        if (std::isfinite(l)) expected += std::exp(l - expected_lse) * out[(s * kRows + row) * kDim + d];
      }
      CHECK(got[row * kDim + d] == Approx(expected).margin(1e-5));
    }
  }
}

// --- Argument checks -----------------------------------------------------------------------------

TEST_CASE("forward refuses bad key splits and a missing split workspace", "[gpu][arguments]") {
  require_gpu();
  Problem c = make_problem(DType::bf16, 64, Mask::none, 1, 200, 1, 4, 2, Layout::bhsd);
  c.splits = 2;
  const DeviceProblem device(c);
  REQUIRE(max_forward_splits(c.shape) == 4);  // ceil(200 / 64)
  SECTION("negative") {
    ForwardArgs args = device.forward_args();
    args.splits = -1;
    require_error([&] { forward(args); }, Error::Kind::invalid_argument, "splits");
  }
  SECTION("more than the key blocks") {
    ForwardArgs args = device.forward_args();
    args.splits = 5;
    require_error([&] { forward(args); }, Error::Kind::invalid_argument, "key blocks");
  }
  SECTION("forced splits without a workspace") {
    ForwardArgs args = device.forward_args();
    args.workspace = nullptr;
    require_error([&] { forward(args); }, Error::Kind::invalid_argument, "workspace");
  }
  SECTION("a split workspace one byte too small") {
    ForwardArgs args = device.forward_args();
    args.workspace_bytes = forward_workspace_size(c.shape, c.dtype, 2) - 1;
    require_error([&] { forward(args); }, Error::Kind::invalid_argument,
                  "forward_workspace_size");
  }
  SECTION("fp32 does not split") {
    require_error([&] { forward_workspace_size(c.shape, DType::fp32, 2); },
                  Error::Kind::unsupported, "fp32");
  }
  SECTION("an automatic count without a workspace runs unsplit") {
    ForwardArgs args = device.forward_args();
    args.splits = 0;
    args.workspace = nullptr;
    args.workspace_bytes = 0;
    forward(args);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
  }
}

}  // namespace
}  // namespace cuflash::gpu_test
