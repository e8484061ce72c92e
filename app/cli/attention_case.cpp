#include "cli/attention_case.h"

#include "cli/exit_codes.h"
#include "cuflash/io/convert.h"
#include "cuflash/io/random_inputs.h"

namespace cuflash::cli {

namespace {

// A --q/--k/--v/--dout file as its header describes it.
struct TensorFile {
  io::NpyInfo info;
  std::string path;
  std::string option;  // e.g. "--q"
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

TensorFile inspect_tensor(const std::string& path, const std::string& option, Layout layout) {
  try {
    TensorFile t{io::read_npy_info(path), path, option};
    if (layout == Layout::thd && t.info.shape.size() != 3) {
      throw UsageError(option + " " + path + ": expected a 3-D array [tokens, heads, head_dim] " +
                       "with --layout thd, got " + std::to_string(t.info.shape.size()) + "-D");
    }
    if (layout != Layout::thd && t.info.shape.size() != 4) {
      throw UsageError(option + " " + path + ": expected a 4-D array [batch, heads, seq, " +
                       "head_dim] (or [batch, seq, heads, head_dim] with --layout bshd, " +
                       "[tokens, heads, head_dim] with --layout thd), got " +
                       std::to_string(t.info.shape.size()) + "-D");
    }
    for (const int64_t dim : t.info.shape) {
      if (dim <= 0) {
        throw UsageError(option + " " + path + ": every dimension must be positive, got " +
                         shape_text(t.info.shape));
      }
    }
    return t;
  } catch (const io::NpyError& e) {
    throw UsageError(option + " " + std::string(e.what()));
  }
}

// [batch, heads, seq, head_dim] of a tensor, whatever its layout.
struct Dims {
  int64_t batch, heads, seq, head_dim;
};

Dims dims_of(const std::vector<int64_t>& s, Layout layout) {
  switch (layout) {
    case Layout::bhsd: return Dims{s[0], s[1], s[2], s[3]};
    case Layout::bshd: return Dims{s[0], s[2], s[1], s[3]};
    case Layout::thd: break;
  }
  return Dims{1, s[1], s[0], s[2]};  // the packed tokens of a varlen batch
}

DType dtype_of(const TensorFile& t) {
  switch (t.info.type) {
    case io::ElementType::f16: return DType::fp16;
    case io::ElementType::bf16: return DType::bf16;
    case io::ElementType::f32: return DType::fp32;
    case io::ElementType::f64: break;
  }
  throw UsageError(t.option + " " + t.path +
                   ": float64 arrays are not accepted; save as float16, bfloat16 or float32");
}

std::string type_text(io::ElementType type) {
  switch (type) {
    case io::ElementType::f16: return "float16";
    case io::ElementType::bf16: return "bfloat16";
    case io::ElementType::f32: return "float32";
    case io::ElementType::f64: return "float64";
  }
  return "?";
}

// Throws when b's `what` (part of its shape) differs from a's, showing both shapes.
void require_same(const TensorFile& a, const TensorFile& b, bool same_value, const char* what) {
  if (!same_value) {
    throw UsageError(b.option + " " + b.path + ": " + what + " disagrees with " + a.option + " " +
                     a.path + " (" + shape_text(b.info.shape) + " vs " +
                     shape_text(a.info.shape) + ")");
  }
}

// Throws when b's element type differs from a's, showing both.
void require_same_dtype(const TensorFile& a, const TensorFile& b) {
  if (b.info.type != a.info.type) {
    throw UsageError(b.option + " " + b.path + ": dtype disagrees with " + a.option + " " +
                     a.path + " (" + type_text(b.info.type) + " vs " + type_text(a.info.type) +
                     ")");
  }
}

// The array of a file, which must still hold an array of `type` and `shape`.
io::NpyArray read_stored(const std::string& path, const std::string& option,
                         io::ElementType type, const std::vector<int64_t>& shape) {
  io::NpyArray array;
  try {
    array = io::read_npy(path);
  } catch (const io::NpyError& e) {
    throw UsageError(option + " " + std::string(e.what()));
  }
  if (array.type != type || array.shape != shape) {
    throw UsageError(option + " " + path + ": the file changed while cuflash was reading it");
  }
  return array;
}

// Tensor `tensor` of `p` generated from `seed`, in its stored form.
io::NpyArray generated(const Problem& p, io::InputTensor tensor, uint64_t seed) {
  const AttentionShape& s = p.shape;
  const bool q_side = tensor == io::InputTensor::q || tensor == io::InputTensor::dout;
  io::NpyArray array;
  array.type = io::element_type(p.dtype);
  array.shape = layout_shape(s.batch, q_side ? s.heads : s.heads_kv, q_side ? s.seq_q : s.seq_k,
                             s.head_dim, p.layout);
  array.bytes = io::random_input_bytes(p, tensor, seed);
  return array;
}

}  // namespace

ReferenceInputs reference_inputs(const Problem& p, const CaseInputs& in) {
  ReferenceInputs r;
  r.q = io::to_bhsd_values(in.q, p.layout);
  r.k = io::to_bhsd_values(in.k, p.layout);
  r.v = io::to_bhsd_values(in.v, p.layout);
  if (!in.dout.bytes.empty()) r.dout = io::to_bhsd_values(in.dout, p.layout);
  return r;
}

CaseInputs generate_inputs(const Problem& p, uint64_t seed, bool with_dout,
                           const BeforeTensor& before) {
  const auto generate = [&](io::InputTensor tensor) {
    if (before) before();
    return generated(p, tensor, seed);
  };
  CaseInputs in;
  in.q = generate(io::InputTensor::q);
  in.k = generate(io::InputTensor::k);
  in.v = generate(io::InputTensor::v);
  if (with_dout) in.dout = generate(io::InputTensor::dout);
  return in;
}

Problem describe_inputs(const ProblemOptions& options, bool with_dout) {
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
  const TensorFile q = inspect_tensor(options.q_file, "--q", layout);
  const TensorFile k = inspect_tensor(options.k_file, "--k", layout);
  const TensorFile v = inspect_tensor(options.v_file, "--v", layout);
  const Dims dq = dims_of(q.info.shape, layout), dk = dims_of(k.info.shape, layout);
  require_same_dtype(q, k);
  require_same_dtype(q, v);
  require_same(q, k, dk.batch == dq.batch, "batch size");
  require_same(q, k, dk.head_dim == dq.head_dim, "head_dim");
  require_same(k, v, v.info.shape == k.info.shape, "shape");
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
  p.splits = options.splits.front();
  p.deterministic = options.deterministic;
  p.ranks = static_cast<int>(options.ranks);  // at most kMaxRanks (the option's validator)
  p.gpus = static_cast<int>(options.gpus);    // likewise
  p.page_size = options.page_size.front();
  p.cache_seqlens = options.cache_seqlens;
  apply_varlen_options(options, p);
  apply_variant_options(options, p);
  check_case_size(p);

  if (with_dout && !options.dout_file.empty()) {
    const TensorFile dout = inspect_tensor(options.dout_file, "--dout", layout);
    require_same(q, dout, dout.info.shape == q.info.shape, "shape");
    require_same_dtype(q, dout);
  }
  return p;
}

CaseInputs load_inputs(const ProblemOptions& options, const Problem& p, bool with_dout,
                       const BeforeTensor& before) {
  const AttentionShape& s = p.shape;
  const io::ElementType type = io::element_type(p.dtype);
  const auto read = [&](const std::string& path, const char* option, int64_t heads, int64_t seq) {
    if (before) before();
    return read_stored(path, option, type, layout_shape(s.batch, heads, seq, s.head_dim, p.layout));
  };
  CaseInputs inputs;
  inputs.q = read(options.q_file, "--q", s.heads, s.seq_q);
  inputs.k = read(options.k_file, "--k", s.heads_kv, s.seq_k);
  inputs.v = read(options.v_file, "--v", s.heads_kv, s.seq_k);
  if (with_dout) {
    if (options.dout_file.empty()) {
      if (before) before();
      inputs.dout = generated(p, io::InputTensor::dout, options.seed);
    } else {
      inputs.dout = read(options.dout_file, "--dout", s.heads, s.seq_q);
    }
  }
  return inputs;
}

std::vector<int64_t> layout_shape(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim,
                                  Layout layout) {
  if (layout == Layout::bhsd) return {batch, heads, seq, head_dim};
  if (layout == Layout::thd) return {seq, heads, head_dim};  // batch 1: the packed tokens
  return {batch, seq, heads, head_dim};
}

}  // namespace cuflash::cli
