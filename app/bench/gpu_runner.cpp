#include "bench/gpu_runner.h"

#include <algorithm>
#include <new>
#include <string>
#include <vector>

#include "bench/device_case.h"
#include "bench/stats.h"
#include "bench/sweep_runner.h"
#include "bench/verify_before_timing.h"
#include "cli/exit_codes.h"
#include "cuflash/attention.h"
#include "cuflash/cuda_error.h"
#include "cuflash/error.h"

namespace cuflash::bench {

namespace {

int64_t free_device_bytes() {
  size_t free = 0, total = 0;
  check_cuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return static_cast<int64_t>(free);
}

FailureKind kind_of(const Error& e) {
  switch (e.kind()) {
    case Error::Kind::invalid_argument:
    case Error::Kind::unsupported: return FailureKind::unsupported;
    case Error::Kind::out_of_memory: return FailureKind::out_of_memory;
    case Error::Kind::cuda:
    case Error::Kind::no_device: return FailureKind::cuda_error;
  }
  return FailureKind::error;
}

// A sticky CUDA error (e.g. an illegal address) poisons the context: every later call fails.
bool device_unusable() {
  const cudaError_t synced = cudaDeviceSynchronize();
  const cudaError_t last = cudaGetLastError();
  return synced != cudaSuccess || last != cudaSuccess;
}

// The kernels `record` holds, in launch order, each once.
std::vector<std::string> kernel_names(const LaunchRecord& record) {
  std::vector<std::string> names;
  for (const KernelLaunch& launch : record.launches()) {
    if (std::find(names.begin(), names.end(), launch.kernel) == names.end()) {
      names.push_back(launch.kernel);
    }
  }
  return names;
}

}  // namespace

Failure classify_failure(const std::exception_ptr& error, const std::string& stage) {
  Failure f;
  f.pass = stage;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {  // the library's and the benchmark's own CUDA calls (check_cuda)
    f.kind = kind_of(e);
    f.reason = e.what();
  } catch (const cli::UsageError& e) {  // from the --verify path: a problem the reference refuses
    f.kind = FailureKind::unsupported;
    f.reason = e.what();
  } catch (const std::bad_alloc&) {
    f.kind = FailureKind::out_of_memory;
    f.reason = "out of host memory";
  } catch (const std::exception& e) {
    f.kind = FailureKind::error;
    f.reason = e.what();
  }
  if (f.kind == FailureKind::cuda_error && device_unusable()) {
    f.fatal = true;
    f.reason += " (the GPU is unusable after this error; the remaining cases were not run)";
  }
  return f;
}

GpuCaseRunner::GpuCaseRunner(const CaseSettings& settings)
    : settings_(settings), timer_(settings.timing) {}

void GpuCaseRunner::verify(const Problem& c, uint64_t seed, CaseRecord& record) const {
  if (!verify_fits(c)) {
    record.verify = "skipped";
    return;
  }
  const CheckResult check = check_against_reference(c, seed, settings_.backward);
  record.verify = check.pass ? "pass" : "fail";
  if (!check.pass) {
    record.failure = Failure{"verify", FailureKind::verification_failed, check.summary, false};
  }
}

void GpuCaseRunner::time_passes(const Problem& c, uint64_t seed, int samples,
                                CaseRecord& record, std::string& stage) {
  const int64_t free_before = free_device_bytes();
  const DeviceCase device(c, settings_.backward, seed);
  const ForwardArgs& fa = device.forward_args();
  // One untimed run of each pass: O and LSE for the backward pass, errors (unsupported shape)
  // before any timing, every buffer touched before memory is read, and the kernels each runs.
  const cudaStream_t stream = timer_.stream();
  const DevicePasses& passes = device.passes();
  std::vector<std::string> forward_kernels, backward_kernels;
  {
    const LaunchRecord record;
    passes.forward(fa, stream);
    forward_kernels = kernel_names(record);
  }
  if (settings_.backward) {
    const LaunchRecord record;
    passes.backward(device.backward_args(), stream);
    backward_kernels = kernel_names(record);
  }
  check_cuda(cudaStreamSynchronize(stream), "first run");
  const int64_t memgetinfo_bytes = std::max<int64_t>(0, free_before - free_device_bytes());

  if (settings_.forward) {
    stage = "fwd";
    PassResult p;
    p.pass = "fwd";
    p.flops = pass_flops(c, p.pass);
    p.bytes = pass_bytes(c, p.pass);
    p.memory = MemoryInfo{device.forward_bytes(), device.forward_workspace_bytes(),
                          memgetinfo_bytes};
    p.kernels = forward_kernels;
    timer_.time([&](cudaStream_t s) { passes.forward(fa, s); }, p, samples);
    if (passes.last_communication) {
      passes.forward(fa, stream);
      p.communication = passes.last_communication();
    }
    record.passes.push_back(std::move(p));
  }
  if (settings_.backward) {
    stage = "bwd";
    const BackwardArgs& ba = device.backward_args();
    PassResult p;
    p.pass = "bwd";
    p.flops = pass_flops(c, p.pass);
    p.bytes = pass_bytes(c, p.pass);
    p.memory = MemoryInfo{device.backward_bytes(), device.workspace_bytes(), memgetinfo_bytes};
    p.kernels = backward_kernels;
    timer_.time([&](cudaStream_t s) { passes.backward(ba, s); }, p, samples);
    if (passes.last_communication) {
      passes.backward(ba, stream);
      p.communication = passes.last_communication();
    }
    record.passes.push_back(std::move(p));
  }
}

CaseRecord GpuCaseRunner::operator()(const Problem& c, size_t index, int round) {
  CaseRecord record;
  record.spec = c;
  const uint64_t seed = settings_.seed + index;  // fresh inputs for every case
  std::string stage = "verify";
  try {
    if (settings_.verify && round == 0) {
      verify(c, seed, record);
      if (record.failure) return record;
    }
    stage = "setup";
    time_passes(c, seed, samples_in_round(settings_.timing.iters, settings_.rounds, round),
                record, stage);
  } catch (...) {
    record.failure = classify_failure(std::current_exception(), stage);
  }
  return record;
}

}  // namespace cuflash::bench
