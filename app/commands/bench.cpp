// `cuflash bench`: kernel-only timings with CUDA events (warm-ups, then timed samples; median,
// min, max and noise), TFLOP/s over the unmasked (query, key) pairs, and device memory.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>

#include "cli/attention_case.h"
#include "cli/exit_codes.h"
#include "commands/commands.h"
#include "cuflash/attention.h"
#include "cuflash/error.h"
#include "cuflash/io/convert.h"

namespace cuflash::cli {

namespace {

struct BenchOptions {
  ProblemOptions problem;
  int warmup = 10;
  int iters = 30;
  std::string pass = "all";
};

void check_cuda(cudaError_t status, const char* what) {
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error so the sweep can go on
    throw RuntimeFailure(std::string(what) + ": out of device memory");
  }
  if (status != cudaSuccess) {
    throw RuntimeFailure(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

// A device allocation freed on scope exit; counts the bytes the benchmark itself asked for.
class DeviceBuffer {
 public:
  DeviceBuffer(size_t bytes, size_t& total) {
    check_cuda(cudaMalloc(&data_, std::max<size_t>(bytes, 1)), "cudaMalloc");
    total += bytes;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(data_); }
  void* get() const { return data_; }

 private:
  void* data_ = nullptr;
};

class EventPair {
 public:
  EventPair() {
    check_cuda(cudaEventCreate(&start_), "cudaEventCreate");
    check_cuda(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~EventPair() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  template <typename F>
  double time_ms(F&& work) {
    check_cuda(cudaEventRecord(start_), "cudaEventRecord");
    work();
    check_cuda(cudaEventRecord(stop_), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms;
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

// (query, key) pairs the mask lets through: the work a FLOP count should credit.
double visible_pairs(const reference::Problem& p) {
  if (p.mask == Mask::none) return double(p.seq_q) * double(p.seq_k);
  const int64_t offset = causal_offset(p.mask, p.seq_q, p.seq_k);
  double pairs = 0;
  for (int64_t i = 0; i < p.seq_q; ++i) {
    pairs += double(std::clamp<int64_t>(i + offset + 1, 0, p.seq_k));
  }
  return pairs;
}

double forward_flops(const reference::Problem& p) {
  return 4.0 * double(p.batch) * double(p.heads) * visible_pairs(p) * double(p.head_dim);
}

struct Samples {
  double median = 0, min = 0, max = 0, noise = 0;  // ms; noise = relative standard deviation
};

Samples summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  Samples s;
  const size_t n = ms.size();
  s.median = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  s.min = ms.front();
  s.max = ms.back();
  const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / double(n);
  double var = 0;
  for (const double x : ms) var += (x - mean) * (x - mean);
  s.noise = n > 1 ? std::sqrt(var / double(n - 1)) / mean : 0.0;
  return s;
}

// Device tensors of one case, filled with the same random inputs `run` would generate.
struct CaseBuffers {
  size_t library_bytes = 0;  // every byte this benchmark allocated for the case
  DeviceBuffer q, k, v, out, lse, dout, dq, dk, dv, workspace;

  CaseBuffers(const AttentionCase& c, const CaseInputs& in)
      : q(bytes(c, in.q), library_bytes),
        k(bytes(c, in.k), library_bytes),
        v(bytes(c, in.v), library_bytes),
        out(bytes(c, in.q), library_bytes),
        lse(sizeof(float) * size_t(c.problem.lse_elements()), library_bytes),
        dout(bytes(c, in.q), library_bytes),
        dq(bytes(c, in.q), library_bytes),
        dk(bytes(c, in.k), library_bytes),
        dv(bytes(c, in.v), library_bytes),
        workspace(backward_workspace_size(c.shape(), c.dtype), library_bytes) {
    upload(c, in.q, q, c.problem.heads, c.problem.seq_q);
    upload(c, in.k, k, c.problem.heads_kv, c.problem.seq_k);
    upload(c, in.v, v, c.problem.heads_kv, c.problem.seq_k);
    upload(c, in.dout, dout, c.problem.heads, c.problem.seq_q);
  }

  static size_t bytes(const AttentionCase& c, const std::vector<double>& values) {
    return values.size() * size_t(dtype_size(c.dtype));
  }

  static void upload(const AttentionCase& c, const std::vector<double>& bhsd, DeviceBuffer& dst,
                     int64_t heads, int64_t seq) {
    const io::NpyArray a = io::from_double(
        bhsd_to_layout(bhsd, c.problem.batch, heads, seq, c.problem.head_dim, c.layout),
        {int64_t(bhsd.size())}, element_type(c.dtype));
    check_cuda(cudaMemcpy(dst.get(), a.bytes.data(), a.bytes.size(), cudaMemcpyHostToDevice),
               "cudaMemcpy");
  }
};

TensorRef ref(const AttentionCase& c, const DeviceBuffer& b, int64_t heads, int64_t seq) {
  return make_tensor_ref(b.get(), c.layout, c.problem.batch, heads, seq, c.problem.head_dim);
}

ForwardArgs forward_args(const AttentionCase& c, const CaseBuffers& b) {
  const reference::Problem& p = c.problem;
  ForwardArgs a;
  a.shape = c.shape();
  a.dtype = c.dtype;
  a.mask = p.mask;
  a.scale = float(p.scale);
  a.q = ref(c, b.q, p.heads, p.seq_q);
  a.k = ref(c, b.k, p.heads_kv, p.seq_k);
  a.v = ref(c, b.v, p.heads_kv, p.seq_k);
  a.out = ref(c, b.out, p.heads, p.seq_q);
  a.lse = static_cast<float*>(b.lse.get());
  return a;
}

BackwardArgs backward_args(const AttentionCase& c, const CaseBuffers& b) {
  const reference::Problem& p = c.problem;
  const ForwardArgs f = forward_args(c, b);
  BackwardArgs a;
  a.shape = f.shape;
  a.dtype = f.dtype;
  a.mask = f.mask;
  a.scale = f.scale;
  a.q = f.q;
  a.k = f.k;
  a.v = f.v;
  a.out = f.out;
  a.lse = f.lse;
  a.dout = ref(c, b.dout, p.heads, p.seq_q);
  a.dq = ref(c, b.dq, p.heads, p.seq_q);
  a.dk = ref(c, b.dk, p.heads_kv, p.seq_k);
  a.dv = ref(c, b.dv, p.heads_kv, p.seq_k);
  a.workspace = b.workspace.get();
  a.workspace_bytes = backward_workspace_size(c.shape(), c.dtype);
  return a;
}

template <typename F>
Samples time_samples(const BenchOptions& o, F&& work) {
  for (int i = 0; i < o.warmup; ++i) work();
  check_cuda(cudaDeviceSynchronize(), "warm-up");
  EventPair events;
  std::vector<double> ms;
  for (int i = 0; i < o.iters; ++i) ms.push_back(events.time_ms(work));
  return summarize(ms);
}

Record timing_record(const AttentionCase& c, const char* pass, const Samples& s, double flops,
                     const CaseBuffers& b, size_t memgetinfo_bytes) {
  Record r;
  r.add("pass", pass)
      .add("case", c.name())
      .add("median_ms", s.median, 4)
      .add("min_ms", s.min, 4)
      .add("max_ms", s.max, 4)
      .add("noise", s.noise, 2)
      .add("tflops", flops / (s.median * 1e-3) / 1e12, 4)
      .add("lib_mem_mib", double(b.library_bytes) / (1 << 20), 4)
      .add("memgetinfo_mib", double(memgetinfo_bytes) / (1 << 20), 4);
  return r;
}

size_t device_free_bytes() {
  size_t free = 0, total = 0;
  check_cuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

void bench_case(const AttentionCase& c, const BenchOptions& o, std::vector<Record>& records) {
  const CaseInputs in = generate_inputs(c, o.problem.seed, /*with_dout=*/true);
  const size_t free_before = device_free_bytes();
  CaseBuffers b(c, in);
  const size_t used = free_before - device_free_bytes();
  const ForwardArgs fa = forward_args(c, b);
  const BackwardArgs ba = backward_args(c, b);
  const double flops = forward_flops(c.problem);
  if (o.pass != "bwd") {
    const Samples s = time_samples(o, [&] { forward(fa); });
    records.push_back(timing_record(c, "fwd", s, flops, b, used));
  }
  if (o.pass != "fwd") {
    forward(fa);  // O and LSE for the backward pass, outside the timed region
    const Samples s = time_samples(o, [&] { backward(ba); });
    records.push_back(timing_record(c, "bwd", s, 2.5 * flops, b, used));
  }
}

int bench_command(const BenchOptions& o, const GlobalOptions& global) {
  if (o.problem.has_input_files()) throw UsageError("bench generates its inputs; drop --q/--k/--v");
  const std::vector<AttentionCase> cases = expand_cases(o.problem);
  if (device_count() == 0) {
    throw RuntimeFailure("bench times the CUDA kernels and needs a CUDA GPU; none was found");
  }
  std::vector<Record> records;
  size_t failed = 0;
  Progress progress(cases.size(), !global.quiet);
  for (size_t i = 0; i < cases.size(); ++i) {
    progress.step(i, cases[i].name());
    try {
      bench_case(cases[i], o, records);
    } catch (const std::exception& e) {  // recorded; the sweep goes on
      Record r;
      r.add("pass", o.pass).add("case", cases[i].name()).add("error", e.what());
      records.push_back(std::move(r));
      spdlog::warn("{}: {}", cases[i].name(), e.what());
      ++failed;
    }
  }
  progress.finish();
  print_records(records, global.output_format());
  return failed ? kExitRuntimeFailure : kExitOk;
}

}  // namespace

void setup_bench(CLI::App& app, const GlobalOptions& global, CommandResult& result) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Time the CUDA kernels (CUDA events, median)");
  cmd->footer(
      "Kernel-only time with CUDA events: --warmup runs, then --iters timed samples. TFLOP/s "
      "count 4*B*H*D per visible (query, key) pair forward, 2.5x that backward.\n"
      "Example: cuflash bench -s 1024,4096 -d 64,128 --dtype fp16,bf16 --causal --format json\n" +
      std::string(kExitCodeHelp));
  add_problem_options(*cmd, options->problem, /*allow_lists=*/true);
  cmd->add_option("--warmup", options->warmup, "Untimed runs before sampling")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--iters", options->iters, "Timed samples")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--pass", options->pass, "fwd, bwd or all")
      ->check(CLI::IsMember({"fwd", "bwd", "all"}))->capture_default_str();
  cmd->callback(
      [options, &global, &result] { result.exit_code = bench_command(*options, global); });
}

}  // namespace cuflash::cli
