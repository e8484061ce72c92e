// GPU tests of the deterministic backward (BackwardArgs::deterministic): dQ, dK and dV the same
// bits over 100 runs and on a workspace of any contents, results within the accuracy rule of
// the other GPU tests, and the workspace the mode needs. Registered twice (tests/CMakeLists.txt): as is, and with
// CUFLASH_DISABLE_WGMMA=1, so that on an H100/H200 both kernel families are covered.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "cuflash/attention.h"
#include "cuflash/error.h"
#include "cuflash/host_runner.h"
#include "gpu_test_util.h"

namespace cuflash::gpu_test {
namespace {

constexpr int kRuns = 100;
constexpr std::array<DType, 3> kDtypes{DType::fp16, DType::bf16, DType::fp32};
// Top-left with Sq < Sk leaves key blocks that no query sees (they take no turn); bottom-right
// ends every query block's turns at its own last key block (turns go from the first key block
// that meets a query block up; the wgmma kernels go from the last down only on grids of many
// heads, sm90/backward.cuh's dq_sums_from_last_key(), tested below). The causal cases' grids are
// small enough for the wgmma kernels to interleave heads (interleaved_heads()), as the mma.sync
// ones do.
constexpr std::array<Mask, 3> kMasks{Mask::none, Mask::causal_bottom_right,
                                     Mask::causal_top_left};

// B=2, H=4 over 2 kv heads (GQA: each CTA takes its turns for two query heads), odd lengths
// that end inside a block, with 8 to 16 key blocks adding to every query block (1023 keys: four
// key groups of 256, workspace.h's dq_sum_groups(); under the top-left mask every row sees the
// first group's keys alone, and the other three accumulators are never written or read).
Problem deterministic_case(DType dtype, int64_t head_dim, Mask mask) {
  Problem p = make_problem(dtype, head_dim, mask, 113, 1023, 2, 4, 2, Layout::bhsd);
  p.deterministic = true;
  return p;
}

// How many of kRuns - 1 more runs give dQ, dK and dV bytes other than the first run's.
struct DifferingRuns {
  int dq = 0, dk = 0, dv = 0;
};

DifferingRuns runs_differing_from_first(const Problem& p, const CaseInputs& in) {
  const auto backward_bytes = [&] {
    return run_forward_backward(p, in.q_bytes, in.k_bytes, in.v_bytes, in.dout_bytes).backward;
  };
  const HostBackwardResult first = backward_bytes();
  DifferingRuns differing;
  for (int run = 1; run < kRuns; ++run) {
    const HostBackwardResult again = backward_bytes();
    differing.dq += again.dq != first.dq;
    differing.dk += again.dk != first.dk;
    differing.dv += again.dv != first.dv;
  }
  return differing;
}

void check_same_bits_over_runs(const Problem& p, const CaseInputs& in) {
  const DifferingRuns differing = runs_differing_from_first(p, in);
  INFO("runs whose bytes differ from the first run's, of " << kRuns - 1);
  CHECK(differing.dq == 0);
  CHECK(differing.dk == 0);
  CHECK(differing.dv == 0);
}

// dQ, dK and dV of one backward on a zeroed workspace and on one filled with NaN bytes, the same
// bits: whether the prologue zeroes the accumulators or the first turns store their parts
// (dq_first_turn_stores(), workspace.h), the dQ conversion reads no row that nothing wrote.
bool backward_ignores_workspace_contents(const Problem& p, const CaseInputs& in) {
  DeviceProblem device(p);
  device.upload(in);
  forward(device.forward_args());
  const BackwardArgs args = device.backward_args();
  const auto backward_on_workspace_of = [&](int byte) {
    REQUIRE(cudaMemset(args.workspace, byte, args.workspace_bytes) == cudaSuccess);
    backward(args);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    return device.backward_result();
  };
  const HostBackwardResult zeroed = backward_on_workspace_of(0);
  const HostBackwardResult poisoned = backward_on_workspace_of(0xFF);
  return zeroed.dq == poisoned.dq && zeroed.dk == poisoned.dk && zeroed.dv == poisoned.dv;
}

// The checks of the cases beyond the plain matrix: results within the accuracy rule, the same
// bits over kRuns runs and on a workspace of NaN bytes; with `on_blocks_of_80`, that the checked
// run's backward took the deterministic kernel on query blocks of 80 rows.
void check_deterministic(const Problem& p, uint64_t seed, bool on_blocks_of_80 = false) {
  {
    LaunchRecord record;  // of the one forward + backward checked
    for (const TensorCheck& check : run_and_check(p, seed)) {
      INFO(check.report);
      CHECK(check.pass);
    }
    if (on_blocks_of_80) check_backward_on_blocks_of_80(record, true);
  }
  const CaseInputs in = make_inputs(p, seed);
  check_same_bits_over_runs(p, in);
  CHECK(backward_ignores_workspace_contents(p, in));
}

// Calls check(problem, seed) in one section per dtype x head_dim x mask.
template <typename Check>
void for_each_case(Check&& check) {
  require_gpu();
  uint64_t seed = 1300;
  for (DType dtype : kDtypes) {
    // The tuned head dims (192 and 256 split the backward's columns between CTAs, which share
    // the turns) and 40 (the D=64 kernels with zero columns).
    for (int head_dim : {32, 40, 64, 96, 128, 192, 256}) {
      for (Mask mask : kMasks) {
        const Problem p = deterministic_case(dtype, head_dim, mask);
        ++seed;
        DYNAMIC_SECTION(describe(p)) { check(p, seed); }
      }
    }
  }
}

TEST_CASE("deterministic backward: dQ, dK and dV are the same bits over 100 runs",
          "[gpu][deterministic]") {
  for_each_case([](const Problem& p, uint64_t seed) {
    const CaseInputs in = make_inputs(p, seed);
    check_same_bits_over_runs(p, in);
    CHECK(backward_ignores_workspace_contents(p, in));
  });
}

TEST_CASE("deterministic backward: forward and backward vs float64 reference",
          "[gpu][deterministic]") {
  for_each_case([](const Problem& p, uint64_t seed) {
    for (const TensorCheck& check : run_and_check(p, seed)) {
      INFO(check.report);
      CHECK(check.pass);
    }
  });
}

// With a window bounded on the left, a query block's first visible key is not key 0: its turns
// start there; softcap and ALiBi run in the same (variant) kernels.
TEST_CASE("deterministic backward with windows, softcap and ALiBi: the same bits, and correct",
          "[gpu][deterministic]") {
  require_gpu();
  struct Variant {
    Mask mask;
    Window window;
    double softcap;
    bool alibi;
  };
  const Variant variants[] = {{Mask::causal_bottom_right, {64, 0}, 0, false},
                              {Mask::none, {100, 50}, 0, false},
                              {Mask::causal_top_left, {300, -1}, 30, true},
                              {Mask::none, {-1, -1}, 5, true}};
  uint64_t seed = 1400;
  for (DType dtype : {DType::fp16, DType::bf16}) {
    for (int head_dim : {40, 64, 128, 192, 256}) {
      for (const Variant& v : variants) {
        Problem p = deterministic_case(dtype, head_dim, v.mask);
        p.window = v.window;
        p.softcap = v.softcap;
        if (v.alibi) p.alibi_slopes = alibi_default_slopes(p.shape.heads);
        ++seed;
        DYNAMIC_SECTION(describe(p) << " window " << v.window.left << "," << v.window.right
                                    << " softcap " << v.softcap << " alibi " << v.alibi) {
          check_deterministic(p, seed);
        }
      }
    }
  }
}

// More queries than keys (bottom-right: the first query blocks see no key, and the last key
// block meets every query block from its diagonal on) and a window bounded on the right only
// (the default kernels with the band's right end moved): the turns' first key block differs
// from the plain causal cases above.
TEST_CASE("deterministic backward: more queries than keys, a right-only window",
          "[gpu][deterministic]") {
  require_gpu();
  struct Variant {
    Mask mask;
    Window window;
  };
  const Variant variants[] = {{Mask::none, {-1, -1}},
                              {Mask::causal_bottom_right, {-1, -1}},
                              {Mask::causal_top_left, {-1, -1}},
                              {Mask::none, {-1, 17}}};
  uint64_t seed = 1500;
  for (DType dtype : {DType::fp16, DType::fp32}) {
    for (int head_dim : {64, 128}) {
      for (const Variant& v : variants) {
        Problem p = make_problem(dtype, head_dim, v.mask, 1023, 113, 2, 4, 2, Layout::bhsd);
        p.deterministic = true;
        p.window = v.window;
        ++seed;
        DYNAMIC_SECTION(describe(p) << " window " << v.window.left << "," << v.window.right) {
          check_deterministic(p, seed);
        }
      }
    }
  }
}

// Small problems without a mask sum the keys in groups, each with an accumulator and semaphores
// of its own, whose first turns store rather than add (workspace.h, dq_sum_groups() and
// dq_first_turn_stores()): 2100 keys are 17 key blocks of 128, four groups of 640 keys (the
// last one 180); 1100 keys (9 key blocks) want four groups of 384 keys, and three hold them all
// (dq_groups_of(): an empty fourth group's accumulator, never written, would be added as it
// lies in the workspace); 300 keys (3 key blocks) keep one group, here over 4 x 8 kv heads, whose
// first turn stores too. Causal heads sum in groups as well (bottom-right: rows below 120 see
// three of the four groups, the others all four); a window bounded on the left keeps one group
// that adds from zero.
TEST_CASE("deterministic backward: four key groups, one group on many heads, masked heads",
          "[gpu][deterministic]") {
  require_gpu();
  std::vector<Problem> cases;
  for (DType dtype : kDtypes) {
    for (int head_dim : {64, 128}) {
      for (Mask mask : {Mask::none, Mask::causal_bottom_right}) {
        cases.push_back(make_problem(dtype, head_dim, mask, 300, 2100, 1, 4, 2, Layout::bhsd));
      }
      Problem windowed =
          make_problem(dtype, head_dim, Mask::none, 300, 2100, 1, 4, 2, Layout::bhsd);
      windowed.window = {700, 300};
      cases.push_back(windowed);
      cases.push_back(make_problem(dtype, head_dim, Mask::none, 300, 1100, 1, 4, 2, Layout::bhsd));
      cases.push_back(make_problem(dtype, head_dim, Mask::none, 200, 300, 4, 8, 8, Layout::bhsd));
    }
  }
  uint64_t seed = 1700;
  for (Problem& p : cases) {
    p.deterministic = true;
    ++seed;
    DYNAMIC_SECTION(describe(p) << " window " << p.window.left << "," << p.window.right) {
      check_deterministic(p, seed);
    }
  }
}

// From 2048 query rows the wgmma backward at head_dims 128 and 96 takes query blocks of 80 rows,
// deterministic too (sm90/backward.cuh, blocks_of_80_pay()), with one dQ stage: under a causal
// mask key block n ends 1.6 of its iterations earlier than key block n - 1, whose turn it
// follows at every query block (128 keys against 80 rows). Two batch entries (the semaphores'
// batch stride); 2100 rows end in a block of 20; 1023 keys in a partial key block (four key
// groups of 256, whose first turns store); under the bottom-right mask the first 1077 rows see
// no key (nothing writes them: the dQ conversion gives zeros), under the top-left one the last
// see all.
TEST_CASE("deterministic backward on query blocks of 80: the same bits, and correct",
          "[gpu][deterministic][blocks_of_80]") {
  require_gpu();
  uint64_t seed = 1800;
  for (DType dtype : {DType::fp16, DType::bf16}) {
    for (int head_dim : {96, 128}) {
      for (Mask mask : kMasks) {
        Problem p = make_problem(dtype, head_dim, mask, 2100, 1023, 2, 4, 2, Layout::bhsd);
        p.deterministic = true;
        ++seed;
        DYNAMIC_SECTION(describe(p)) { check_deterministic(p, seed, true); }
      }
    }
  }
}

// Whether a and b (one tensor's values) are within two units in the last place of b's largest
// magnitude (at least 1): the same sums added in another order.
bool within_two_ulps(DType dtype, const std::vector<double>& a, const std::vector<double>& b) {
  double largest = 0;
  for (const double x : b) largest = std::max(largest, std::abs(x));
  const double ulp = dtype == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
  return max_abs_difference(a, b) <= 2 * ulp * std::max(1.0, largest);
}

HostBytes byte_slice(const HostBytes& bytes, int64_t begin, int64_t count) {
  return HostBytes(bytes.begin() + begin, bytes.begin() + begin + count);
}

// One grid row of `p` as a problem of its own: one kv head with its query heads, batch 1.
Problem one_kv_head(const Problem& p) {
  Problem alone = p;
  alone.shape.batch = 1;
  alone.shape.heads = p.shape.heads / p.shape.heads_kv;
  alone.shape.heads_kv = 1;
  return alone;
}

// Bytes of one grid row of `p` (bhsd) in Q, O, dO and dQ, and in K, V, dK and dV.
struct RowBytes {
  int64_t q, kv;
};
RowBytes row_bytes(const Problem& p) {
  const AttentionShape& s = p.shape;
  const int64_t element = dtype_size(p.dtype);
  return {s.heads / s.heads_kv * s.seq_q * s.head_dim * element, s.seq_k * s.head_dim * element};
}

// The backward of grid row `row` (batch * heads_kv + kv head: one kv head with its query heads)
// of the dense bhsd problem `p` on its own, from the full problem's inputs `in` and forward
// results `fwd`: a problem of one kv head, whose grid is never interleaved.
HostBackwardResult backward_of_row_alone(const Problem& p, const CaseInputs& in,
                                         const HostForwardResult& fwd, int64_t row) {
  const AttentionShape& s = p.shape;
  const int64_t group = s.heads / s.heads_kv;
  const Problem alone = one_kv_head(p);
  const auto [q_bytes, kv_bytes] = row_bytes(p);
  CaseInputs part;
  part.q_bytes = byte_slice(in.q_bytes, row * q_bytes, q_bytes);
  part.dout_bytes = byte_slice(in.dout_bytes, row * q_bytes, q_bytes);
  part.k_bytes = byte_slice(in.k_bytes, row * kv_bytes, kv_bytes);
  part.v_bytes = byte_slice(in.v_bytes, row * kv_bytes, kv_bytes);
  DeviceProblem device(alone);
  device.upload(part);
  const BackwardArgs args = device.backward_args();
  REQUIRE(cudaMemcpy(args.out.data, fwd.out.data() + row * q_bytes, size_t(q_bytes),
                     cudaMemcpyHostToDevice) == cudaSuccess);
  const int64_t lse_rows = group * s.seq_q;
  REQUIRE(cudaMemcpy(const_cast<float*>(args.lse), fwd.lse.data() + row * lse_rows,
                     size_t(lse_rows) * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  backward(args);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  return device.backward_result();
}

// The gradients of grid rows `rows` of `p` (bhsd, causal) in the full call against each row's
// computed alone, in plain order: dK and dV the same bits (no atomics); dQ within two units in
// the last place of the largest |dQ|, in deterministic mode too: a kv head alone is a small call,
// which sums its keys in groups (workspace.h, dq_sum_groups()) where the full call keeps one, the
// same parts added in another order. In deterministic mode the full call's dQ is the same bits
// on a second run.
void check_rows_as_alone(const Problem& p, uint64_t seed, const std::vector<int64_t>& rows) {
  const CaseInputs in = make_inputs(p, seed);
  DeviceProblem device(p);
  device.upload(in);
  forward(device.forward_args());
  backward(device.backward_args());
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const HostForwardResult fwd = device.forward_result();
  const HostBackwardResult full = device.backward_result();
  if (p.deterministic) {
    backward(device.backward_args());
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(device.backward_result().dq == full.dq);
  }
  const auto [q_bytes, kv_bytes] = row_bytes(p);
  for (const int64_t row : rows) {
    INFO("grid row " << row);
    const HostBackwardResult alone = backward_of_row_alone(p, in, fwd, row);
    CHECK(alone.dk == byte_slice(full.dk, row * kv_bytes, kv_bytes));
    CHECK(alone.dv == byte_slice(full.dv, row * kv_bytes, kv_bytes));
    const HostBytes full_dq = byte_slice(full.dq, row * q_bytes, q_bytes);
    const Problem row_problem = one_kv_head(p);
    CHECK(within_two_ulps(p.dtype, q_side_values(row_problem, alone.dq),
                          q_side_values(row_problem, full_dq)));
  }
}

// Causal calls whose Q, dO and fp32 dQ pass the wgmma backward's bound for interleaving every
// head (sm90/backward.cuh, interleaved_heads()), which in deterministic mode interleaves groups
// of heads instead: 4 MiB a grid row, 16 rows at a time, so 40 rows run in groups of 16, 16 and
// 8 (head_dim 128, one batch entry), 80 rows of 2 MiB in groups of 32, 32 and 16 (head_dim 64,
// two), and 24 GQA rows of two query heads in groups of 16 and 8 (unit test_block_order.cu
// checks these counts); the default mode runs them in plain order. The rows checked: the first
// and last of each group. (Elsewhere, the mma.sync kernels, which interleave all heads under a
// causal mask, run the same comparison.)
TEST_CASE("backward on heads interleaved in groups: each kv head's gradients as computed alone",
          "[gpu][deterministic]") {
  require_gpu();
  struct Grid {
    DType dtype;
    int64_t head_dim, seq, batch, heads, heads_kv;
    std::vector<int64_t> rows;
  };
  const Grid grids[] = {{DType::bf16, 128, 4096, 1, 40, 40, {0, 15, 16, 31, 32, 39}},
                        {DType::fp16, 64, 4096, 2, 40, 40, {0, 31, 32, 63, 64, 79}},
                        {DType::fp16, 128, 2048, 1, 48, 24, {0, 15, 16, 23}}};
  uint64_t seed = 1700;
  for (const Grid& g : grids) {
    for (const bool deterministic : {true, false}) {
      Problem p = make_problem(g.dtype, g.head_dim, Mask::causal_bottom_right, g.seq, g.seq,
                               g.batch, g.heads, g.heads_kv, Layout::bhsd);
      p.deterministic = deterministic;
      ++seed;
      DYNAMIC_SECTION(describe(p) << (deterministic ? " deterministic" : " default")) {
        check_rows_as_alone(p, seed, g.rows);
      }
    }
  }
}

// dQ, dK and dV of the deterministic backward of `p` against the default backward's on the same
// inputs and forward results (the default is checked against the reference elsewhere): within
// two units in the last place.
void check_against_default(const Problem& p, const CaseInputs& in) {
  DeviceProblem device(p);
  device.upload(in);
  forward(device.forward_args());
  BackwardArgs args = device.backward_args();
  REQUIRE(args.deterministic);
  const auto gradients = [&] {
    backward(args);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    return device.backward_result();
  };
  const HostBackwardResult deterministic = gradients();
  args.deterministic = false;  // (the deterministic workspace is the larger)
  const HostBackwardResult by_default = gradients();
  CHECK(within_two_ulps(p.dtype, q_side_values(p, deterministic.dq),
                        q_side_values(p, by_default.dq)));
  CHECK(within_two_ulps(p.dtype, kv_side_values(p, deterministic.dk),
                        kv_side_values(p, by_default.dk)));
  CHECK(within_two_ulps(p.dtype, kv_side_values(p, deterministic.dv),
                        kv_side_values(p, by_default.dv)));
}

// Below 2048 query rows, a deterministic wgmma backward under a causal mask whose grid runs in
// plain order for two rounds of CTAs or more sums each query block's dQ from its last key block
// down, the light key blocks starting first (sm90/backward.cuh, dq_sums_from_last_key(); the
// unit test test_block_order.cu says these grids take it on 132 SMs): 2 x 72 heads of 1024 rows
// at head_dim 64 (72 MiB, past the interleaving bound; 1152 key blocks), and GQA, 40 kv heads of
// four query heads, 1000 rows at head_dim 128 with the top-left mask (156 MiB; 320 key blocks).
// Checked: the same bits over 100 runs, and the default backward's gradients. (On GPUs without
// wgmma the mma.sync kernels run these cases, from the first key block up.)
TEST_CASE("deterministic backward below 2k causal rows on many heads: the same bits, and correct",
          "[gpu][deterministic]") {
  require_gpu();
  Problem many_heads =
      make_problem(DType::fp16, 64, Mask::causal_bottom_right, 1024, 1024, 2, 72, 72, Layout::bhsd);
  Problem grouped_queries =
      make_problem(DType::bf16, 128, Mask::causal_top_left, 1000, 1000, 1, 160, 40, Layout::bhsd);
  uint64_t seed = 1900;
  for (Problem p : {many_heads, grouped_queries}) {
    p.deterministic = true;
    ++seed;
    DYNAMIC_SECTION(describe(p)) {
      const CaseInputs in = make_inputs(p, seed);
      check_same_bits_over_runs(p, in);
      check_against_default(p, in);
    }
  }
}

// Without a mask, where a key group has at most as many key blocks as the head has query
// blocks, the wgmma kernels at head_dim 64 and the column-split kernel at 128 rotate the dQ sums:
// the group's key blocks start at query blocks spread over the head and take their turns in the
// order they get to each (sm90/backward.cuh, dq_turns_rotate(); the unit test
// test_block_order.cu simulates the turns), and wait for key blocks of their group that start
// after them. Checked where the choice is known: the backward ran the rotated kernel. A small
// call (3 key blocks, GQA, rows and keys ending inside a block; against the float64 reference,
// 100 runs, a workspace of NaN bytes), one of about four rounds of CTAs on 132 SMs (512 CTAs: 64
// kv heads of 8 key blocks, 1000 rows and 1023 keys; 100 runs, and the default backward's
// gradients), and one on the column-split kernel (1024 rows, 900 keys, 8 heads on 2: groups of
// four key blocks of 64, the last one of three, over 16 query blocks; the float64 reference, 100
// runs, the default's gradients, a workspace of NaN bytes). fp32 runs the mma.sync kernels, which
// rotate too (key blocks of 64 at head_dim 64, of 32 at 128 on a small grid): the small call, and
// the column-split kernel's call in fp32 (groups of eight key blocks, the last of five, over 32
// query blocks).
void check_backward_rotated(const LaunchRecord& record) {
  if (!launch_choices_known_here()) {
    WARN("the backward kernel is not checked: it is known for wgmma on 132 SMs");
    return;
  }
  const std::vector<KernelLaunch> launches = launches_of(record, "backward");
  size_t rotated = 0;
  for (const KernelLaunch& launch : launches) {
    INFO(launch.kernel);
    if (!starts_with(launch.kernel, "sm90::backward_kernel<")) continue;
    const std::vector<std::string> arguments = template_arguments(launch.kernel);
    REQUIRE(arguments.size() == 9);
    CHECK(arguments[3] == "true");
    rotated += arguments[8] == "(DqSumOrder)3";
  }
  CHECK(rotated == 1);
}

// One launch of the kernel named `kernel` (its name up to the template arguments) that rotates.
void check_rotated_launch(const LaunchRecord& record, const std::string& kernel) {
  if (!launch_choices_known_here()) {
    WARN("the backward kernel is not checked: it is known for wgmma on 132 SMs");
    return;
  }
  size_t rotated = 0;
  for (const KernelLaunch& launch : launches_of(record, "backward")) {
    INFO(launch.kernel);
    rotated += starts_with(launch.kernel, kernel + "<") &&
               template_arguments(launch.kernel).back() == "(DqSumOrder)3";
  }
  CHECK(rotated == 1);
}

TEST_CASE("deterministic backward, dQ sums rotated: the same bits, and correct",
          "[gpu][deterministic][rotated]") {
  require_gpu();
  uint64_t seed = 2000;
  for (DType dtype : kDtypes) {
    Problem small = make_problem(dtype, 64, Mask::none, 300, 301, 2, 4, 2, Layout::bhsd);
    small.deterministic = true;
    ++seed;
    DYNAMIC_SECTION(describe(small)) {
      {
        LaunchRecord record;
        for (const TensorCheck& check : run_and_check(small, seed)) {
          INFO(check.report);
          CHECK(check.pass);
        }
        if (dtype != DType::fp32) check_backward_rotated(record);
        if (dtype == DType::fp32) check_rotated_launch(record, "sm80::backward_kernel");
      }
      const CaseInputs in = make_inputs(small, seed);
      check_same_bits_over_runs(small, in);
      CHECK(backward_ignores_workspace_contents(small, in));
    }
  }
  for (DType dtype : {DType::fp16, DType::bf16}) {
    Problem rounds = make_problem(dtype, 64, Mask::none, 1000, 1023, 8, 32, 8, Layout::bhsd);
    rounds.deterministic = true;
    ++seed;
    DYNAMIC_SECTION(describe(rounds)) {
      const CaseInputs in = make_inputs(rounds, seed);
      {
        LaunchRecord record;
        DeviceProblem device(rounds);
        device.upload(in);
        forward(device.forward_args());
        backward(device.backward_args());
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        check_backward_rotated(record);
      }
      check_same_bits_over_runs(rounds, in);
      check_against_default(rounds, in);
    }
  }
  for (DType dtype : kDtypes) {
    Problem grouped = make_problem(dtype, 128, Mask::none, 1024, 900, 1, 8, 2, Layout::bhsd);
    grouped.deterministic = true;
    ++seed;
    DYNAMIC_SECTION(describe(grouped)) {
      {
        LaunchRecord record;
        for (const TensorCheck& check : run_and_check(grouped, seed)) {
          INFO(check.report);
          CHECK(check.pass);
        }
        check_rotated_launch(record, dtype == DType::fp32 ? "sm80::backward_kernel"
                                                          : "sm90::column_split_backward_kernel");
      }
      const CaseInputs in = make_inputs(grouped, seed);
      check_same_bits_over_runs(grouped, in);
      check_against_default(grouped, in);
      CHECK(backward_ignores_workspace_contents(grouped, in));
    }
  }
}

TEST_CASE("deterministic backward: its workspace holds the semaphores, one byte less is refused",
          "[gpu][deterministic]") {
  require_gpu();
  Problem p = deterministic_case(DType::fp16, 64, Mask::none);
  p.splits = 1;  // no forward workspace, which could be the larger one
  const DeviceProblem device(p);
  BackwardArgs args = device.backward_args();
  REQUIRE(args.deterministic);
  REQUIRE(args.workspace_bytes == backward_workspace_size(args.shape, args.dtype, true));
  CHECK(args.workspace_bytes > backward_workspace_size(args.shape, args.dtype));
  args.workspace_bytes -= 1;
  try {
    backward(args);
    FAIL("a workspace one byte short of the deterministic size was taken");
  } catch (const Error& error) {
    INFO(error.what());
    CHECK(error.kind() == Error::Kind::invalid_argument);
    CHECK_THAT(error.what(), Catch::Contains("backward_workspace_size(shape, dtype, true)"));
  }
}

}  // namespace
}  // namespace cuflash::gpu_test
