#include "gpu_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include "cuflash/cuda_error.h"
#include "cuflash/io/convert.h"
#include "cuflash/io/random_inputs.h"
#include "cuflash/reference/baseline.h"
#include "cuflash/reference/compare.h"

namespace cuflash::gpu_test {

void require_gpu() {
  if (device_count() > 0) return;
  FAIL("no CUDA device found: the GPU tests (ctest label `gpu`) need an NVIDIA GPU and driver");
}

// --- Case description -------------------------------------------------------------------------

Problem make_problem(DType dtype, int64_t head_dim, Mask mask, int64_t seq_q, int64_t seq_k,
                     int64_t batch, int64_t heads, int64_t heads_kv, Layout layout) {
  Problem p;
  p.shape = AttentionShape{batch, heads, heads_kv, seq_q, seq_k, head_dim};
  p.dtype = dtype;
  p.mask = mask;
  p.layout = layout;
  return p;
}

Problem make_varlen_problem(DType dtype, int64_t head_dim, Mask mask,
                            const std::vector<int64_t>& seqlens_q,
                            const std::vector<int64_t>& seqlens_k, int64_t heads,
                            int64_t heads_kv) {
  int64_t total_q = 0, total_k = 0;
  for (const int64_t length : seqlens_q) total_q += length;
  for (const int64_t length : seqlens_k) total_k += length;
  Problem p = make_problem(dtype, head_dim, mask, total_q, total_k, 1, heads, heads_kv,
                           Layout::thd);
  p.seqlens_q = seqlens_q;
  p.seqlens_k = seqlens_k;
  return p;
}

std::string describe(const Problem& p) {
  const AttentionShape& s = p.shape;
  std::ostringstream out;
  out << to_string(p.dtype) << " D=" << s.head_dim << " mask=" << to_string(p.mask)
      << " Sq=" << s.seq_q << " Sk=" << s.seq_k << " B=" << s.batch << " H=" << s.heads
      << " Hkv=" << s.heads_kv << " layout=" << to_string(p.layout);
  if (p.window.bounded()) out << " window=" << p.window.left << "," << p.window.right;
  if (p.softcap > 0) out << " softcap=" << p.softcap;
  if (!p.alibi_slopes.empty()) out << " alibi=" << p.alibi_slopes.size();
  if (p.varlen()) {
    out << " seqlens=";
    for (size_t i = 0; i < p.seqlens_q.size(); ++i) out << (i ? "+" : "") << p.seqlens_q[i];
    if (p.seqlens_k != p.seqlens_q) {
      out << " seqlens_k=";
      for (size_t i = 0; i < p.seqlens_k.size(); ++i) out << (i ? "+" : "") << p.seqlens_k[i];
    }
  }
  if (p.deterministic) out << " deterministic";
  return out.str();
}

// --- Element conversion and tensor order ------------------------------------------------------

namespace {

struct Dims {
  int64_t batch, heads, seq, head_dim;
  int64_t count() const { return batch * heads * seq * head_dim; }
};

Dims q_dims(const Problem& p) {
  return {p.shape.batch, p.shape.heads, p.shape.seq_q, p.shape.head_dim};
}
Dims kv_dims(const Problem& p) {
  return {p.shape.batch, p.shape.heads_kv, p.shape.seq_k, p.shape.head_dim};
}

std::vector<double> decode(const HostBytes& bytes, const Dims& d, DType dtype, Layout layout) {
  io::NpyArray array;
  array.type = io::element_type(dtype);
  switch (layout) {
    case Layout::bhsd: array.shape = {d.batch, d.heads, d.seq, d.head_dim}; break;
    case Layout::bshd: array.shape = {d.batch, d.seq, d.heads, d.head_dim}; break;
    case Layout::thd: array.shape = {d.seq, d.heads, d.head_dim}; break;  // batch 1: packed
  }
  array.bytes = bytes;
  return io::to_bhsd_values(array, layout);
}

}  // namespace

CaseInputs make_inputs(const Problem& p, uint64_t seed) {
  CaseInputs in;
  for (const auto& [tensor, values, bytes] :
       {std::tuple{io::InputTensor::q, &in.q, &in.q_bytes},
        std::tuple{io::InputTensor::k, &in.k, &in.k_bytes},
        std::tuple{io::InputTensor::v, &in.v, &in.v_bytes},
        std::tuple{io::InputTensor::dout, &in.dout, &in.dout_bytes}}) {
    *values = io::random_input_values(p, tensor, seed);
    *bytes = io::random_input_bytes(p, tensor, seed);
  }
  return in;
}

void scale_queries(const Problem& p, CaseInputs& in, double factor) {
  const io::ElementType type = io::element_type(p.dtype);
  io::NpyArray array;
  array.type = type;
  array.shape = {q_dims(p).count()};
  array.bytes = in.q_bytes;
  std::vector<double> values = io::to_double(array);  // in the layout's order
  for (double& x : values) x *= factor;
  in.q_bytes = io::from_double(values, array.shape, type).bytes;
  in.q = decode(in.q_bytes, q_dims(p), p.dtype, p.layout);
}

std::vector<double> q_side_values(const Problem& c, const HostBytes& bytes) {
  return decode(bytes, q_dims(c), c.dtype, c.layout);
}

std::vector<double> kv_side_values(const Problem& c, const HostBytes& bytes) {
  return decode(bytes, kv_dims(c), c.dtype, c.layout);
}

ExpectedResults plain_as_reference(const Problem& p, const HostForwardBackwardResult& plain,
                                   ExpectedResults expected) {
  expected.ref_fwd.out = q_side_values(p, plain.forward.out);
  expected.ref_fwd.lse = std::vector<double>(plain.forward.lse.begin(), plain.forward.lse.end());
  expected.ref_grad.dq = q_side_values(p, plain.backward.dq);
  expected.ref_grad.dk = kv_side_values(p, plain.backward.dk);
  expected.ref_grad.dv = kv_side_values(p, plain.backward.dv);
  return expected;
}

// --- Device buffers for direct API calls -----------------------------------------------------

namespace {

DeviceBuffer zeroed(size_t bytes) {
  DeviceBuffer buffer(bytes);
  buffer.fill(0);
  return buffer;
}

size_t q_side_bytes(const Problem& p) { return size_t(q_dims(p).count()) * dtype_size(p.dtype); }
size_t kv_side_bytes(const Problem& p) { return size_t(kv_dims(p).count()) * dtype_size(p.dtype); }
size_t lse_bytes(const Problem& p) { return size_t(p.shape.lse_elements()) * sizeof(float); }

// The API's size for a valid problem (the larger of backward's and forward's, for its splits). For the invalid ones of the argument tests (where
// backward_workspace_size() may itself refuse the shape) a generous stand-in of the documented
// layout, fp32 dQ accumulator plus row sums, twice over.
size_t workspace_bytes(const Problem& p) {
  const AttentionShape& s = p.shape;
  const bool valid = is_supported_head_dim(s.head_dim) && s.heads % s.heads_kv == 0;
  if (valid) {
    const AttentionShape args_shape = varlen_args_shape(p);
    return std::max(backward_workspace_size(args_shape, p.dtype, p.deterministic),
                    forward_workspace_size(args_shape, p.dtype, p.splits));
  }
  return 2 * (size_t(s.q_elements()) + size_t(s.lse_elements())) * sizeof(float);
}

}  // namespace

DeviceProblem::DeviceProblem(const Problem& p)
    : problem_(p),
      q_(zeroed(q_side_bytes(p))), k_(zeroed(kv_side_bytes(p))), v_(zeroed(kv_side_bytes(p))),
      out_(zeroed(q_side_bytes(p))), lse_(zeroed(lse_bytes(p))), dout_(zeroed(q_side_bytes(p))),
      dq_(zeroed(q_side_bytes(p))), dk_(zeroed(kv_side_bytes(p))), dv_(zeroed(kv_side_bytes(p))),
      workspace_(zeroed(workspace_bytes(p))) {
  if (!p.alibi_slopes.empty()) {
    alibi_slopes_ = DeviceBuffer(p.alibi_slopes.size() * sizeof(float));
    alibi_slopes_.copy_from_host(p.alibi_slopes.data());
  }
  if (p.varlen()) {
    for (const auto& [lengths, buffer] : {std::pair{&p.seqlens_q, &cu_seqlens_q_},
                                          std::pair{&p.seqlens_k, &cu_seqlens_k_}}) {
      const std::vector<int64_t> offsets = cumulative_offsets(*lengths);
      const std::vector<int32_t> offsets32(offsets.begin(), offsets.end());
      *buffer = DeviceBuffer(offsets32.size() * sizeof(int32_t));
      buffer->copy_from_host(offsets32.data());
      check_cuda(cudaDeviceSynchronize(), "uploading the sequence offsets");  // before they go
    }
  }
  check_cuda(cudaDeviceSynchronize(), "zero-filling the test tensors");
}

void DeviceProblem::upload(const CaseInputs& in) {
  q_.copy_from_host(in.q_bytes.data());
  k_.copy_from_host(in.k_bytes.data());
  v_.copy_from_host(in.v_bytes.data());
  dout_.copy_from_host(in.dout_bytes.data());
  check_cuda(cudaDeviceSynchronize(), "uploading the inputs");
}

namespace {

HostBytes download(const DeviceBuffer& buffer) {
  HostBytes host(buffer.bytes());
  buffer.copy_to_host(host.data());
  return host;
}

}  // namespace

HostForwardResult DeviceProblem::forward_result() const {
  check_cuda(cudaDeviceSynchronize(), "the forward pass");
  HostForwardResult result;
  result.out = download(out_);
  result.lse.resize(lse_.bytes() / sizeof(float));
  lse_.copy_to_host(result.lse.data());
  check_cuda(cudaDeviceSynchronize(), "downloading O and LSE");
  return result;
}

HostBackwardResult DeviceProblem::backward_result() const {
  check_cuda(cudaDeviceSynchronize(), "the backward pass");
  HostBackwardResult result{download(dq_), download(dk_), download(dv_)};
  check_cuda(cudaDeviceSynchronize(), "downloading dQ, dK and dV");
  return result;
}

DenseTensors DeviceProblem::tensors() const {
  DenseTensors t;
  t.q = q_.data();
  t.k = k_.data();
  t.v = v_.data();
  t.out = out_.data();
  t.lse = lse_.as<float>();
  t.dout = dout_.data();
  t.dq = dq_.data();
  t.dk = dk_.data();
  t.dv = dv_.data();
  t.workspace = workspace_.data();
  t.workspace_bytes = workspace_.bytes();
  t.alibi_slopes = alibi_slopes_.as<const float>();
  t.cu_seqlens_q = cu_seqlens_q_.as<const int32_t>();
  t.cu_seqlens_k = cu_seqlens_k_.as<const int32_t>();
  return t;
}

ForwardArgs DeviceProblem::forward_args() const {
  return cuflash::forward_args(problem_, tensors());
}

BackwardArgs DeviceProblem::backward_args() const {
  return cuflash::backward_args(problem_, tensors());
}

// --- All-pairs covering design ----------------------------------------------------------------

namespace {

// A pair of values of two factors: (factor a, level of a, factor b, level of b), a < b.
using ValuePair = std::tuple<int, int, int, int>;

std::vector<ValuePair> pairs_of(const DesignRow& row) {
  std::vector<ValuePair> pairs;
  for (int a = 0; a < static_cast<int>(row.size()); ++a)
    for (int b = a + 1; b < static_cast<int>(row.size()); ++b)
      pairs.emplace_back(a, row[a], b, row[b]);
  return pairs;
}

// Every row of the full product, in lexicographic order.
std::vector<DesignRow> full_product(const std::vector<int>& levels) {
  std::vector<DesignRow> rows{DesignRow{}};
  for (int count : levels) {
    std::vector<DesignRow> longer;
    for (const DesignRow& row : rows)
      for (int level = 0; level < count; ++level) {
        longer.push_back(row);
        longer.back().push_back(level);
      }
    rows = std::move(longer);
  }
  return rows;
}

std::set<ValuePair> all_pairs(const std::vector<int>& levels) {
  std::set<ValuePair> pairs;
  for (const DesignRow& row : full_product(levels))
    for (const ValuePair& pair : pairs_of(row)) pairs.insert(pair);
  return pairs;
}

int newly_covered(const DesignRow& row, const std::set<ValuePair>& uncovered) {
  int count = 0;
  for (const ValuePair& pair : pairs_of(row)) count += static_cast<int>(uncovered.count(pair));
  return count;
}

}  // namespace

std::vector<DesignRow> pairwise_design(const std::vector<int>& levels) {
  const std::vector<DesignRow> candidates = full_product(levels);
  std::set<ValuePair> uncovered = all_pairs(levels);
  std::vector<DesignRow> design;
  while (!uncovered.empty()) {
    const DesignRow* best = &candidates.front();
    int best_gain = -1;
    for (const DesignRow& row : candidates) {
      const int gain = newly_covered(row, uncovered);
      if (gain > best_gain) best = &row, best_gain = gain;  // first maximum: deterministic
    }
    for (const ValuePair& pair : pairs_of(*best)) uncovered.erase(pair);
    design.push_back(*best);
  }
  return design;
}

bool covers_all_pairs(const std::vector<DesignRow>& rows, const std::vector<int>& levels) {
  std::set<ValuePair> uncovered = all_pairs(levels);
  for (const DesignRow& row : rows)
    for (const ValuePair& pair : pairs_of(row)) uncovered.erase(pair);
  return uncovered.empty();
}

// --- Accuracy checks ----------------------------------------------------------------------------

namespace {

std::string format_error(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", value);
  return text;
}

// LSE is a float32 output for every dtype: max + log(sum of exp2) over float32 scores. With
// fp16/bf16 inputs the tensor cores form exact products and accumulate in float32; the fp32
// kernels use plain fp32 FMA (no TF32). The expected error is therefore ~1e-6 relative: float32
// rounding of the scores and of sums of up to a few thousand terms, and the ~2^-22 relative
// error of the hardware exp2. The bounds below leave a margin of 100x or more (1e-3 for the
// tensor-core path, whose float32 accumulation is not IEEE-rounded; 1e-4 for fp32), yet a
// structural error (a wrong scale, log base 2 instead of e, a missed block of keys) moves LSE
// far more. Relative to max(1, |LSE|) because LSE grows like log(seq_k).
double lse_relative_tolerance(DType dtype) { return dtype == DType::fp32 ? 1e-4 : 1e-3; }

}  // namespace

TensorCheck check_tensor(const std::string& name, DType dtype, const std::vector<double>& ours,
                         const std::vector<double>& baseline,
                         const std::vector<double>& reference) {
  const reference::ErrorStats our_error = reference::compare(ours, reference);
  const reference::ErrorStats baseline_error = reference::compare(baseline, reference);
  const double floor = reference::default_floor(dtype);

  TensorCheck check;
  // within_tolerance() also fails any non-finite value (NaN never passes).
  check.pass = reference::within_tolerance(our_error, baseline_error, floor);
  check.report = name + ": max_abs " + format_error(our_error.max_abs) + " (rel_l2 " +
                 format_error(our_error.rel_l2) + "), baseline max_abs " +
                 format_error(baseline_error.max_abs) + ", limit " +
                 format_error(reference::tolerance(our_error, baseline_error, floor)) +
                 ", non-finite " + std::to_string(our_error.nonfinite);
  return check;
}

TensorCheck check_lse(DType dtype, const std::vector<float>& ours,
                      const std::vector<double>& reference) {
  TensorCheck check;
  if (ours.size() != reference.size()) {
    check.report = "lse: " + std::to_string(ours.size()) + " values, expected " +
                   std::to_string(reference.size());
    return check;
  }
  size_t failures = 0;
  double worst = 0.0;  // largest |ours - reference| over the finite reference values
  for (size_t i = 0; i < ours.size(); ++i) {
    const double expected = reference[i];
    const double actual = ours[i];
    if (std::isinf(expected) && expected > 0) {  // a row that sees no key
      failures += actual == expected ? 0 : 1;
      continue;
    }
    const double error = std::abs(actual - expected);  // NaN compares false below: a failure
    const double tolerance = lse_relative_tolerance(dtype) * std::max(1.0, std::abs(expected));
    if (!(error <= tolerance)) ++failures;
    if (std::isfinite(error)) worst = std::max(worst, error);
  }
  check.pass = failures == 0;
  check.report = "lse: max_abs " + format_error(worst) + " (limit " +
                 format_error(lse_relative_tolerance(dtype)) + " x max(1, |lse|)), failing rows " +
                 std::to_string(failures);
  return check;
}

double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;  // equal infinities included
    const double difference = std::abs(a[i] - b[i]);
    worst = std::isfinite(difference) ? std::max(worst, difference)
                                      : std::numeric_limits<double>::infinity();
  }
  return worst;
}

std::vector<TensorCheck> run_and_check(const Problem& c, uint64_t seed) {
  return run_and_check(c, make_inputs(c, seed));
}

ExpectedResults expected_results(const Problem& c, const CaseInputs& in) {
  ExpectedResults e;
  e.ref_fwd = reference::forward(c, in.q, in.k, in.v);
  e.ref_grad = reference::backward(c, in.q, in.k, in.v, e.ref_fwd, in.dout);
  e.base_fwd = reference::baseline::forward(c, in.q, in.k, in.v);
  e.base_grad = reference::baseline::backward(c, in.q, in.k, in.v, e.base_fwd, in.dout);
  return e;
}

std::vector<TensorCheck> check_results(const Problem& c, const HostForwardBackwardResult& gpu,
                                       const ExpectedResults& e) {
  return {
      check_tensor("O", c.dtype, q_side_values(c, gpu.forward.out), e.base_fwd.out, e.ref_fwd.out),
      check_lse(c.dtype, gpu.forward.lse, e.ref_fwd.lse),
      check_tensor("dQ", c.dtype, q_side_values(c, gpu.backward.dq), e.base_grad.dq,
                   e.ref_grad.dq),
      check_tensor("dK", c.dtype, kv_side_values(c, gpu.backward.dk), e.base_grad.dk,
                   e.ref_grad.dk),
      check_tensor("dV", c.dtype, kv_side_values(c, gpu.backward.dv), e.base_grad.dv,
                   e.ref_grad.dv),
  };
}

std::vector<TensorCheck> run_and_check(const Problem& c, const CaseInputs& in) {
  const HostForwardBackwardResult gpu =
      run_forward_backward(c, in.q_bytes, in.k_bytes, in.v_bytes, in.dout_bytes);
  return check_results(c, gpu, expected_results(c, in));
}

std::vector<TensorCheck> run_and_check_forward(const Problem& c, uint64_t seed) {
  const CaseInputs in = make_inputs(c, seed);
  const HostForwardResult gpu = run_forward(c, in.q_bytes, in.k_bytes, in.v_bytes);
  const reference::ForwardResult ref = reference::forward(c, in.q, in.k, in.v);
  const reference::ForwardResult base = reference::baseline::forward(c, in.q, in.k, in.v);
  return {check_tensor("O", c.dtype, q_side_values(c, gpu.out), base.out, ref.out),
          check_lse(c.dtype, gpu.lse, ref.lse)};
}

// --- Which kernels ran --------------------------------------------------------------------------

bool launch_choices_known_here() {
  int device = 0;
  int multiprocessors = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device) ==
             cudaSuccess &&
         multiprocessors == 132 && std::string(tensor_core_kernels(device)) == "wgmma";
}

std::vector<KernelLaunch> launches_of(const LaunchRecord& record, const std::string& call) {
  std::vector<KernelLaunch> launches;
  for (const KernelLaunch& launch : record.launches()) {
    if (launch.call == call) launches.push_back(launch);
  }
  return launches;
}

bool starts_with(const std::string& kernel, const std::string& prefix) {
  return kernel.rfind(prefix, 0) == 0;
}

std::vector<std::string> template_arguments(const std::string& kernel) {
  std::vector<std::string> arguments;
  const size_t open = kernel.find('<');
  if (open == std::string::npos || kernel.back() != '>') return arguments;
  const std::string list = kernel.substr(open + 1, kernel.size() - open - 2);
  for (size_t begin = 0; begin <= list.size();) {
    const size_t comma = std::min(list.find(", ", begin), list.size());
    arguments.push_back(list.substr(begin, comma - begin));
    begin = comma + 2;
  }
  return arguments;
}

void check_backward_on_blocks_of_80(const LaunchRecord& record, bool deterministic) {
  if (!launch_choices_known_here()) {
    WARN("the backward kernel is not checked: it is known for wgmma on 132 SMs");
    return;
  }
  const std::string flag = deterministic ? "true" : "false";
  size_t wgmma_launches = 0;
  for (const KernelLaunch& launch : launches_of(record, "backward")) {
    if (!starts_with(launch.kernel, "sm90::backward_kernel<")) continue;
    ++wgmma_launches;
    INFO(launch.kernel);
    const std::vector<std::string> arguments = template_arguments(launch.kernel);
    REQUIRE(arguments.size() >= 7);
    CHECK(std::vector<std::string>(arguments.begin() + 2, arguments.begin() + 7) ==
          std::vector<std::string>{"false", flag, "false", "false", "true"});
  }
  CHECK(wgmma_launches == 1);
}

bool forward_walked(const Problem& p, const KernelLaunch& launch) {
  if (!starts_with(launch.kernel, "sm90::forward_kernel<")) return false;
  const bool tall = launch.kernel.find(kTallForwardConfig) != std::string::npos;
  const int64_t rows = tall ? 192 : 128;
  const int64_t tiles = (p.shape.seq_q + rows - 1) / rows * p.shape.batch * p.shape.heads;
  const int64_t ctas = int64_t(launch.grid[0]) * launch.grid[1] * launch.grid[2];
  return ctas < tiles;
}

// --- Errors -------------------------------------------------------------------------------------

namespace {

const char* kind_name(Error::Kind kind) {
  switch (kind) {
    case Error::Kind::invalid_argument: return "invalid_argument";
    case Error::Kind::unsupported: return "unsupported";
    case Error::Kind::cuda: return "cuda";
    case Error::Kind::out_of_memory: return "out_of_memory";
    case Error::Kind::no_device: return "no_device";
  }
  return "?";
}

}  // namespace

void require_error(const std::function<void()>& call, Error::Kind kind, const std::string& word) {
  try {
    call();
  } catch (const Error& error) {
    INFO("message: " << error.what());
    CHECK(std::string(kind_name(error.kind())) == kind_name(kind));
    CHECK_THAT(error.what(), Catch::Contains(word));
    return;
  }
  FAIL("expected a cuflash::Error (" << kind_name(kind) << ") naming '" << word
                                      << "'; nothing was thrown");
}

}  // namespace cuflash::gpu_test
