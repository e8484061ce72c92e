// `cuflash run`: compute forward (and with --backward, dQ/dK/dV) for one case, on the GPU or the
// CPU reference; print a summary of each output tensor and optionally write them as .npy files.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "cli/attention_case.h"
#include "cli/backends.h"
#include "cli/compute_progress.h"
#include "cli/exit_codes.h"
#include "cli/interrupt.h"
#include "cli/memory_check.h"
#include "commands/commands.h"
#include "cuflash/io/convert.h"

namespace cuflash::cli {

namespace {

struct RunOptions {
  ProblemOptions problem;
  std::string backend = "auto";
  bool backward = false;
  std::string out_dir;
  bool save_inputs = false;
};

// One tensor to report and maybe save: values in bhsd order plus how to store them.
struct NamedTensor {
  std::string name;
  const std::vector<double>* values;
  int64_t heads, seq;  // lse: heads and seq_q; head_dim is dropped
  bool is_lse;
};

struct TensorStats {
  double mean = 0, rms = 0, abs_max = 0;
  int64_t nonfinite = 0;
};

TensorStats stats_of(const std::vector<double>& values, bool is_lse) {
  TensorStats s;
  int64_t finite = 0;
  for (const double x : values) {
    if (!std::isfinite(x)) {
      // LSE is +inf by definition for rows that see no key; that is not a defect.
      if (!(is_lse && x == INFINITY)) ++s.nonfinite;
      continue;
    }
    ++finite;
    s.mean += x;
    s.rms += x * x;
    s.abs_max = std::max(s.abs_max, std::abs(x));
  }
  if (finite > 0) {
    s.mean /= double(finite);
    s.rms = std::sqrt(s.rms / double(finite));
  }
  return s;
}

std::vector<int64_t> stored_shape(const Problem& p, const NamedTensor& t) {
  if (t.is_lse) return {p.shape.batch, t.heads, t.seq};
  return layout_shape(p.shape.batch, t.heads, t.seq, p.shape.head_dim, p.layout);
}

io::NpyArray to_npy(const Problem& p, const NamedTensor& t) {
  const std::vector<int64_t> shape = stored_shape(p, t);
  if (t.is_lse) return io::from_double(*t.values, shape, io::ElementType::f32);
  return io::from_double(
      bhsd_to_layout(*t.values, p.shape.batch, t.heads, t.seq, p.shape.head_dim, p.layout),
      shape, io::element_type(p.dtype));
}

// The output folder, made before the (possibly long) computation so that an unusable --out-dir
// fails at once; the folders made here are removed again if the run fails before writing.
class OutputDir {
 public:
  explicit OutputDir(const std::string& dir) {
    if (dir.empty()) return;
    // Remember which folders of the path do not exist yet, deepest first.
    for (std::filesystem::path p = std::filesystem::absolute(dir); !p.empty() && p != p.root_path();
         p = p.parent_path()) {
      if (std::filesystem::exists(p)) break;
      created_.push_back(p);
    }
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec || !std::filesystem::is_directory(dir)) {
      throw RuntimeFailure("--out-dir " + dir + ": cannot create directory" +
                           (ec ? ": " + ec.message() : std::string()));
    }
  }
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;
  ~OutputDir() {
    if (kept_) return;
    std::error_code ec;
    for (const auto& p : created_) std::filesystem::remove(p, ec);  // removes empty folders only
  }
  void keep() { kept_ = true; }

 private:
  std::vector<std::filesystem::path> created_;
  bool kept_ = false;
};

// Writes every tensor or none: on a failure the files written so far are removed again.
void write_all(const std::string& dir, const Problem& p, const std::vector<NamedTensor>& ts) {
  std::error_code ec;
  std::vector<std::string> written;
  try {
    for (const NamedTensor& t : ts) {
      const std::string path = (std::filesystem::path(dir) / (t.name + ".npy")).string();
      io::write_npy(path, to_npy(p, t));
      written.push_back(path);
    }
  } catch (const std::exception& e) {
    for (const std::string& path : written) std::filesystem::remove(path, ec);
    throw RuntimeFailure(std::string("--out-dir: ") + e.what());
  }
}

std::vector<NamedTensor> outputs_of(const Problem& p, const AttentionResult& r) {
  const AttentionShape& s = p.shape;
  std::vector<NamedTensor> ts{{"o", &r.out, s.heads, s.seq_q, false},
                              {"lse", &r.lse, s.heads, s.seq_q, true}};
  if (!r.dq.empty()) {
    ts.push_back({"dq", &r.dq, s.heads, s.seq_q, false});
    ts.push_back({"dk", &r.dk, s.heads_kv, s.seq_k, false});
    ts.push_back({"dv", &r.dv, s.heads_kv, s.seq_k, false});
  }
  return ts;
}

// Gradients an earlier `run --backward` may have left in the folder: this run does not touch
// them, so say so rather than let them pass for this run's results. (Input names are left out:
// the folder may hold the very files this run read.)
void warn_of_stale_gradients(const std::string& dir, const std::vector<NamedTensor>& written) {
  for (const char* name : {"dq", "dk", "dv"}) {
    const bool wrote = std::any_of(written.begin(), written.end(),
                                   [&](const NamedTensor& t) { return t.name == name; });
    const std::filesystem::path path = std::filesystem::path(dir) / (std::string(name) + ".npy");
    std::error_code ec;
    if (!wrote && std::filesystem::exists(path, ec)) {
      spdlog::warn("{} is from an earlier run (this one has no backward pass); delete it or use "
                   "another --out-dir",
                   path.string());
    }
  }
}

std::vector<NamedTensor> inputs_of(const Problem& p, const CaseInputs& in) {
  const AttentionShape& s = p.shape;
  std::vector<NamedTensor> ts{{"q", &in.q, s.heads, s.seq_q, false},
                              {"k", &in.k, s.heads_kv, s.seq_k, false},
                              {"v", &in.v, s.heads_kv, s.seq_k, false}};
  if (!in.dout.empty()) ts.push_back({"dout", &in.dout, s.heads, s.seq_q, false});
  return ts;
}

Record tensor_record(const Problem& p, Backend backend, const NamedTensor& t,
                     const std::string& out_dir) {
  const TensorStats s = stats_of(*t.values, t.is_lse);
  Record r;
  r.add("tensor", t.name)
      .add("shape", format_shape(stored_shape(p, t)))
      .add("dtype", t.is_lse ? std::string("fp32") : std::string(to_string(p.dtype)))
      .add("backend", to_string(backend))
      .add("mean", s.mean)
      .add("rms", s.rms)
      .add("abs_max", s.abs_max)
      .add("nonfinite", s.nonfinite);
  if (!out_dir.empty()) {
    r.add("file", (std::filesystem::path(out_dir) / (t.name + ".npy")).string());
  }
  return r;
}

// The steps of `run`, cheapest checks first: what needs no GPU (options, shape, the headers of
// input files), the output folder, the device, the memory, and only then the inputs, the
// computation and the files.
int run_steps(const RunOptions& o, const GlobalOptions& global) {
  // 1. The options and the shape, files' headers included: exit 2 before anything else.
  if (o.save_inputs && o.out_dir.empty()) throw UsageError("--save-inputs needs --out-dir");
  if (!o.problem.dout_file.empty() && !o.backward) throw UsageError("--dout needs --backward");
  Problem p;
  if (o.problem.has_input_files()) {
    p = describe_inputs(o.problem, o.backward);
  } else {
    if (!o.problem.dout_file.empty()) throw UsageError("--dout needs --q, --k and --v");
    require_single_values(o.problem, "run");
    p = expand_cases(o.problem).front();
  }
  if (o.backend == "cuda") require_gpu_support(p);

  // 2. The output folder.
  OutputDir out_dir(o.out_dir);

  // 3. The device, 4. the memory the case needs.
  const Backend backend = resolve_backend(o.backend);
  if (backend == Backend::cuda) require_gpu_support(p);
  if (o.backend == "auto" && backend == Backend::cpu) {
    spdlog::warn("no CUDA device found: computing on the CPU reference (float64) instead");
  }
  check_run_memory(p, o.backward, backend);

  // 5. The inputs, 6. the computation; Ctrl-C stops either.
  const auto stop_if_interrupted = [] { throw_if_interrupted("while preparing the inputs"); };
  const CaseInputs inputs =
      o.problem.has_input_files()
          ? load_inputs(o.problem, p, o.backward, stop_if_interrupted)
          : generate_inputs(p, o.problem.seed, o.backward, stop_if_interrupted);
  spdlog::info("{} {} on {}", o.backward ? "forward+backward" : "forward", case_label(p),
               to_string(backend));
  AttentionResult result;
  {
    ComputeProgress progress(!global.quiet);
    result = compute(backend, p, inputs, o.backward, progress.callback());
  }
  throw_if_interrupted("while computing");
  spdlog::info("computed in {:.3f} s", result.seconds);

  std::vector<NamedTensor> tensors = outputs_of(p, result);
  if (!o.out_dir.empty()) {
    std::vector<NamedTensor> to_write = tensors;
    if (o.save_inputs) {
      for (const NamedTensor& t : inputs_of(p, inputs)) to_write.push_back(t);
    }
    write_all(o.out_dir, p, to_write);
    out_dir.keep();
    spdlog::info("wrote {} files to {}", to_write.size(), o.out_dir);
    warn_of_stale_gradients(o.out_dir, to_write);
  }
  std::vector<Record> records;
  for (const NamedTensor& t : tensors) records.push_back(tensor_record(p, backend, t, o.out_dir));
  print_records(records, global.output_format());
  return kExitOk;
}

int run_command(const RunOptions& o, const GlobalOptions& global) {
  const InterruptScope interrupts;  // Ctrl-C and SIGTERM only set a flag the steps poll
  try {
    return run_steps(o, global);
  } catch (const Interrupted& e) {  // nothing was written; a folder this run made is removed
    if (o.out_dir.empty()) throw;
    throw Interrupted(std::string(e.what()) + "; --out-dir " + o.out_dir + " is left as it was");
  }
}

}  // namespace

void setup_run(CLI::App& app, const GlobalOptions& global, CommandResult& result) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Compute attention for one case (generated or from .npy files) and summarise it");
  cmd->footer(std::string("Example: cuflash run -b 2 --heads 4 -s 257 -d 64 --dtype bf16 --causal "
                          "--backward --out-dir out\n") + kExitCodeHelp);
  add_problem_options(*cmd, options->problem, /*allow_lists=*/false);
  cmd->add_option("--backend", options->backend,
                  "auto (GPU when present, else CPU), cuda, or cpu (float64 reference)")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  cmd->add_flag("--backward", options->backward, "Also compute dQ, dK, dV");
  cmd->add_option("--out-dir", options->out_dir,
                  "Write o.npy, lse.npy (and dq/dk/dv.npy) into this folder");
  cmd->add_flag("--save-inputs", options->save_inputs,
                "With --out-dir: also write q.npy, k.npy, v.npy (and dout.npy)");
  cmd->callback([options, &global, &result] { result.exit_code = run_command(*options, global); });
}

}  // namespace cuflash::cli
