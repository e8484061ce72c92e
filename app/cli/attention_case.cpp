#include "cli/attention_case.h"

#include "cli/exit_codes.h"
#include "cuflash/io/convert.h"
#include "cuflash/io/random_inputs.h"
#include "cuflash/numeric.h"

namespace cuflash::cli {

namespace {

struct LoadedTensor {
  io::NpyArray array;
  std::string path;
  std::string option;  // e.g. "--q"
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

LoadedTensor load_tensor(const std::string& path, const std::string& option) {
  try {
    LoadedTensor t{io::read_npy(path), path, option};
    if (t.array.shape.size() != 4) {
      throw UsageError(option + " " + path + ": expected a 4-D array [batch, heads, seq, " +
                       "head_dim] (or [batch, seq, heads, head_dim] with --layout bshd), got " +
                       std::to_string(t.array.shape.size()) + "-D");
    }
    for (const int64_t dim : t.array.shape) {
      if (dim <= 0) {
        throw UsageError(option + " " + path + ": every dimension must be positive, got " +
                         shape_text(t.array.shape));
      }
    }
    return t;
  } catch (const io::NpyError& e) {
    throw UsageError(option + " " + std::string(e.what()));
  }
}


// [batch, heads, seq, head_dim] of a loaded tensor, whatever its layout.
struct Dims {
  int64_t batch, heads, seq, head_dim;
};

Dims dims_of(const io::NpyArray& a, Layout layout) {
  const auto& s = a.shape;
  return layout == Layout::bhsd ? Dims{s[0], s[1], s[2], s[3]} : Dims{s[0], s[2], s[1], s[3]};
}

DType dtype_of(const LoadedTensor& t) {
  switch (t.array.type) {
    case io::ElementType::f16: return DType::fp16;
    case io::ElementType::bf16: return DType::bf16;
    case io::ElementType::f32: return DType::fp32;
    case io::ElementType::f64: break;
  }
  throw UsageError(t.option + " " + t.path +
                   ": float64 arrays are not accepted; save as float16, bfloat16 or float32");
}

std::string type_text(const io::NpyArray& a) {
  switch (a.type) {
    case io::ElementType::f16: return "float16";
    case io::ElementType::bf16: return "bfloat16";
    case io::ElementType::f32: return "float32";
    case io::ElementType::f64: return "float64";
  }
  return "?";
}

// Throws when b's `what` (part of its shape) differs from a's, showing both shapes.
void require_same(const LoadedTensor& a, const LoadedTensor& b, bool same_value, const char* what) {
  if (!same_value) {
    throw UsageError(b.option + " " + b.path + ": " + what + " disagrees with " + a.option + " " +
                     a.path + " (" + shape_text(b.array.shape) + " vs " +
                     shape_text(a.array.shape) + ")");
  }
}

// Throws when b's element type differs from a's, showing both.
void require_same_dtype(const LoadedTensor& a, const LoadedTensor& b) {
  if (b.array.type != a.array.type) {
    throw UsageError(b.option + " " + b.path + ": dtype disagrees with " + a.option + " " +
                     a.path + " (" + type_text(b.array) + " vs " + type_text(a.array) + ")");
  }
}

std::vector<double> values_bhsd(const LoadedTensor& t, Layout layout) {
  const Dims d = dims_of(t.array, layout);
  return layout_to_bhsd(io::to_double(t.array), d.batch, d.heads, d.seq, d.head_dim, layout);
}

}  // namespace

void round_to_dtype(std::vector<double>& values, DType dtype) {
  for (double& x : values) {
    const float f = static_cast<float>(x);
    x = dtype == DType::fp16   ? numeric::round_to_half(f)
        : dtype == DType::bf16 ? numeric::round_to_bf16(f)
                               : f;
  }
}

CaseInputs generate_inputs(const Problem& p, uint64_t seed, bool with_dout) {
  CaseInputs in;
  in.q = io::random_input_values(p, io::InputTensor::q, seed);
  in.k = io::random_input_values(p, io::InputTensor::k, seed);
  in.v = io::random_input_values(p, io::InputTensor::v, seed);
  if (with_dout) in.dout = io::random_input_values(p, io::InputTensor::dout, seed);
  return in;
}

Problem load_inputs(const ProblemOptions& options, bool with_dout, CaseInputs& inputs) {
  if (options.q_file.empty() || options.k_file.empty() || options.v_file.empty()) {
    throw UsageError("--q, --k and --v must be given together");
  }
  if (!options.shape_options_given.empty()) {
    const std::string& name = options.shape_options_given.front();
    throw UsageError(name + " cannot be used with --q/--k/--v: shape and dtype come from the "
                     "files (drop " + name + ")");
  }
  require_single_values(options, "run");
  const Layout layout = parse_layout(options.layout.front());
  const LoadedTensor q = load_tensor(options.q_file, "--q");
  const LoadedTensor k = load_tensor(options.k_file, "--k");
  const LoadedTensor v = load_tensor(options.v_file, "--v");
  const Dims dq = dims_of(q.array, layout), dk = dims_of(k.array, layout);
  require_same_dtype(q, k);
  require_same_dtype(q, v);
  require_same(q, k, dk.batch == dq.batch, "batch size");
  require_same(q, k, dk.head_dim == dq.head_dim, "head_dim");
  require_same(k, v, v.array.shape == k.array.shape, "shape");
  if (dq.heads % dk.heads != 0) {
    throw UsageError("--k " + k.path + ": " + std::to_string(dk.heads) +
                     " key/value heads do not divide the " + std::to_string(dq.heads) +
                     " query heads of --q " + q.path);
  }

  Problem p;
  p.shape = AttentionShape{dq.batch, dq.heads, dk.heads, dq.seq, dk.seq, dq.head_dim};
  p.dtype = dtype_of(q);
  p.mask = options.causal ? Mask::causal_bottom_right : parse_mask(options.mask.front());
  p.scale = options.scale.value_or(0.0);
  p.layout = layout;
  check_case_size(p);

  inputs.q = values_bhsd(q, layout);
  inputs.k = values_bhsd(k, layout);
  inputs.v = values_bhsd(v, layout);
  if (with_dout) {
    if (options.dout_file.empty()) {
      inputs.dout = io::random_input_values(p, io::InputTensor::dout, options.seed);
    } else {
      const LoadedTensor dout = load_tensor(options.dout_file, "--dout");
      require_same(q, dout, dout.array.shape == q.array.shape, "shape");
      require_same_dtype(q, dout);
      inputs.dout = values_bhsd(dout, layout);
    }
  }
  return p;
}

std::vector<int64_t> layout_shape(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim,
                                  Layout layout) {
  if (layout == Layout::bhsd) return {batch, heads, seq, head_dim};
  return {batch, seq, heads, head_dim};
}

std::vector<double> bhsd_to_layout(const std::vector<double>& bhsd, int64_t batch, int64_t heads,
                                   int64_t seq, int64_t head_dim, Layout layout) {
  if (layout == Layout::bhsd) return bhsd;
  return io::swap_middle_axes(bhsd, batch, heads, seq, head_dim);
}

std::vector<double> layout_to_bhsd(const std::vector<double>& in_layout, int64_t batch,
                                   int64_t heads, int64_t seq, int64_t head_dim, Layout layout) {
  if (layout == Layout::bhsd) return in_layout;
  return io::swap_middle_axes(in_layout, batch, seq, heads, head_dim);
}

}  // namespace cuflash::cli
