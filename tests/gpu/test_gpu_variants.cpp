// GPU tests of the attention variants (ctest label `gpu`): sliding windows, softcap and ALiBi,
// alone and together, against the float64 reference, forward and backward, on every dtype and
// compiled head_dim, both causal alignments and none, GQA/MQA and odd lengths. The tagged
// [matrix] cases run twice in ctest: on the kernels the device picks, and again with
// CUFLASH_DISABLE_WGMMA=1 on the portable mma.sync kernels (tests/CMakeLists.txt).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cuflash/attention.h"
#include "cuflash/device_buffer.h"
#include "cuflash/error.h"
#include "gpu_test_util.h"

namespace cuflash::gpu_test {
namespace {

// --- The variants matrix ------------------------------------------------------------------------
//
// Factors: dtype (3) x head_dim (every compiled one) x mask (3) x window (5) x score
// modification (4) x (seq_q, seq_k) (5) x heads (4), covered pairwise as in the main matrix.

constexpr std::array<DType, 3> kDtypes{DType::fp32, DType::fp16, DType::bf16};
const std::vector<int> kHeadDims{32, 64, 128};  // the other head dims: named cases below
constexpr std::array<Mask, 3> kMasks{Mask::none, Mask::causal_bottom_right, Mask::causal_top_left};
// The diagonal alone; one key each side; wider than any sequence here; each side unbounded.
constexpr std::array<Window, 5> kWindows{
    {{0, 0}, {1, 1}, {5000, 5000}, {-1, 37}, {150, -1}}};
enum class ScoreMods { none, softcap, alibi, both };
constexpr std::array<ScoreMods, 4> kScoreMods{ScoreMods::none, ScoreMods::softcap,
                                              ScoreMods::alibi, ScoreMods::both};
// Odd lengths; Sq != Sk both ways (Sq > Sk leaves rows outside every bottom-right window).
constexpr std::array<std::array<int64_t, 2>, 5> kSeqPairs{
    {{1, 1}, {1, 113}, {113, 203}, {1023, 1024}, {239, 77}}};
// ALiBi with 6 heads (not a power of two) and 8; MHA, GQA, MQA.
constexpr std::array<std::array<int64_t, 2>, 4> kHeads{{{6, 6}, {6, 3}, {8, 2}, {8, 1}}};

constexpr double kSoftcap = 5.0;
// With a softcap, Q is scaled so that scores reach several times the cap and tanh saturates.
constexpr double kSaturatingQueryScale = 10.0;

const std::vector<int> kFactorLevels{int(kDtypes.size()),    int(kHeadDims.size()),
                                     int(kMasks.size()),     int(kWindows.size()),
                                     int(kScoreMods.size()), int(kSeqPairs.size()),
                                     int(kHeads.size())};

Problem variant_case(const DesignRow& row) {
  const auto [seq_q, seq_k] = kSeqPairs[row[5]];
  const auto [heads, heads_kv] = kHeads[row[6]];
  Problem p = make_problem(kDtypes[row[0]], kHeadDims[row[1]], kMasks[row[2]], seq_q, seq_k, 1,
                           heads, heads_kv, Layout::bhsd);
  p.window = kWindows[row[3]];
  const ScoreMods mods = kScoreMods[row[4]];
  if (mods == ScoreMods::softcap || mods == ScoreMods::both) p.softcap = kSoftcap;
  if (mods == ScoreMods::alibi || mods == ScoreMods::both) {
    p.alibi_slopes = alibi_default_slopes(heads);
  }
  return p;
}

const std::vector<Problem>& variant_cases() {
  static const std::vector<Problem> cases = [] {
    std::vector<Problem> result;
    for (const DesignRow& row : pairwise_design(kFactorLevels)) result.push_back(variant_case(row));
    std::cout << "variants design: " << result.size() << " cases\n";
    return result;
  }();
  return cases;
}

void check_variant(const Problem& c, uint64_t seed) {
  INFO(describe(c));
  CaseInputs in = make_inputs(c, seed);
  if (c.softcap > 0) scale_queries(c, in, kSaturatingQueryScale);
  for (const TensorCheck& check : run_and_check(c, in)) {
    INFO(check.report);
    CHECK(check.pass);
  }
}

void run_variants(DType dtype) {
  require_gpu();
  const std::vector<Problem>& cases = variant_cases();
  for (size_t index = 0; index < cases.size(); ++index) {
    if (cases[index].dtype != dtype) continue;
    DYNAMIC_SECTION("case " << index << ": " << describe(cases[index])) {
      check_variant(cases[index], 1000 + index);
    }
  }
}

TEST_CASE("variants design covers every pair of factor values", "[gpu][matrix][variants]") {
  require_gpu();
  CHECK(covers_all_pairs(pairwise_design(kFactorLevels), kFactorLevels));
}

TEST_CASE("variants fp32: window, softcap, ALiBi vs float64 reference",
          "[gpu][matrix][variants]") {
  run_variants(DType::fp32);
}

TEST_CASE("variants fp16: window, softcap, ALiBi vs float64 reference",
          "[gpu][matrix][variants]") {
  run_variants(DType::fp16);
}

TEST_CASE("variants bf16: window, softcap, ALiBi vs float64 reference",
          "[gpu][matrix][variants]") {
  run_variants(DType::bf16);
}

// --- Named cases the design may not pair up ------------------------------------------------

// The variants at head dims the design above leaves out: 40 (on the D=64 kernels, zero
// columns), 96, 192 and 256 (whose backward splits the columns between CTAs), 200 (on 256's,
// padded). Each dtype with a left-bounded window, softcap and ALiBi under a causal mask, and a
// softcap alone without a mask.
TEST_CASE("variants at head dims 40, 96, 192, 200, 256 vs float64 reference",
          "[gpu][variants][head_dims]") {  // no wgmma kernel at these head dims
  require_gpu();
  uint64_t seed = 2500;
  for (const DType dtype : kDtypes) {
    for (const int head_dim : {40, 96, 192, 200, 256}) {
      for (const bool all : {true, false}) {
        Problem p = make_problem(dtype, head_dim, all ? Mask::causal_bottom_right : Mask::none,
                                 all ? 239 : 113, all ? 301 : 77, 1, 6, 3, Layout::bshd);
        p.softcap = all ? 30.0 : kSoftcap;
        if (all) {
          p.window = {100, -1};
          p.alibi_slopes = alibi_default_slopes(6);
        }
        ++seed;
        DYNAMIC_SECTION(describe(p) << (all ? " window 100,-1 softcap 30 alibi" : " softcap"))
        {
          check_variant(p, seed);
        }
      }
    }
  }
}

TEST_CASE("variants on larger grids: per-batch slopes, bshd, all three together",
          "[gpu][matrix][variants]") {
  require_gpu();
  for (const DType dtype : kDtypes) {
    for (const int head_dim : kHeadDims) {
      Problem p = make_problem(dtype, head_dim, Mask::causal_bottom_right, 777, 1301, 2, 8, 2,
                               Layout::bshd);
      p.window = {256, -1};
      p.softcap = 30.0;
      p.alibi_slopes = alibi_default_slopes(8);
      for (int b = 0; b < 8; ++b) p.alibi_slopes.push_back(0.01f * float(b + 1));  // [2, 8]
      DYNAMIC_SECTION(describe(p)) { check_variant(p, 77); }
    }
  }
}

// At the smallest scale and softcap accepted, 2^-100, slopes of 1e9 are beyond float in the
// forward's score units (slope / unit ~ 1e39): each query row's weight all goes to the key at
// distance 0, and nothing may turn into NaN there (it did, as inf * 0, before the slope was held
// at FLT_MAX).
TEST_CASE("ALiBi slopes beyond float in score units at the smallest scale and softcap",
          "[gpu][variants]") {
  require_gpu();
  uint64_t seed = 2700;
  for (const DType dtype : kDtypes) {
    for (const bool softcap : {false, true}) {
      Problem p = make_problem(dtype, 64, Mask::causal_bottom_right, 113, 113, 1, 4, 2,
                               Layout::bhsd);
      p.scale = 0x1p-100;
      if (softcap) p.softcap = 0x1p-100;
      p.alibi_slopes = std::vector<float>(4, 1e9f);
      ++seed;
      DYNAMIC_SECTION(describe(p) << (softcap ? " softcap 2^-100" : "") << " slopes 1e9") {
        INFO(describe(p));
        CaseInputs in = make_inputs(p, seed);
        for (const TensorCheck& check : run_and_check(p, in)) {
          INFO(check.report);
          CHECK(check.pass);
        }
      }
    }
  }
}

TEST_CASE("a huge softcap and zero slopes give the plain attention's results",
          "[gpu][variants]") {
  require_gpu();
  for (const DType dtype : {DType::fp16, DType::bf16}) {
    const Problem plain =
        make_problem(dtype, 64, Mask::causal_bottom_right, 300, 300, 1, 4, 4, Layout::bhsd);
    Problem modified = plain;
    modified.softcap = 1e6;
    modified.alibi_slopes = std::vector<float>(4, 0.f);
    const CaseInputs in = make_inputs(plain, 5);
    const HostForwardResult a = run_forward(plain, in.q_bytes, in.k_bytes, in.v_bytes);
    const HostForwardResult b = run_forward(modified, in.q_bytes, in.k_bytes, in.v_bytes);
    INFO(describe(plain));
    CHECK(max_abs_difference(q_side_values(plain, a.out), q_side_values(plain, b.out)) <= 1e-2);
    // LSE too: a NaN there (inf x 0 of a zero slope) would leave O's rows looking plausible.
    CHECK(max_abs_difference(std::vector<double>(a.lse.begin(), a.lse.end()),
                             std::vector<double>(b.lse.begin(), b.lse.end())) <= 1e-2);
  }
}

TEST_CASE("bad variant arguments are refused, naming the field", "[gpu][arguments][variants]") {
  require_gpu();
  const DeviceProblem device(
      make_problem(DType::fp16, 64, Mask::none, 64, 64, 1, 4, 4, Layout::bhsd));
  const auto refused = [](const auto& call, const char* word) {
    try {
      call();
    } catch (const Error& error) {
      CHECK(error.kind() == Error::Kind::invalid_argument);
      CHECK(std::string(error.what()).find(word) != std::string::npos);
      return;
    }
    FAIL("not refused: " << word);
  };
  ForwardArgs args = device.forward_args();
  args.window = {-2, 0};
  refused([&] { forward(args); }, "window");
  args = device.forward_args();
  args.softcap = -1.f;
  refused([&] { forward(args); }, "softcap");
  BackwardArgs backward_arguments = device.backward_args();
  backward_arguments.softcap = std::numeric_limits<float>::infinity();
  refused([&] { backward(backward_arguments); }, "softcap");
  args = device.forward_args();
  args.scale = 1e-31f;  // below 2^-100: ALiBi slopes in its units could overflow
  refused([&] { forward(args); }, "scale");
  args = device.forward_args();
  args.softcap = 1e-31f;
  refused([&] { forward(args); }, "softcap");
  args.scale = 0x1p100f;
  args.softcap = 0x1p-100f;  // each within bounds, scale / softcap not a float
  refused([&] { forward(args); }, "softcap");
  DeviceBuffer slopes(16 * sizeof(float));
  args = device.forward_args();
  args.alibi = {slopes.as<const float>(), 2};  // neither 0 nor >= heads
  refused([&] { forward(args); }, "alibi.batch_stride");
}

}  // namespace
}  // namespace cuflash::gpu_test
