// Where a case is computed: the float64 CPU reference or the CUDA kernels. Both take the stored
// inputs and return stored outputs (the case's dtype and layout; LSE as fp32 [batch, heads,
// seq_q]); the GPU path hands the bytes to the device as they are.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cli/attention_case.h"
#include "cuflash/attention.h"

namespace cuflash::cli {

enum class Backend { cpu, cuda };

struct AttentionResult {
  io::NpyArray out, lse;     // O like Q; LSE fp32 [batch, heads, seq_q]
  io::NpyArray dq, dk, dv;   // like Q, K, V; no bytes without backward
  double seconds = 0;        // wall time of the computation (uploads included for cuda)
  std::vector<KernelLaunch> launches;  // cuda: the kernels forward() and backward() launched
};

// The launches as log lines, one a kernel of a call ("forward: sm90::forward_kernel<...>, grid
// 132 x 1 x 1 of 384 threads, 117856 bytes of shared memory"; consecutive launches of one kernel
// in one call as one line that says how many).
std::vector<std::string> describe_launches(const std::vector<KernelLaunch>& launches);

// The CPU reference's outputs: float64 in [batch, heads, seq, head_dim] order, not rounded.
struct ReferenceResult {
  std::vector<double> out, lse;
  std::vector<double> dq, dk, dv;  // empty without backward
  double seconds = 0;
};

// `auto`: the GPU when one exists, else the CPU reference (said on stderr by the caller).
// Throws RuntimeFailure for `cuda` without a GPU.
Backend resolve_backend(const std::string& name);
const char* to_string(Backend backend);

// Throws UsageError when the CUDA kernels cannot compute the problem (a head_dim without
// kernels), saying that the CPU backend can. Needs no GPU. `head_dim_source` names where the
// head_dim came from (the option, or a sweep file's case).
void require_gpu_support(const Problem& p, const std::string& head_dim_source = "-d/--head-dim");

// Progress of the CPU reference, per stage ("forward", "backward"), as
// reference::ProgressCallback: thread-safe, never throwing; false stops the computation.
using StageProgress = std::function<bool(const char* stage, int64_t done, int64_t total)>;

// The GPU throws the library's cuflash::Error as it comes (kinds unsupported or invalid_argument
// for a case the kernels do not serve, e.g. head_dim 96; out_of_memory, cuda, no_device for the
// machine's failures; exit_code() in exit_codes.h maps them); the CPU reference throws
// UsageError for an invalid problem, RuntimeFailure when host memory runs out, and Interrupted
// when `progress` stopped it. The GPU path does not report progress.
AttentionResult compute(Backend backend, const Problem& p, const CaseInputs& inputs,
                        bool backward, const StageProgress& progress = {});

// The CPU reference alone, in float64 (no rounding of outputs).
ReferenceResult compute_reference(const Problem& p, const ReferenceInputs& inputs, bool backward,
                                  const StageProgress& progress = {});

// An output of compute() as float64 in bhsd order, for comparisons with the reference.
std::vector<double> bhsd_values(const Problem& p, const io::NpyArray& stored);

}  // namespace cuflash::cli
