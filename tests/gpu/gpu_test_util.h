// Helpers of the GPU tests: problem descriptions, input generation in both tensor orders, the
// all-pairs covering design, and the accuracy rule against the float64 reference.
//
// Nothing here touches the GPU at static-initialisation time, so test discovery
// (--list-tests) works on a machine without one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cuflash/attention.h"
#include "cuflash/device_buffer.h"
#include "cuflash/error.h"
#include "cuflash/host_runner.h"
#include "cuflash/reference/attention_ref.h"
#include "cuflash/types.h"

namespace cuflash::gpu_test {

// Fails the current test with a clear message when this process sees no CUDA device. Every GPU
// test calls it first: without a GPU they must fail, never pass by doing nothing.
void require_gpu();

// A variable-length packed batch (layout thd) of these query and key lengths (default scale).
Problem make_varlen_problem(DType dtype, int64_t head_dim, Mask mask,
                            const std::vector<int64_t>& seqlens_q,
                            const std::vector<int64_t>& seqlens_k, int64_t heads,
                            int64_t heads_kv);

// A problem in the order the tests think of it (default scale).
Problem make_problem(DType dtype, int64_t head_dim, Mask mask, int64_t seq_q, int64_t seq_k,
                     int64_t batch, int64_t heads, int64_t heads_kv, Layout layout);

// "fp16 D=64 mask=causal Sq=113 Sk=203 B=2 H=4 Hkv=2 layout=bshd"
std::string describe(const Problem& p);

// The seeded inputs of io/random_inputs.h (those of `cuflash run`, `verify` and `bench`). The
// doubles are in the reference's order ([B, H, S, D]); the bytes hold the very same values as
// elements of the problem's dtype in its layout.
struct CaseInputs {
  std::vector<double> q, k, v, dout;
  HostBytes q_bytes, k_bytes, v_bytes, dout_bytes;
};
CaseInputs make_inputs(const Problem& p, uint64_t seed);

// Q times `factor`, rounded to the dtype (values and bytes alike): large scores, e.g. to drive a
// softcap's tanh into saturation.
void scale_queries(const Problem& p, CaseInputs& in, double factor);

// GPU results (dtype elements in the case's layout) as doubles in the reference's order.
std::vector<double> q_side_values(const Problem& p, const HostBytes& bytes);   // O, dQ
std::vector<double> kv_side_values(const Problem& p, const HostBytes& bytes);  // dK, dV

// --- Device buffers for direct API calls -----------------------------------------------------

// Every tensor of a problem on the device (contents zero, the problem's ALiBi slopes uploaded),
// so that an argument test can break exactly one thing of otherwise valid ForwardArgs /
// BackwardArgs, and a test can call the API on pieces of the tensors. A CUDA failure throws
// cuflash::Error, which fails the test.
class DeviceProblem {
 public:
  explicit DeviceProblem(const Problem& p);
  // Copies the case's Q, K, V and dO to the device (and waits for the copies).
  void upload(const CaseInputs& in);
  ForwardArgs forward_args() const;
  BackwardArgs backward_args() const;
  // O and LSE, or dQ, dK and dV, as the device holds them once its work is done.
  HostForwardResult forward_result() const;
  HostBackwardResult backward_result() const;

 private:
  DenseTensors tensors() const;

  Problem problem_;
  DeviceBuffer q_, k_, v_, out_, lse_, dout_, dq_, dk_, dv_, workspace_;
  DeviceBuffer alibi_slopes_;  // empty without ALiBi
  DeviceBuffer cu_seqlens_q_, cu_seqlens_k_;  // a varlen problem's offsets, else empty
};

// --- All-pairs covering design ----------------------------------------------------------------

// Rows of level indices, one entry per factor (factor f has levels[f] values), such that every
// pair of values of any two factors appears in at least one row. Greedy and deterministic: each
// new row is the first row of the full product that covers the most pairs not yet covered.
using DesignRow = std::vector<int>;
std::vector<DesignRow> pairwise_design(const std::vector<int>& levels);
bool covers_all_pairs(const std::vector<DesignRow>& rows, const std::vector<int>& levels);

// --- Accuracy checks ----------------------------------------------------------------------------

// The outcome of checking one tensor, with a one-line report of the errors for failure messages.
struct TensorCheck {
  bool pass = false;
  std::string report;
};

// Our error against the float64 reference must stay within 2 x the error of the low-precision
// plain attention (the baseline, reference/baseline.h) against the same reference, plus the
// dtype's absolute floor (reference/compare.h). Any non-finite value fails.
TensorCheck check_tensor(const std::string& name, DType dtype, const std::vector<double>& ours,
                         const std::vector<double>& baseline,
                         const std::vector<double>& reference);

// LSE (fp32 on the GPU) against the reference directly, within a small relative bound (see
// lse_relative_tolerance() in the .cpp for its reason); +inf (a row that sees no key) must match
// +inf exactly, and NaN never passes.
TensorCheck check_lse(DType dtype, const std::vector<float>& ours,
                      const std::vector<double>& reference);

// The largest |a[i] - b[i]|: +inf when a value is NaN or the two differ in an infinity (std::max
// alone would drop a NaN and let a NaN output pass). Requires equal sizes.
double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b);

// The float64 reference and the low-precision baseline of a case, forward and backward, on the
// same (dtype-rounded) inputs as the GPU.
struct ExpectedResults {
  reference::ForwardResult ref_fwd, base_fwd;
  reference::Gradients ref_grad, base_grad;
};
ExpectedResults expected_results(const Problem& p, const CaseInputs& in);
// `expected` with the plain call's results in the reference's place: the pass rule then bounds
// how far another computation of the same attention (context parallelism) is from forward()
// and backward() on the whole problem, by the same multiple of the baseline's error.
ExpectedResults plain_as_reference(const Problem& p, const HostForwardBackwardResult& plain,
                                   ExpectedResults expected);

// The checks of O, LSE, dQ, dK and dV of GPU results against `expected`.
std::vector<TensorCheck> check_results(const Problem& p, const HostForwardBackwardResult& gpu,
                                       const ExpectedResults& expected);

// Runs forward + backward of `c` on the GPU, the float64 reference and the low-precision
// baseline on the same (dtype-rounded) inputs, and returns the check of O, LSE, dQ, dK and dV.
std::vector<TensorCheck> run_and_check(const Problem& p, uint64_t seed);
std::vector<TensorCheck> run_and_check(const Problem& p, const CaseInputs& in);

// The same for the forward alone (O and LSE): the cases only the forward serves (key splits,
// paged K/V, per-sequence key lengths, which the reference and baseline follow too).
std::vector<TensorCheck> run_and_check_forward(const Problem& p, uint64_t seed);

// --- Which kernels ran --------------------------------------------------------------------------

// Whether the launch heuristics' choices are known on this device: the wgmma kernels on 132 SMs
// (an H100 or H200 SXM), where they were measured. A test that relies on a heuristic to reach a
// kernel checks the kernel there (LaunchRecord) and WARNs elsewhere.
bool launch_choices_known_here();

// The launches of `call` ("forward", "backward") that `record` holds, in launch order.
std::vector<KernelLaunch> launches_of(const LaunchRecord& record, const std::string& call);

// Whether a kernel's name begins with `prefix` ("sm90::backward_kernel<").
bool starts_with(const std::string& kernel, const std::string& prefix);

// The template arguments of a kernel's name whose arguments hold no commas of their own:
// "sm90::backward_kernel<__half, 128, false, false, false, false, true>" -> {"__half", "128",
// "false", "false", "false", "false", "true"}.
std::vector<std::string> template_arguments(const std::string& kernel);

// Where the choice is known (launch_choices_known_here(), else a WARN), checks that `record`
// holds one wgmma backward launch and that it ran on query blocks of 80 rows, deterministic or
// not: sm90::backward_kernel<Element, kHeadDim, kVariants, kDeterministic, kSums, kVarlen,
// kBlocksOf80> with kDeterministic as given, the other flags false but the last (read by
// position: flags added after it do not matter).
void check_backward_on_blocks_of_80(const LaunchRecord& record, bool deterministic);

// The part of the head_dim 64 tall-tile forward's name that tells it from the 128-row one.
inline constexpr const char* kTallForwardConfig = "sm90::ForwardConfig<64, 3, 128>";

// Whether a forward launch walked: a wgmma forward kernel on fewer CTAs than its query tiles
// (192 rows on the head_dim 64 tall tiles, 128 on the other wgmma tiles).
bool forward_walked(const Problem& p, const KernelLaunch& launch);

// --- Errors -------------------------------------------------------------------------------------

// `call` must throw cuflash::Error of `kind` whose message names `word`.
void require_error(const std::function<void()>& call, Error::Kind kind, const std::string& word);

}  // namespace cuflash::gpu_test
