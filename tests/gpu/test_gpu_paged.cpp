// GPU tests of the paged K/V cache and per-sequence key lengths on the split-KV forward (ctest
// label `gpu`): paged results equal the contiguous ones bit for bit (the same keys, in the same
// order, through the same arithmetic), key lengths against the float64 reference, and the
// argument checks of both.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cuflash/attention.h"
#include "cuflash/device_buffer.h"
#include "cuflash/error.h"
#include "cuflash/host_runner.h"
#include "cuflash/reference/attention_ref.h"
#include "cuflash/reference/baseline.h"
#include "gpu_test_util.h"

namespace cuflash::gpu_test {
namespace {

struct Heads {
  int64_t heads, heads_kv;
};
const std::array<Heads, 4> kGroups{{{4, 4}, {8, 2}, {16, 2}, {8, 1}}};  // GQA 1, 4, 8 and MQA

// The contiguous run a paged one must equal bit for bit: the same problem without pages, on
// the split kernel too. Unsplit or with automatic splits, a shape beyond the plan's short-query
// bound (a Wide block of rows or of queries: 64, 32 above head_dim 128) would run contiguous on
// the tiled kernels; key lengths of seq_k, the same attention, keep it on the split kernel.
Problem contiguous_twin(const Problem& paged) {
  Problem c = paged;
  c.page_size = 0;
  if (c.splits < 2 && c.cache_seqlens.empty()) {
    c.cache_seqlens.assign(static_cast<size_t>(c.shape.batch), c.shape.seq_k);
  }
  return c;
}

void check_bitwise_equal(const Problem& paged, uint64_t seed) {
  INFO(describe(paged) << " page_size=" << paged.page_size << " splits=" << paged.splits);
  const CaseInputs in = make_inputs(paged, seed);
  const Problem contiguous = contiguous_twin(paged);
  const HostForwardResult a = run_forward(paged, in.q_bytes, in.k_bytes, in.v_bytes);
  const HostForwardResult b = run_forward(contiguous, in.q_bytes, in.k_bytes, in.v_bytes);
  REQUIRE(a.out.size() == b.out.size());
  CHECK(std::memcmp(a.out.data(), b.out.data(), a.out.size()) == 0);
  REQUIRE(a.lse.size() == b.lse.size());
  CHECK(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0);
}

// O and LSE of the GPU forward against the float64 reference and the low-precision baseline,
// both of which follow the key lengths.
void check_against_reference(const Problem& c, uint64_t seed) {
  INFO(describe(c) << " page_size=" << c.page_size << " splits=" << c.splits);
  for (const TensorCheck& check : run_and_check_forward(c, seed)) {
    INFO(check.report);
    CHECK(check.pass);
  }
}

TEST_CASE("paged K/V: page sizes 16 to 256 x splits 1, 3, auto equal contiguous bit for bit",
          "[gpu][paged]") {
  require_gpu();
  const std::array<int64_t, 3> seq_qs{1, 3, 64};
  // The tuned head dims and, between them, padded ones (on the next tuned one's kernels).
  const std::vector<int> head_dims{32, 64, 128, 40, 96, 192, 256, 8, 136, 248};
  uint64_t seed = 9000;
  int index = 0;
  for (int64_t page_size : {16, 32, 64, 128, 256}) {
    for (int64_t splits : {1, 3, 0}) {
      const Heads h = kGroups[index % kGroups.size()];
      Problem c = make_problem(index % 2 ? DType::bf16 : DType::fp16,
                               head_dims[index % head_dims.size()],
                               index % 3 ? Mask::causal_bottom_right : Mask::none,
                               seq_qs[index % seq_qs.size()], 1000 + 37 * index, 2, h.heads,
                               h.heads_kv, index % 2 ? Layout::bhsd : Layout::bshd);
      c.splits = splits;
      c.page_size = page_size;
      DYNAMIC_SECTION("case " << index << ": " << describe(c) << " page " << page_size
                              << " splits " << splits) {
        check_bitwise_equal(c, seed);
        if (index % 5 == 0) check_against_reference(c, seed);
      }
      ++index;
      ++seed;
    }
  }
}

// Pages smaller than a key block (16, 32 keys) take their own whole-block load at the head dims
// whose rows the split kernel's threads divide (32, 64, 128, 256); the tail block the checked one.
TEST_CASE("paged K/V: pages of 16 and 32 keys at head dims 32 to 256 equal contiguous bit for bit",
          "[gpu][paged]") {
  require_gpu();
  uint64_t seed = 9500;
  int index = 0;
  for (int64_t page_size : {16, 32}) {
    for (int head_dim : {32, 64, 128, 256}) {
      const Heads h = kGroups[index % kGroups.size()];
      Problem c = make_problem(index % 2 ? DType::bf16 : DType::fp16, head_dim,
                               Mask::causal_bottom_right, index % 3 == 0 ? 4 : 1,
                               1100 + 13 * index, 3, h.heads, h.heads_kv,
                               index % 2 ? Layout::bshd : Layout::bhsd);
      c.page_size = page_size;
      DYNAMIC_SECTION("case " << index << ": " << describe(c) << " page " << page_size) {
        check_bitwise_equal(c, seed);
        if (index % 3 == 0) check_against_reference(c, seed);
      }
      ++index;
      ++seed;
    }
  }
}

TEST_CASE("cache lengths 1, odd and seq_k vs the reference, contiguous and paged",
          "[gpu][paged]") {
  require_gpu();
  const std::array<int64_t, 3> seq_qs{1, 3, 64};
  const std::array<Mask, 3> masks{Mask::none, Mask::causal_bottom_right, Mask::causal_top_left};
  uint64_t seed = 9100;
  int index = 0;
  for (const Heads& h : kGroups) {
    for (int64_t seq_q : seq_qs) {
      const int64_t seq_k = 2000 + 17 * index;
      Problem c = make_problem(index % 2 ? DType::bf16 : DType::fp16, index % 2 ? 128 : 64,
                               masks[index % 3], seq_q, seq_k, 3, h.heads, h.heads_kv,
                               Layout::bshd);
      c.cache_seqlens = {1, 777 + 2 * index, seq_k};
      c.splits = index % 2 ? 3 : 0;
      DYNAMIC_SECTION("case " << index << ": " << describe(c) << " splits " << c.splits) {
        check_against_reference(c, seed);
        Problem paged = c;
        paged.page_size = index % 2 ? 16 : 64;
        check_bitwise_equal(paged, seed);
      }
      ++index;
      ++seed;
    }
  }
}

TEST_CASE("forward refuses bad pages and takes paged and length arguments only on fp16/bf16",
          "[gpu][arguments]") {
  require_gpu();
  const Problem c = make_problem(DType::fp16, 64, Mask::none, 1, 300, 2, 8, 2, Layout::bhsd);
  const DeviceProblem device(c);
  const DeviceBuffer pool(size_t(64) * 16 * 2 * 64 * 2);  // 64 pages of 16 keys
  const DeviceBuffer table(size_t(2) * 19 * sizeof(int32_t));
  const auto paged_args = [&] {
    ForwardArgs args = device.forward_args();
    args.paged.k_pages = pool.data();
    args.paged.v_pages = pool.data();
    args.paged.num_pages = 64;
    args.paged.page_size = 16;
    args.paged.block_table = table.as<const int32_t>();
    args.paged.block_table_stride = 19;  // ceil(300 / 16)
    return args;
  };
  SECTION("a page size that is not a power of two") {
    ForwardArgs args = paged_args();
    args.paged.page_size = 24;
    require_error([&] { forward(args); }, Error::Kind::invalid_argument, "page_size");
  }
  SECTION("a page size below 16") {
    ForwardArgs args = paged_args();
    args.paged.page_size = 8;
    require_error([&] { forward(args); }, Error::Kind::invalid_argument, "page_size");
  }
  SECTION("a block table too narrow for seq_k") {
    ForwardArgs args = paged_args();
    args.paged.block_table_stride = 18;
    require_error([&] { forward(args); }, Error::Kind::invalid_argument,
                  "block_table_stride");
  }
  SECTION("a null pool") {
    ForwardArgs args = paged_args();
    args.paged.v_pages = nullptr;
    require_error([&] { forward(args); }, Error::Kind::invalid_argument, "v_pages");
  }
  SECTION("fp32") {
    const Problem c32 = make_problem(DType::fp32, 64, Mask::none, 1, 300, 2, 8, 2, Layout::bhsd);
    const DeviceProblem device32(c32);
    ForwardArgs args = device32.forward_args();
    args.cache_seqlens = table.as<const int32_t>();
    require_error([&] { forward(args); }, Error::Kind::unsupported, "fp16 or bf16");
  }
  SECTION("the host runner refuses the backward") {
    Problem paged = c;
    paged.page_size = 16;
    const CaseInputs in = make_inputs(paged, 1);
    require_error(
        [&] { run_forward_backward(paged, in.q_bytes, in.k_bytes, in.v_bytes, in.dout_bytes); },
        Error::Kind::invalid_argument, "forward only");
  }
}

}  // namespace
}  // namespace cuflash::gpu_test
